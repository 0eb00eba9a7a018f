"""RocketMQ C++ client 1.x (PyPI rocketmq==0.4.4) against a real rmq.

This client sends SEND_MESSAGE (10) with V1 header names, version 63, and a UNIQ_KEY
whose IPv4 bytes are little-endian (tests/interop/README.md).
"""
from __future__ import annotations

from collections import defaultdict

import pytest

from tests.interop.conftest import (
    Cluster, Clients, check_delivered, check_sent, unique_name,
)

pytestmark = pytest.mark.timeout(180)

CLIENT = "cpp1"
PROPS = {"color": "green", "origin": "cpp1", "note": "a=b"}


def test_produce_and_consume(cluster: Cluster, clients: Clients):
    """cpp1 producer -> rmq -> cpp1 push consumer, every field intact; the send
    result's msgId (UNIQ_KEY) is found by QUERY_MESSAGE and resolves with
    VIEW_MESSAGE_BY_ID."""
    topic, pgroup, cgroup = unique_name("cpp1-pc"), unique_name("cpp1-pg"), unique_name("cpp1-cg")
    cluster.create_topic(topic)
    n = 16
    sent = clients.produce(CLIENT, cluster.namesrv_addr, topic, pgroup, n,
                           tags=["TagA", "TagB"], keys_prefix="k-", props=PROPS)
    truth = cluster.wait_truth(topic, n)
    check_sent(CLIENT, sent, truth, topic=topic, props=PROPS)
    assert len({truth[s["body"]].queue_id for s in sent}) == 4

    for s in sent[:4]:
        found = cluster.query_by_key(topic, s["msg_id"], uniq=True)
        assert [m.body.decode() for m in found] == [s["body"]]
        viewed = cluster.view_message(found[0].msg_id)
        assert viewed.body.decode() == s["body"] and viewed.uniq_key == s["msg_id"]

    consumer = clients.consumer(CLIENT, cluster.namesrv_addr, topic, cgroup, property_keys=PROPS)
    bodies = [s["body"] for s in sent]
    consumer.wait_bodies(bodies)
    more = clients.produce(CLIENT, cluster.namesrv_addr, topic, pgroup, 6, start_index=n,
                           tags=["TagA", "TagB"], keys_prefix="k-", props=PROPS)
    bodies += [s["body"] for s in more]
    consumer.wait_bodies(bodies)
    consumer.terminate()
    truth = cluster.wait_truth(topic, n + 6)
    check_delivered(consumer, truth, bodies, topic=topic, props=PROPS)


def test_orderly_send(cluster: Cluster, clients: Clients):
    """send_orderly(msg, i % 2): one queue per key, stored in send order; an orderly
    push consumer gets each key's messages in send order."""
    topic, pgroup, cgroup = unique_name("cpp1-order"), unique_name("cpp1-pg"), unique_name("cpp1-cg")
    cluster.create_topic(topic)
    n, k = 20, 2
    sent = clients.produce(CLIENT, cluster.namesrv_addr, topic, pgroup, n, orderly=True,
                           sharding_key_mod=k, tags=["TagO"], keys_prefix="ok-")
    truth = cluster.wait_truth(topic, n)
    check_sent(CLIENT, sent, truth, topic=topic, props={})
    queues_of_key = defaultdict(set)
    for s in sent:
        queues_of_key[s["selector_arg"]].add(truth[s["body"]].queue_id)
    assert dict(queues_of_key) == {a: {a % 4} for a in range(k)}
    for a in range(k):
        stored = sorted((m for m in truth.values() if m.queue_id == a), key=lambda m: m.queue_offset)
        assert [m.body.decode() for m in stored] == [s["body"] for s in sent
                                                    if s["selector_arg"] == a]

    consumer = clients.consumer(CLIENT, cluster.namesrv_addr, topic, cgroup, orderly=True)
    # the orderly consumer must lock its queues first (LOCK_BATCH_MQ, retried every 1 s)
    consumer.wait_bodies([s["body"] for s in sent], timeout=25)
    consumer.terminate()
    check_delivered(consumer, truth, [s["body"] for s in sent], topic=topic, props={})
    arrived = defaultdict(list)
    for m in consumer.messages:
        arrived[int(m["body"].rsplit("-", 1)[1]) % k].append(m["body"])
    for a in range(k):
        assert arrived[a] == [s["body"] for s in sent if s["selector_arg"] == a]


def test_pull_consumer(cluster: Cluster, clients: Clients):
    """The 1.x DefaultMQPullConsumer reads messages produced by cpp1."""
    topic, pgroup, cgroup = unique_name("cpp1-pull"), unique_name("cpp1-pg"), unique_name("cpp1-cg")
    cluster.create_topic(topic)
    n = 8
    sent = clients.produce(CLIENT, cluster.namesrv_addr, topic, pgroup, n,
                           tags=["TagA"], keys_prefix="pk-", props=PROPS)
    truth = cluster.wait_truth(topic, n)
    puller = clients.puller(CLIENT, cluster.namesrv_addr, topic, cgroup, max_messages=n,
                            property_keys=PROPS)
    assert puller.wait_exit(60) == 0, puller.describe()
    check_delivered(puller, truth, [s["body"] for s in sent], topic=topic, props=PROPS)
