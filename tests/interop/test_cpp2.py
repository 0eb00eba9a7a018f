"""RocketMQ C++ client 2.1.0 (PyPI rocketmq-python-cvs==2.1.0.3) against a real rmq.

The client runs in its own venv (.venv-interop-cpp2) through the drivers in
tests/interop/drivers; see tests/interop/README.md for their output and quirks.
"""
from __future__ import annotations

from collections import defaultdict

import pytest

from tests.interop.conftest import (
    Cluster, Clients, check_delivered, check_sent, check_stored, unique_name,
)

pytestmark = pytest.mark.timeout(180)

CLIENT = "cpp2"
PROPS = {"color": "blue", "trace-id": "t-42", "note": "x=y"}  # '=' inside a value


def test_send_sync_msg_id_resolves_with_view_message_by_id(cluster: Cluster, clients: Clients):
    """send_sync -> SEND_OK; its msgId (the client's UNIQ_KEY) is found by QUERY_MESSAGE
    (_UNIQUE_KEY_QUERY) and the offset msgId of that record resolves with
    VIEW_MESSAGE_BY_ID to the same message."""
    topic, group = unique_name("cpp2-send"), unique_name("cpp2-pg")
    cluster.create_topic(topic)
    n = 8
    sent = clients.produce(CLIENT, cluster.namesrv_addr, topic, group, n,
                           tags=["TagA", "TagB"], keys_prefix="order-", props=PROPS)
    truth = cluster.wait_truth(topic, n)
    check_sent(CLIENT, sent, truth, topic=topic, props=PROPS)
    assert len({truth[s["body"]].queue_id for s in sent}) == 4, \
        "send_sync should spread 8 messages over the 4 queues"

    for s in sent:
        found = cluster.query_by_key(topic, s["msg_id"], uniq=True)
        assert [m.uniq_key for m in found] == [s["msg_id"]], \
            f"QUERY_MESSAGE by UNIQ_KEY {s['msg_id']}: {[m.uniq_key for m in found]}"
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
    topic, pgroup, cgroup = unique_name("cpp2-push"), unique_name("cpp2-pg"), unique_name("cpp2-cg")
    cluster.create_topic(topic)
    n = 20
    sent = clients.produce(CLIENT, cluster.namesrv_addr, topic, pgroup, n,
                           tags=["TagA", "TagB", "TagC"], keys_prefix="k-", props=PROPS)
    truth = cluster.wait_truth(topic, n)
    check_sent(CLIENT, sent, truth, topic=topic, props=PROPS)

    consumer = clients.consumer(CLIENT, cluster.namesrv_addr, topic, cgroup,
                                property_keys=PROPS)
    bodies = [s["body"] for s in sent]
    consumer.wait_bodies(bodies)
    # more messages after the consumer is up: delivered through long polling
    more = clients.produce(CLIENT, cluster.namesrv_addr, topic, pgroup, 8, start_index=n,
                           tags=["TagA", "TagB", "TagC"], keys_prefix="k-", props=PROPS)
    bodies += [s["body"] for s in more]
    consumer.wait_bodies(bodies)
    truth = cluster.wait_truth(topic, n + 8)
    consumer.terminate()
    check_delivered(consumer, truth, bodies, topic=topic, props=PROPS)
    summary = consumer.of("summary")
    assert summary and summary[-1]["reason"] == "SIGTERM", consumer.describe()


def test_push_consumer_tag_filter(cluster: Cluster, clients: Clients):
    """A 'TagA || TagC' subscription gets exactly the messages with those tags."""
    topic, pgroup, cgroup = unique_name("cpp2-tags"), unique_name("cpp2-pg"), unique_name("cpp2-cg")
    cluster.create_topic(topic)
    n = 18
    sent = clients.produce(CLIENT, cluster.namesrv_addr, topic, pgroup, n,
                           tags=["TagA", "TagB", "TagC"], keys_prefix="k-")
    truth = cluster.wait_truth(topic, n)
    wanted = [s["body"] for s in sent if s["tags"] in ("TagA", "TagC")]
    consumer = clients.consumer(CLIENT, cluster.namesrv_addr, topic, cgroup,
                                expression="TagA || TagC")
    consumer.wait_bodies(wanted)
    # A TagB message would have been delivered with the others (same queues, same pulls).
    consumer.terminate()
    check_delivered(consumer, truth, wanted, topic=topic, props={})


def test_orderly_send_by_sharding_key(cluster: Cluster, clients: Clients):
    """send_orderly(msg, arg = i % 3): every message of one key lands in one queue
    (the binding's selector: arg % queue count), and an orderly push consumer gets each
    key's messages in send order."""
    topic, pgroup, cgroup = unique_name("cpp2-order"), unique_name("cpp2-pg"), unique_name("cpp2-cg")
    cluster.create_topic(topic)
    n, k = 30, 3
    sent = clients.produce(CLIENT, cluster.namesrv_addr, topic, pgroup, n, orderly=True,
                           sharding_key_mod=k, tags=["TagA"], keys_prefix="ok-", props=PROPS)
    truth = cluster.wait_truth(topic, n)
    check_sent(CLIENT, sent, truth, topic=topic, props=PROPS)
    queues_of_key = defaultdict(set)
    for s in sent:
        queues_of_key[s["selector_arg"]].add(truth[s["body"]].queue_id)
    assert dict(queues_of_key) == {a: {a % 4} for a in range(k)}, \
        f"queues per sharding key: {dict(queues_of_key)}"
    # the stored queue order is the send order
    for a in range(k):
        stored = sorted((m for m in truth.values() if m.queue_id == a), key=lambda m: m.queue_offset)
        assert [m.body.decode() for m in stored] == [s["body"] for s in sent
                                                    if s["selector_arg"] == a]

    consumer = clients.consumer(CLIENT, cluster.namesrv_addr, topic, cgroup, orderly=True,
                                property_keys=PROPS)
    # the orderly consumer must lock its queues first (LOCK_BATCH_MQ, retried every 1 s)
    consumer.wait_bodies([s["body"] for s in sent], timeout=25)
    consumer.terminate()
    check_delivered(consumer, truth, [s["body"] for s in sent], topic=topic, props=PROPS)
    arrived = defaultdict(list)
    for m in consumer.messages:
        arrived[int(m["body"].rsplit("-", 1)[1]) % k].append(m["body"])
    for a in range(k):
        assert arrived[a] == [s["body"] for s in sent if s["selector_arg"] == a], \
            f"sharding key {a}: arrival order {arrived[a]}"


def test_compressed_body_round_trip(cluster: Cluster, clients: Clients):
    """Bodies >= 4 KiB are zlib-compressed by the client (sysFlag COMPRESSED): rmq stores
    them as sent and the consumer gets the original text back."""
    topic, pgroup, cgroup = unique_name("cpp2-big"), unique_name("cpp2-pg"), unique_name("cpp2-cg")
    cluster.create_topic(topic)
    prefix = "".join(chr(ord("a") + (j * 7) % 26) for j in range(6000)) + "-"
    n = 4
    sent = clients.produce(CLIENT, cluster.namesrv_addr, topic, pgroup, n, body_prefix=prefix,
                           tags=["Big"], keys_prefix="big-")
    truth = cluster.wait_truth(topic, n)
    for s in sent:
        m = check_stored(truth, s["body"], topic=topic, tags="Big", keys=s["keys"], props={})
        assert m.sys_flag & 0x1, f"{s['keys']}: sysFlag {m.sys_flag} lacks COMPRESSED"
    consumer = clients.consumer(CLIENT, cluster.namesrv_addr, topic, cgroup)
    consumer.wait_bodies([s["body"] for s in sent])
    consumer.terminate()
    check_delivered(consumer, truth, [s["body"] for s in sent], topic=topic, props={})


def test_pull_consumer(cluster: Cluster, clients: Clients):
    """The binding's DefaultMQPullConsumer reads every queue from offset 0."""
    topic, pgroup, cgroup = unique_name("cpp2-pull"), unique_name("cpp2-pg"), unique_name("cpp2-cg")
    cluster.create_topic(topic)
    n = 12
    sent = clients.produce(CLIENT, cluster.namesrv_addr, topic, pgroup, n,
                           tags=["TagA", "TagB"], keys_prefix="pk-", props=PROPS)
    truth = cluster.wait_truth(topic, n)
    puller = clients.puller(CLIENT, cluster.namesrv_addr, topic, cgroup, max_messages=n,
                            property_keys=PROPS)
    rc = puller.wait_exit(60)
    assert rc == 0, puller.describe()
    check_delivered(puller, truth, [s["body"] for s in sent], topic=topic, props=PROPS)
    assert len(puller.messages) == n
