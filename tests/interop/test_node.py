"""ali-ons@3.12.0 (pure JavaScript RocketMQ client, npm) against a real rmq.

ali-ons sends as a JAVA client of version 121, sets no UNIQ_KEY (its msgId is the
broker's offset msgId), never creates topics, and has no orderly consumer
(tests/interop/README.md).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from typing import Any

import pytest

from tests.interop.conftest import Clients, Cluster, check_delivered, check_sent
from tests.interop.flows import compressed_body_round_trip, consume_then_more, new_topic, produce_and_check

pytestmark = pytest.mark.timeout(180)

CLIENT = "node"
PROPS = {"color": "red", "lang": "js", "note": "k=v", "unicode": "grüße-東京"}


def test_send_result_offset_msg_id_resolves(cluster: Cluster, clients: Clients):
    """send -> SEND_OK with queue id/offset matching the store, and an offset msgId
    that VIEW_MESSAGE_BY_ID resolves to the message."""
    topic, group, _ = new_topic(cluster, CLIENT, "send")
    sent, _ = produce_and_check(
        cluster, clients, CLIENT, topic, group, 8, tags=["TagA", "TagB"], keys_prefix="order-", props=PROPS
    )
    assert {s["broker_name"] for s in sent} == {cluster.broker_name}
    assert len({s["queue_id"] for s in sent}) == 4
    for s in sent:
        viewed = cluster.view_message(s["offset_msg_id"])
        assert viewed.body.decode() == s["body"]
        assert (viewed.topic, viewed.tags, viewed.keys) == (topic, s["tags"], s["keys"])
        assert (viewed.queue_id, viewed.queue_offset) == (s["queue_id"], s["queue_offset"])
        for k, v in PROPS.items():
            assert viewed.properties.get(k) == v
        by_key = cluster.query_by_key(topic, s["keys"])
        assert [m.msg_id for m in by_key] == [s["offset_msg_id"]]


def test_produce_and_consume(cluster: Cluster, clients: Clients):
    """ali-ons producer -> rmq -> ali-ons push consumer (CONSUME_FROM_LAST_OFFSET, new
    group: starts at 0 because message 0 is still in memory), then more messages
    through long polling; every field intact."""
    topic, pgroup, cgroup = new_topic(cluster, CLIENT, "pc")
    batch: dict[str, Any] = dict(tags=["TagA", "TagB", "TagC"], keys_prefix="k-", props=PROPS)
    sent = clients.produce(CLIENT, cluster.namesrv_addr, topic, pgroup, 16, **batch)
    consumer = clients.consumer(CLIENT, cluster.namesrv_addr, topic, cgroup)
    more, truth = consume_then_more(cluster, clients, CLIENT, topic, pgroup, sent, 8, consumer=consumer, **batch)
    check_sent(CLIENT, sent + more, truth, topic=topic, props=PROPS)
    # ali-ons hands over every property: what was sent, the broker's CLUSTER and the
    # client's own MIN_OFFSET/MAX_OFFSET (added on pull, as the Java client does)
    for m in consumer.messages:
        extra = set(m["properties"]) - set(PROPS) - {"TAGS", "KEYS", "WAIT", "CLUSTER", "MIN_OFFSET", "MAX_OFFSET"}
        assert not extra, f"{m['body']}: unexpected properties {extra}"
    summary = consumer.of("summary")
    assert summary and summary[-1]["reason"] == "SIGTERM", consumer.describe()


def test_consume_from_first_offset_and_tag_filter(cluster: Cluster, clients: Clients):
    """A consumer started on an empty topic (CONSUME_FROM_FIRST_OFFSET, 'TagB'
    subscription) gets exactly the TagB messages produced afterwards."""
    topic, pgroup, cgroup = new_topic(cluster, CLIENT, "tag")
    consumer = clients.consumer(CLIENT, cluster.namesrv_addr, topic, cgroup, expression="TagB", from_first=True)
    n = 12
    sent = clients.produce(
        CLIENT, cluster.namesrv_addr, topic, pgroup, n, tags=["TagA", "TagB", "TagC"], keys_prefix="k-"
    )
    truth = cluster.wait_truth(topic, n)
    wanted = [s["body"] for s in sent if s["tags"] == "TagB"]
    consumer.wait_bodies(wanted)
    consumer.terminate()
    check_delivered(consumer, truth, wanted, topic=topic, props={})


def _ali_ons_queue(sharding_key: str, queues: int = 4) -> int:
    """ali-ons 3.12.0: queueIds[md5(key)[0:4] as uint32 BE % queue count]."""
    return int.from_bytes(hashlib.md5(sharding_key.encode()).digest()[:4], "big") % queues


def test_orderly_send_by_sharding_key(cluster: Cluster, clients: Clients):
    """ali-ons picks the queue from the sharding key (md5 % queues): each key's messages
    are in that one queue, stored in send order, and the send results say so.

    Client quirk: a key whose md5 picks queue id 0 is NOT pinned by ali-ons 3.12.0
    (``queueId = queueIds[i] || ''`` makes 0 falsy -> plain round robin), so keys "0" and
    "1" (-> queue 0) are only checked for being stored intact."""
    topic, pgroup, _ = new_topic(cluster, CLIENT, "order")
    sent, truth = produce_and_check(
        cluster, clients, CLIENT, topic, pgroup, 36, orderly=True, sharding_key_mod=6, tags=["TagO"], keys_prefix="ok-"
    )
    by_key = defaultdict(list)
    for s in sent:
        by_key[s["sharding_key"]].append(s)
        assert truth[s["body"]].properties.get("__SHARDING_KEY") == s["sharding_key"]
    pinned = {key for key in by_key if _ali_ons_queue(key) != 0}
    assert pinned == {"2", "3", "4", "5"}
    for key in sorted(pinned):
        msgs = by_key[key]
        queues = {truth[s["body"]].queue_id for s in msgs}
        assert queues == {_ali_ons_queue(key)}, f"sharding key {key} stored in queues {queues}"
        offsets = [truth[s["body"]].queue_offset for s in msgs]
        assert offsets == sorted(offsets), f"sharding key {key}: stored out of send order"


def test_compressed_body_round_trip(cluster: Cluster, clients: Clients):
    """ali-ons zlib-compresses bodies >= 4 KiB (sysFlag COMPRESSED): stored as sent,
    delivered as the original text."""
    compressed_body_round_trip(cluster, clients, CLIENT, step=11)
