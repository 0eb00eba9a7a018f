"""Cross-client matrix: what each client produces, every other client consumes intact.

Producers and consumers: the C++ client 2.1.0 (cpp2), the C++ client 1.x (cpp1),
ali-ons 3.12.0 (node) and rmq's own side (rmq.client when usable, else raw
SEND_MESSAGE_V2 / PULL_MESSAGE; see ``RmqSide``). One topic: every producer sends
half of its messages before the consumers start (a new group starts at offset 0,
message 0 being in memory) and half after (long polling); every consumer (its own
group) must get all messages of all producers. The matrix runs once per module;
each (producer, consumer) cell is its own test, so a failure names the pair.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.interop.conftest import (
    CLIENTS,
    Clients,
    Cluster,
    ConsumeIncomplete,
    RmqSide,
    check_messages,
    check_sent,
    require_client,
    rmq_side,
    unique_name,
)

pytestmark = pytest.mark.timeout(240)

PARTIES = (*CLIENTS, "rmq")
PER_PRODUCER = 12  # 6 before the consumers start, 6 after
TAGS = ["TagA", "TagB", "TagC"]


def props_of(producer: str) -> dict[str, str]:
    return {"src": producer, "shared": "same-for-all", "eq": "a=b"}


PROPERTY_KEYS = sorted(props_of("x"))


class Matrix:
    def __init__(self) -> None:
        self.topic = ""
        self.sent: dict[str, list[dict[str, Any]]] = {}
        self.produce_errors: dict[str, str] = {}
        self.received: dict[str, list[dict[str, Any]]] = {}
        self.consume_errors: dict[str, str] = {}
        self.truth: dict[str, Any] = {}
        self.rmq_mode = ""


def _produce(
    clients: Clients, rmq: RmqSide, cluster: Cluster, party: str, topic: str, start: int, n: int
) -> list[dict[str, Any]]:
    kw: dict[str, Any] = dict(
        tags=TAGS, keys_prefix=f"{party}-key-", props=props_of(party), body_prefix=f"{party}-body-", start_index=start
    )
    if party == "rmq":
        return rmq.produce(topic, unique_name("x-rmq-pg"), n, **kw)
    return clients.produce(party, cluster.namesrv_addr, topic, unique_name(f"x-{party}-pg"), n, **kw)


@pytest.fixture(scope="module")
def matrix(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    for c in CLIENTS:
        require_client(c)
    mx = Matrix()
    mx.topic = topic = unique_name("cross")
    cluster.create_topic(topic)
    clients = Clients(Path(tmp_path_factory.mktemp("cross-drivers")))
    rmq = rmq_side(cluster)
    mx.rmq_mode = rmq.mode
    half = PER_PRODUCER // 2
    try:

        def produce_round(start: int) -> None:
            with concurrent.futures.ThreadPoolExecutor(len(PARTIES)) as ex:
                futs = {
                    p: ex.submit(_produce, clients, rmq, cluster, p, topic, start, half)
                    for p in PARTIES
                    if p not in mx.produce_errors
                }
                for p, f in futs.items():
                    try:
                        mx.sent.setdefault(p, []).extend(f.result())
                    except Exception as e:  # reported by the cells
                        mx.produce_errors[p] = f"{type(e).__name__}: {e}"

        produce_round(0)
        consumers = {
            c: clients.consumer(
                c,
                cluster.namesrv_addr,
                topic,
                unique_name(f"x-{c}-cg"),
                property_keys=PROPERTY_KEYS,
                wait_started=False,
            )
            for c in CLIENTS
        }
        for c, d in consumers.items():
            try:
                d.wait_started()
            except AssertionError as e:
                mx.consume_errors[c] = str(e)
        produce_round(half)
        all_bodies = [s["body"] for sent in mx.sent.values() for s in sent]
        deadline = time.monotonic() + 60
        for c, d in consumers.items():
            if c in mx.consume_errors:
                continue
            try:
                d.wait_bodies(all_bodies, timeout=max(1.0, deadline - time.monotonic()))
            except AssertionError as e:
                mx.consume_errors[c] = str(e)
        try:
            mx.received["rmq"] = rmq.consume(topic, unique_name("x-rmq-cg"), all_bodies)
        except ConsumeIncomplete as e:
            mx.received["rmq"] = e.got
            mx.consume_errors["rmq"] = str(e)
        for c, d in consumers.items():
            d.terminate()
            mx.received[c] = d.messages
        mx.truth = cluster.wait_truth(topic, len(all_bodies))
        yield mx
    finally:
        clients.close()


@pytest.mark.parametrize("producer", PARTIES)
def test_producer_stores_intact(matrix: Matrix, producer: str):
    """Each producer's messages are stored as sent (and its send results agree)."""
    assert producer not in matrix.produce_errors, matrix.produce_errors[producer]
    sent = matrix.sent[producer]
    assert len(sent) == PER_PRODUCER
    check_sent(producer, sent, matrix.truth, topic=matrix.topic, props=props_of(producer))


@pytest.mark.parametrize("consumer", PARTIES)
@pytest.mark.parametrize("producer", PARTIES)
def test_cross_client(matrix: Matrix, producer: str, consumer: str):
    """``consumer`` got every message ``producer`` sent, intact: body, tags, keys, user
    properties, UNIQ_KEY/msgId, queue id and offsets equal the stored record."""
    assert producer not in matrix.produce_errors, f"{producer} could not produce: {matrix.produce_errors[producer]}"
    sent = matrix.sent[producer]
    prefix = f"{producer}-body-"
    received = [m for m in matrix.received.get(consumer, []) if m["body"].startswith(prefix)]
    error = matrix.consume_errors.get(consumer, "")
    try:
        check_messages(
            f"{consumer} consumer (from {producer})",
            received,
            matrix.truth,
            [s["body"] for s in sent],
            topic=matrix.topic,
            props=props_of(producer),
        )
    except AssertionError as e:
        raise AssertionError(f"{e}\n{error}".rstrip()) from None


def test_rmq_side_is_rmq_client(matrix: Matrix):
    """rmq's producer and consumer in this matrix are rmq's own client (rmq.client);
    raw SEND_MESSAGE_V2 / PULL_MESSAGE stand in only while it does not exist."""
    assert matrix.rmq_mode == "rmq.client", (
        f"rmq's side ran as {matrix.rmq_mode!r}: rmq.client.producer / push_consumer missing"
    )
