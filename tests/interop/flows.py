"""Test flows that several per-client interop modules run with their own client.

Each flow is one scenario (produce and check the send results, consume then produce
more, orderly send by selector, compressed bodies, the pull consumer); the test
functions stay in their client's module and call them with the client's name, so a
failure still names the client and the test.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from rmq.protocol.message import MessageExt
from tests.interop.conftest import Clients, Cluster, Driver, check_delivered, check_sent, check_stored, unique_name

Sent = list[dict[str, Any]]
Truth = dict[str, MessageExt]


def new_topic(cluster: Cluster, client: str, what: str) -> tuple[str, str, str]:
    """A fresh topic on the broker and fresh producer / consumer group names for it."""
    topic = unique_name(f"{client}-{what}")
    cluster.create_topic(topic)
    return topic, unique_name(f"{client}-pg"), unique_name(f"{client}-cg")


def produce_and_check(
    cluster: Cluster,
    clients: Clients,
    client: str,
    topic: str,
    group: str,
    n: int,
    *,
    namesrv: str | None = None,
    props: dict[str, str] | None = None,
    **kw: Any,
) -> tuple[Sent, Truth]:
    """``client`` sends ``n`` messages; once the broker stores all of them, every send
    result agrees with the stored record (``check_sent``)."""
    props = props or {}
    sent = clients.produce(client, namesrv or cluster.namesrv_addr, topic, group, n, props=props, **kw)
    truth = cluster.wait_truth(topic, n)
    check_sent(client, sent, truth, topic=topic, props=props)
    return sent, truth


def consume_then_more(
    cluster: Cluster,
    clients: Clients,
    client: str,
    topic: str,
    group: str,
    sent: Sent,
    more: int,
    *,
    consumer: Driver,
    namesrv: str | None = None,
    **produce_kw: Any,
) -> tuple[Sent, Truth]:
    """``consumer`` (started) gets every message of ``sent``; then ``client`` sends
    ``more`` messages (indexes after ``sent``), which arrive through long polling; the
    consumer is terminated, and every message it got matches the broker's record
    (``check_delivered``, with ``produce_kw``'s props). Returns the later send results
    and the broker's records of every message."""
    bodies = [s["body"] for s in sent]
    consumer.wait_bodies(bodies)
    later = clients.produce(
        client, namesrv or cluster.namesrv_addr, topic, group, more, start_index=sent[-1]["i"] + 1, **produce_kw
    )
    bodies += [s["body"] for s in later]
    consumer.wait_bodies(bodies)
    consumer.terminate()
    truth = cluster.wait_truth(topic, len(bodies))
    props = produce_kw.get("props") or {}
    check_delivered(consumer, truth, bodies, topic=topic, props=props)
    return later, truth


def orderly_send_by_selector(
    cluster: Cluster, clients: Clients, client: str, n: int, k: int, *, tags: list[str], props: dict[str, str]
) -> None:
    """send_orderly(msg, arg = i % k) with the C++ binding's selector (arg % queue
    count): every message of one key lands in one queue, stored in send order, and an
    orderly push consumer gets each key's messages in send order."""
    topic, pgroup, cgroup = new_topic(cluster, client, "order")
    sent, truth = produce_and_check(
        cluster,
        clients,
        client,
        topic,
        pgroup,
        n,
        orderly=True,
        sharding_key_mod=k,
        tags=tags,
        keys_prefix="ok-",
        props=props,
    )
    queues_of_key = defaultdict(set)
    for s in sent:
        queues_of_key[s["selector_arg"]].add(truth[s["body"]].queue_id)
    assert dict(queues_of_key) == {a: {a % 4} for a in range(k)}, f"queues per sharding key: {dict(queues_of_key)}"
    # the stored queue order is the send order
    for a in range(k):
        stored = sorted((m for m in truth.values() if m.queue_id == a), key=lambda m: m.queue_offset)
        assert [m.body.decode() for m in stored] == [s["body"] for s in sent if s["selector_arg"] == a]

    consumer = clients.consumer(client, cluster.namesrv_addr, topic, cgroup, orderly=True, property_keys=props)
    # the orderly consumer must lock its queues first (LOCK_BATCH_MQ, retried every 1 s)
    consumer.wait_bodies([s["body"] for s in sent], timeout=25)
    consumer.terminate()
    check_delivered(consumer, truth, [s["body"] for s in sent], topic=topic, props=props)
    arrived = defaultdict(list)
    for m in consumer.messages:
        arrived[int(m["body"].rsplit("-", 1)[1]) % k].append(m["body"])
    for a in range(k):
        assert arrived[a] == [s["body"] for s in sent if s["selector_arg"] == a], (
            f"sharding key {a}: arrival order {arrived[a]}"
        )


def compressed_body_round_trip(cluster: Cluster, clients: Clients, client: str, step: int) -> None:
    """Bodies >= 4 KiB are zlib-compressed by the client (sysFlag COMPRESSED): rmq stores
    them as sent and the consumer gets the original text back. ``step`` varies the text
    per client."""
    topic, pgroup, cgroup = new_topic(cluster, client, "big")
    prefix = "".join(chr(ord("a") + (j * step) % 26) for j in range(6000)) + "-"
    n = 4
    sent = clients.produce(
        client, cluster.namesrv_addr, topic, pgroup, n, body_prefix=prefix, tags=["Big"], keys_prefix="big-"
    )
    truth = cluster.wait_truth(topic, n)
    for s in sent:
        m = check_stored(truth, s["body"], topic=topic, tags="Big", keys=s["keys"], props={})
        assert m.sys_flag & 0x1, f"{s['keys']}: sysFlag {m.sys_flag} lacks COMPRESSED"
    consumer = clients.consumer(client, cluster.namesrv_addr, topic, cgroup)
    consumer.wait_bodies([s["body"] for s in sent])
    consumer.terminate()
    check_delivered(consumer, truth, [s["body"] for s in sent], topic=topic, props={})


def pull_consumer_reads_all(
    cluster: Cluster, clients: Clients, client: str, n: int, *, tags: list[str], props: dict[str, str]
) -> None:
    """The C++ DefaultMQPullConsumer reads every queue from offset 0: each of the ``n``
    messages ``client`` produced, intact, once."""
    topic, pgroup, cgroup = new_topic(cluster, client, "pull")
    sent = clients.produce(client, cluster.namesrv_addr, topic, pgroup, n, tags=tags, keys_prefix="pk-", props=props)
    truth = cluster.wait_truth(topic, n)
    puller = clients.puller(client, cluster.namesrv_addr, topic, cgroup, max_messages=n, property_keys=props)
    rc = puller.wait_exit(60)
    assert rc == 0, puller.describe()
    check_delivered(puller, truth, [s["body"] for s in sent], topic=topic, props=props)
    assert len(puller.messages) == n
