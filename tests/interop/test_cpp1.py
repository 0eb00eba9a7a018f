"""RocketMQ C++ client 1.x (PyPI rocketmq==0.4.4) against a real rmq.

This client sends SEND_MESSAGE (10) with V1 header names, version 63, and a UNIQ_KEY
whose IPv4 bytes are little-endian (tests/interop/README.md).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.interop.conftest import Clients, Cluster
from tests.interop.flows import (
    consume_then_more,
    new_topic,
    orderly_send_by_selector,
    produce_and_check,
    pull_consumer_reads_all,
)

pytestmark = pytest.mark.timeout(180)

CLIENT = "cpp1"
PROPS = {"color": "green", "origin": "cpp1", "note": "a=b"}


def test_produce_and_consume(cluster: Cluster, clients: Clients):
    """cpp1 producer -> rmq -> cpp1 push consumer, every field intact; the send
    result's msgId (UNIQ_KEY) is found by QUERY_MESSAGE and resolves with
    VIEW_MESSAGE_BY_ID."""
    topic, pgroup, cgroup = new_topic(cluster, CLIENT, "pc")
    batch: dict[str, Any] = dict(tags=["TagA", "TagB"], keys_prefix="k-", props=PROPS)
    sent, truth = produce_and_check(cluster, clients, CLIENT, topic, pgroup, 16, **batch)
    assert len({truth[s["body"]].queue_id for s in sent}) == 4

    for s in sent[:4]:
        found = cluster.query_by_key(topic, s["msg_id"], uniq=True)
        assert [m.body.decode() for m in found] == [s["body"]]
        viewed = cluster.view_message(found[0].msg_id)
        assert viewed.body.decode() == s["body"] and viewed.uniq_key == s["msg_id"]

    consumer = clients.consumer(CLIENT, cluster.namesrv_addr, topic, cgroup, property_keys=PROPS)
    consume_then_more(cluster, clients, CLIENT, topic, pgroup, sent, 6, consumer=consumer, **batch)


def test_orderly_send(cluster: Cluster, clients: Clients):
    """send_orderly(msg, i % 2): one queue per key, stored in send order; an orderly
    push consumer gets each key's messages in send order."""
    orderly_send_by_selector(cluster, clients, CLIENT, 20, 2, tags=["TagO"], props={})


def test_pull_consumer(cluster: Cluster, clients: Clients):
    """The 1.x DefaultMQPullConsumer reads messages produced by cpp1."""
    pull_consumer_reads_all(cluster, clients, CLIENT, 8, tags=["TagA"], props=PROPS)
