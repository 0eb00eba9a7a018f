"""Two NameServers, one of them down (SIGKILL): clients that know both still work.

One broker registers with both NameServers (both route its topics), then the first
NameServer is SIGKILLed. Every client that takes a NameServer list gets both
addresses, the dead one first and (second run) last, and must still produce and
consume. ali-ons takes the list as an array (the node drivers split "a;b") and
rotates over it per request, so it meets the dead one either way.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.interop.conftest import (
    CLIENTS,
    ClientRmqSide,
    Clients,
    Cluster,
    Driver,
    _start_cluster,
    check_messages,
    check_sent,
    rmq_side,
    unique_name,
)
from tests.interop.flows import consume_then_more, produce_and_check

pytestmark = pytest.mark.timeout(180)

PROPS = {"ha": "two-namesrv", "eq": "x=y"}


@pytest.fixture(scope="module")
def ha_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    gen = _start_cluster(Path(tmp_path_factory.mktemp("two-ns")), namesrv_count=2)
    cluster = next(gen)
    try:
        ns1, ns2 = cluster.namesrvs
        probe = unique_name("ha-probe")
        cluster.create_topic(probe)  # waits until BOTH NameServers route it
        for ns in (ns1, ns2):
            route = cluster.route(probe, ns.addr)
            assert route and [b.broker_addrs for b in route.broker_datas] == [{0: cluster.broker_addr}], (
                f"{ns.addr}: {route}"
            )
        ns1.kill()
        assert not ns1.alive()
        yield cluster
    finally:
        next(gen, None)


def _addrs(cluster: Cluster, dead: str) -> str:
    ns1, ns2 = cluster.namesrvs
    assert not ns1.alive() and ns2.alive()
    return f"{ns1.addr};{ns2.addr}" if dead == "first" else f"{ns2.addr};{ns1.addr}"


@pytest.mark.parametrize("dead", ["first", "last"])
@pytest.mark.parametrize("client", CLIENTS)
def test_one_namesrv_down(ha_cluster: Cluster, clients: Clients, client: str, dead: str):
    cluster = ha_cluster
    ns1 = cluster.namesrvs[0]
    addrs = _addrs(cluster, dead)
    topic = unique_name(f"ha-{client}-{dead}")
    # created after the kill: the broker keeps registering with the live NameServer
    cluster.create_topic(topic)
    batch: dict[str, Any] = dict(namesrv=addrs, tags=["TagA", "TagB"], keys_prefix="ha-", props=PROPS)
    sent, _ = produce_and_check(cluster, clients, client, topic, unique_name("ha-pg"), 10, **batch)
    consumer = clients.consumer(client, addrs, topic, unique_name("ha-cg"), property_keys=PROPS)
    consume_then_more(cluster, clients, client, topic, unique_name("ha-pg"), sent, 4, consumer=consumer, **batch)

    # The dead NameServer was really tried (and failed over from): the C++ clients start
    # with the first address of the list; ali-ons rotates over the list per request.
    tried = [d.name for d in clients.drivers if tried_dead(d, ns1.addr)]
    if client == "node":
        assert tried, f"no ali-ons driver ever tried the dead NameServer {ns1.addr}"
    elif dead == "first":
        assert len(tried) == len(clients.drivers), (
            f"only {tried} of {[d.name for d in clients.drivers]} tried {ns1.addr} first"
        )


def tried_dead(driver: Driver, addr: str) -> bool:
    """The driver's logs show a refused connection to ``addr``."""
    texts = [driver.stderr_path.read_text(errors="replace")]
    if driver.log_dir.exists():
        texts += [f.read_text(errors="replace") for f in driver.log_dir.rglob("*") if f.is_file()]
    return any(f"can not connect to server:{addr}" in t or f"ECONNREFUSED {addr}" in t for t in texts)


@pytest.mark.parametrize("dead", ["first", "last"])
def test_one_namesrv_down_rmq_client(ha_cluster: Cluster, dead: str):
    """rmq's own client (Producer, PushConsumer) with both addresses."""
    cluster = ha_cluster
    addrs = _addrs(cluster, dead)
    side = rmq_side(cluster, addrs)
    assert isinstance(side, ClientRmqSide), "rmq.client.producer / push_consumer do not exist"
    topic = unique_name(f"ha-rmq-{dead}")
    cluster.create_topic(topic)
    sent = side.produce(topic, unique_name("ha-pg"), 10, tags=["TagA", "TagB"], keys_prefix="ha-", props=PROPS)
    truth = cluster.wait_truth(topic, 10)
    check_sent("rmq", sent, truth, topic=topic, props=PROPS)
    got = side.consume(topic, unique_name("ha-cg"), [s["body"] for s in sent])
    check_messages("rmq.client consumer", got, truth, [s["body"] for s in sent], topic=topic, props=PROPS)
