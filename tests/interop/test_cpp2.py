"""RocketMQ C++ client 2.1.0 (PyPI rocketmq-python-cvs==2.1.0.3) against a real rmq.

The client runs in its own venv (.venv-interop-cpp2) through the drivers in
tests/interop/drivers; see tests/interop/README.md for their output and quirks.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.interop.conftest import Clients, Cluster, check_delivered
from tests.interop.flows import (
    compressed_body_round_trip,
    consume_then_more,
    new_topic,
    orderly_send_by_selector,
    produce_and_check,
    pull_consumer_reads_all,
)

pytestmark = pytest.mark.timeout(180)

CLIENT = "cpp2"
PROPS = {"color": "blue", "trace-id": "t-42", "note": "x=y"}  # '=' inside a value


def test_send_sync_msg_id_resolves_with_view_message_by_id(cluster: Cluster, clients: Clients):
    """send_sync -> SEND_OK; its msgId (the client's UNIQ_KEY) is found by QUERY_MESSAGE
    (_UNIQUE_KEY_QUERY) and the offset msgId of that record resolves with
    VIEW_MESSAGE_BY_ID to the same message."""
    topic, group, _ = new_topic(cluster, CLIENT, "send")
    sent, truth = produce_and_check(
        cluster, clients, CLIENT, topic, group, 8, tags=["TagA", "TagB"], keys_prefix="order-", props=PROPS
    )
    assert len({truth[s["body"]].queue_id for s in sent}) == 4, "send_sync should spread 8 messages over the 4 queues"

    for s in sent:
        found = cluster.query_by_key(topic, s["msg_id"], uniq=True)
        assert [m.uniq_key for m in found] == [s["msg_id"]], (
            f"QUERY_MESSAGE by UNIQ_KEY {s['msg_id']}: {[m.uniq_key for m in found]}"
        )
        offset_msg_id = found[0].msg_id
        viewed = cluster.view_message(offset_msg_id)
        assert viewed.body.decode() == s["body"]
        assert viewed.uniq_key == s["msg_id"]
        assert (viewed.tags, viewed.keys) == (s["tags"], s["keys"])
        assert viewed.commit_log_offset == truth[s["body"]].commit_log_offset
        assert viewed.msg_id == offset_msg_id
        for k, v in PROPS.items():
            assert viewed.properties.get(k) == v
        # and by KEYS (the index the Java admin's queryMsgByKey uses)
        by_key = cluster.query_by_key(topic, s["keys"])
        assert [m.body.decode() for m in by_key] == [s["body"]]


def test_push_consumer_receives_every_message_intact(cluster: Cluster, clients: Clients):
    """Produced by cpp2, consumed by a cpp2 push consumer: body, tags, keys, user
    properties, queue id/offset, commit-log offset and msgId of every message."""
    topic, pgroup, cgroup = new_topic(cluster, CLIENT, "push")
    batch: dict[str, Any] = dict(tags=["TagA", "TagB", "TagC"], keys_prefix="k-", props=PROPS)
    sent, _ = produce_and_check(cluster, clients, CLIENT, topic, pgroup, 20, **batch)
    consumer = clients.consumer(CLIENT, cluster.namesrv_addr, topic, cgroup, property_keys=PROPS)
    # the later messages are delivered through long polling
    consume_then_more(cluster, clients, CLIENT, topic, pgroup, sent, 8, consumer=consumer, **batch)
    summary = consumer.of("summary")
    assert summary and summary[-1]["reason"] == "SIGTERM", consumer.describe()


def test_push_consumer_tag_filter(cluster: Cluster, clients: Clients):
    """A 'TagA || TagC' subscription gets exactly the messages with those tags."""
    topic, pgroup, cgroup = new_topic(cluster, CLIENT, "tags")
    n = 18
    sent = clients.produce(
        CLIENT, cluster.namesrv_addr, topic, pgroup, n, tags=["TagA", "TagB", "TagC"], keys_prefix="k-"
    )
    truth = cluster.wait_truth(topic, n)
    wanted = [s["body"] for s in sent if s["tags"] in ("TagA", "TagC")]
    consumer = clients.consumer(CLIENT, cluster.namesrv_addr, topic, cgroup, expression="TagA || TagC")
    consumer.wait_bodies(wanted)
    # A TagB message would have been delivered with the others (same queues, same pulls).
    consumer.terminate()
    check_delivered(consumer, truth, wanted, topic=topic, props={})


def test_orderly_send_by_sharding_key(cluster: Cluster, clients: Clients):
    """send_orderly(msg, arg = i % 3): every message of one key lands in one queue
    (the binding's selector: arg % queue count), and an orderly push consumer gets each
    key's messages in send order."""
    orderly_send_by_selector(cluster, clients, CLIENT, 30, 3, tags=["TagA"], props=PROPS)


def test_compressed_body_round_trip(cluster: Cluster, clients: Clients):
    """Bodies >= 4 KiB are zlib-compressed by the client (sysFlag COMPRESSED): rmq stores
    them as sent and the consumer gets the original text back."""
    compressed_body_round_trip(cluster, clients, CLIENT, step=7)


def test_pull_consumer(cluster: Cluster, clients: Clients):
    """The binding's DefaultMQPullConsumer reads every queue from offset 0."""
    pull_consumer_reads_all(cluster, clients, CLIENT, 12, tags=["TagA", "TagB"], props=PROPS)
