"""Send, pull and admin processors against fakes of the capabilities they declare
(rmq/broker/seams.py): no store files, no sockets."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rmq.broker.client_manager import ConsumerManager
from rmq.broker.config import BrokerConfig
from rmq.broker.processors.admin import AdminBrokerProcessor
from rmq.broker.processors.pull import FLAG_SUSPEND, PullMessageProcessor
from rmq.broker.processors.send import SendMessageProcessor
from rmq.broker.subscriptions import SubscriptionGroupConfig
from rmq.protocol.bodies import TopicConfig, loads_object_keyed_map
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import PullMessageRequestHeader, SendMessageRequestHeader
from rmq.protocol.message import MessageExtBrokerInner, create_message_id
from rmq.remoting.dispatch import ANSWER_LATER
from rmq.store.config import BrokerRole, MessageStoreConfig
from rmq.store.results import GetMessageResult, GetMessageStatus, PutMessageStatus

from .fakes import (
    FakeConn,
    FakeDelayOffsets,
    FakeHA,
    FakeMetadata,
    FakeOffsets,
    FakePullHold,
    FakeRuntime,
    FakeStats,
    FakeStore,
    FakeSubscriptions,
    FakeTopics,
    done_future,
)

TOPIC = "OrderTopic"
GROUP = "cg"


def _broker_config() -> BrokerConfig:
    return BrokerConfig(brokerName="broker-a", brokerIP1="10.0.0.1")


# ---------------------------------------------------------------------- send
def _send_processor(topics: FakeTopics, store: FakeStore, stats: FakeStats | None = None) -> SendMessageProcessor:
    return SendMessageProcessor(_broker_config(), store, topics, FakeSubscriptions(), stats or FakeStats(), None)


def _send_request(topic: str = TOPIC, queue_id: int = 1, body: bytes = b"hello") -> RemotingCommand:
    h = SendMessageRequestHeader(
        "pg", topic, "TBW102", 4, queue_id, 0, 1_700_000_000_000, 0, properties="UNIQ_KEY\x01ABC\x02"
    )
    return RemotingCommand(RequestCode.SEND_MESSAGE, ext_fields=h.to_ext_fields(), body=body)


def test_send_to_a_missing_topic_without_auto_create_is_topic_not_exist() -> None:
    store = FakeStore()
    p = _send_processor(FakeTopics(auto_create=False), store)
    resp = p.process(FakeConn(), _send_request("NoSuchTopic"))
    assert isinstance(resp, RemotingCommand)
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST
    assert "NoSuchTopic" in (resp.remark or "")
    assert store.puts == []


def test_send_put_ok_answers_success_with_msg_id_and_queue_offset() -> None:
    store = FakeStore()
    store.queues[(TOPIC, 1)] = (0, 41)
    stats = FakeStats()
    p = _send_processor(FakeTopics(TopicConfig(TOPIC, 4, 4)), store, stats)
    resp = p.process(FakeConn(), _send_request())
    assert isinstance(resp, RemotingCommand)
    assert resp.code == ResponseCode.SUCCESS
    ext = resp.ext_fields or {}
    assert ext["queueId"] == "1"
    assert ext["queueOffset"] == "41"
    assert ext["msgId"] == create_message_id(store.store_host, 4096)
    assert len(store.puts) == 1
    put = store.puts[0]
    assert isinstance(put, MessageExtBrokerInner)
    assert put.body == b"hello" and put.store_host == store.store_host
    assert stats.puts == [(PutMessageStatus.PUT_OK, TOPIC)]


@pytest.mark.parametrize(
    "status, code",
    [
        (PutMessageStatus.SERVICE_NOT_AVAILABLE, ResponseCode.SERVICE_NOT_AVAILABLE),
        (PutMessageStatus.MESSAGE_ILLEGAL, ResponseCode.MESSAGE_ILLEGAL),
        (PutMessageStatus.CREATE_MAPPED_FILE_FAILED, ResponseCode.SYSTEM_ERROR),
        (PutMessageStatus.OS_PAGECACHE_BUSY, ResponseCode.SYSTEM_BUSY),
        (PutMessageStatus.FLUSH_DISK_TIMEOUT, ResponseCode.FLUSH_DISK_TIMEOUT),
        (PutMessageStatus.SLAVE_NOT_AVAILABLE, ResponseCode.SLAVE_NOT_AVAILABLE),
    ],
)
def test_send_maps_a_store_status_to_its_response_code(status: PutMessageStatus, code: int) -> None:
    store = FakeStore()
    store.put_status = status
    stats = FakeStats()
    p = _send_processor(FakeTopics(TopicConfig(TOPIC, 4, 4)), store, stats)
    resp = p.process(FakeConn(), _send_request())
    assert isinstance(resp, RemotingCommand)
    assert resp.code == code
    # a stored message names its offset; a refused one does not
    assert ("msgId" in (resp.ext_fields or {})) == status.stored
    assert stats.puts == [(status, TOPIC)]


def test_send_waiting_for_flush_answers_when_the_waiter_completes() -> None:
    async def run() -> tuple[Any, FakeConn]:
        store = FakeStore()
        store.waiter = done_future(PutMessageStatus.FLUSH_DISK_TIMEOUT)
        conn = FakeConn()
        p = _send_processor(FakeTopics(TopicConfig(TOPIC, 4, 4)), store)
        now = p.process(conn, _send_request())
        await asyncio.sleep(0)  # the done-callback runs
        return now, conn

    now, conn = asyncio.run(run())
    assert now is ANSWER_LATER  # answered from the round's callback, still an rpc for metrics
    assert [r.code for r in conn.sent] == [ResponseCode.FLUSH_DISK_TIMEOUT]


# ---------------------------------------------------------------------- pull
def _pull_processor(
    store: FakeStore, role: BrokerRole = BrokerRole.ASYNC_MASTER
) -> tuple[PullMessageProcessor, FakePullHold, FakeStats, FakeOffsets]:
    hold, stats, offsets = FakePullHold(), FakeStats(), FakeOffsets()
    sc = MessageStoreConfig(brokerRole=role)
    p = PullMessageProcessor(
        _broker_config(),
        sc,
        store,
        FakeTopics(TopicConfig(TOPIC, 4, 4)),
        FakeSubscriptions(SubscriptionGroupConfig(GROUP)),
        ConsumerManager(),
        offsets,
        stats,
        hold,
    )
    return p, hold, stats, offsets


def _pull_request(offset: int = 10, sys_flag: int = 0x4) -> RemotingCommand:
    h = PullMessageRequestHeader(
        GROUP, TOPIC, 2, offset, 32, sys_flag, 0, 15_000, 0, subscription="*", expression_type="TAG"
    )
    return RemotingCommand(RequestCode.PULL_MESSAGE, ext_fields=h.to_ext_fields())


def test_pull_found_answers_the_records_and_the_offsets() -> None:
    store = FakeStore()
    store.get_result = GetMessageResult(
        GetMessageStatus.FOUND,
        next_begin_offset=12,
        min_offset=0,
        max_offset=12,
        buffers=[b"r1", b"r2"],
        queue_offsets=[10, 11],
        buffer_total_size=4,
    )
    p, hold, stats, _ = _pull_processor(store)
    resp = p.process(FakeConn(), _pull_request())
    assert resp is not None and resp.code == ResponseCode.SUCCESS
    assert resp.body == b"r1r2"
    ext = resp.ext_fields or {}
    assert (ext["nextBeginOffset"], ext["minOffset"], ext["maxOffset"]) == ("12", "0", "12")
    assert store.gets == [(GROUP, TOPIC, 2, 10, 32)]
    assert stats.gets == [(GROUP, TOPIC, 2, 2)]
    assert hold.parked == []


def test_pull_with_no_new_message_answers_pull_not_found() -> None:
    store = FakeStore()
    store.get_result = GetMessageResult(
        GetMessageStatus.OFFSET_OVERFLOW_ONE, next_begin_offset=10, min_offset=0, max_offset=10
    )
    p, hold, stats, _ = _pull_processor(store)
    resp = p.process(FakeConn(), _pull_request())
    assert resp is not None and resp.code == ResponseCode.PULL_NOT_FOUND
    assert (resp.ext_fields or {})["nextBeginOffset"] == "10"
    assert stats.gets == [] and hold.parked == []


def test_pull_below_the_queue_answers_offset_moved() -> None:
    store = FakeStore()
    store.get_result = GetMessageResult(
        GetMessageStatus.OFFSET_TOO_SMALL, next_begin_offset=100, min_offset=100, max_offset=150
    )
    p, _, _, _ = _pull_processor(store)
    resp = p.process(FakeConn(), _pull_request(offset=3))
    assert resp is not None and resp.code == ResponseCode.PULL_OFFSET_MOVED
    assert (resp.ext_fields or {})["nextBeginOffset"] == "100"


def test_pull_offset_moved_on_a_slave_is_retry_immediately() -> None:
    store = FakeStore()
    store.get_result = GetMessageResult(
        GetMessageStatus.OFFSET_TOO_SMALL, next_begin_offset=100, min_offset=100, max_offset=150
    )
    p, _, _, _ = _pull_processor(store, BrokerRole.SLAVE)
    resp = p.process(FakeConn(), _pull_request(offset=3))
    assert resp is not None and resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY


def test_pull_with_suspend_is_parked_until_a_message_arrives() -> None:
    store = FakeStore()
    store.get_result = GetMessageResult(
        GetMessageStatus.OFFSET_OVERFLOW_ONE, next_begin_offset=10, min_offset=0, max_offset=10
    )
    p, hold, _, _ = _pull_processor(store)
    resp = p.process(FakeConn(), _pull_request(sys_flag=0x4 | FLAG_SUSPEND))
    assert resp is None
    assert hold.parked == [(TOPIC, 2, 10, 15_000)]


def test_pull_commits_the_offset_it_carries_on_a_master() -> None:
    store = FakeStore()
    store.get_result = GetMessageResult(
        GetMessageStatus.OFFSET_OVERFLOW_ONE, next_begin_offset=10, min_offset=0, max_offset=10
    )
    p, _, _, offsets = _pull_processor(store)
    h = PullMessageRequestHeader(GROUP, TOPIC, 2, 10, 32, 0x4 | 0x1, 7, 15_000, 0, subscription="*")
    conn = FakeConn()
    p.process(conn, RemotingCommand(RequestCode.PULL_MESSAGE, ext_fields=h.to_ext_fields()))
    assert offsets.commits == [(conn.remote_address, GROUP, TOPIC, 2, 7)]


def test_pull_of_an_unknown_group_is_refused() -> None:
    p, _, _, _ = _pull_processor(FakeStore())
    h = PullMessageRequestHeader("nobody", TOPIC, 2, 10, 32, 0x4, 0, 15_000, 0, subscription="*")
    resp = p.process(FakeConn(), RemotingCommand(RequestCode.PULL_MESSAGE, ext_fields=h.to_ext_fields()))
    assert resp is not None and resp.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST


# ---------------------------------------------------------------------- admin
def _admin(store: FakeStore, topics: FakeTopics | None = None) -> AdminBrokerProcessor:
    return AdminBrokerProcessor(
        _broker_config(),
        store,
        topics or FakeTopics(),
        FakeOffsets(),
        FakeSubscriptions(),
        ConsumerManager(),
        FakeDelayOffsets(),
        FakeMetadata(),
        FakeMetadata(),
        FakeHA(),
        FakeRuntime(),
    )


def _admin_request(code: int, **ext: str) -> RemotingCommand:
    return RemotingCommand(code, ext_fields=dict(ext))


def test_admin_max_and_min_offset_read_the_store() -> None:
    store = FakeStore()
    store.queues[(TOPIC, 3)] = (17, 250)
    a = _admin(store)
    mx = a.get_max_offset(FakeConn(), _admin_request(RequestCode.GET_MAX_OFFSET, topic=TOPIC, queueId="3"))
    mn = a.get_min_offset(FakeConn(), _admin_request(RequestCode.GET_MIN_OFFSET, topic=TOPIC, queueId="3"))
    assert (mx.code, (mx.ext_fields or {})["offset"]) == (ResponseCode.SUCCESS, "250")
    assert (mn.code, (mn.ext_fields or {})["offset"]) == (ResponseCode.SUCCESS, "17")


def test_admin_min_offset_of_a_missing_queue_is_zero() -> None:
    a = _admin(FakeStore())
    mn = a.get_min_offset(FakeConn(), _admin_request(RequestCode.GET_MIN_OFFSET, topic="x", queueId="0"))
    assert (mn.ext_fields or {})["offset"] == "0"


def test_admin_topic_stats_per_write_queue() -> None:
    store = FakeStore()
    store.queues[(TOPIC, 0)] = (0, 5)
    store.queues[(TOPIC, 1)] = (2, 9)
    store.store_times[(TOPIC, 1, 8)] = 1_700_000_000_123
    a = _admin(store, FakeTopics(TopicConfig(TOPIC, 2, 2)))
    resp = a.get_topic_stats_info(FakeConn(), _admin_request(RequestCode.GET_TOPIC_STATS_INFO, topic=TOPIC))
    assert resp.code == ResponseCode.SUCCESS
    entries = loads_object_keyed_map(resp.body or b"", "offsetTable")
    got = {(k["brokerName"], k["queueId"]): v for k, v in entries}
    assert got == {
        ("broker-a", 0): {"lastUpdateTimestamp": 0, "maxOffset": 5, "minOffset": 0},
        ("broker-a", 1): {"lastUpdateTimestamp": 1_700_000_000_123, "maxOffset": 9, "minOffset": 2},
    }


def test_admin_topic_stats_of_a_missing_topic() -> None:
    a = _admin(FakeStore())
    resp = a.get_topic_stats_info(FakeConn(), _admin_request(RequestCode.GET_TOPIC_STATS_INFO, topic="gone"))
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST


def test_admin_create_topic_answers_after_persist_and_register() -> None:
    topics = FakeTopics()
    persisted, registered = FakeMetadata(), FakeMetadata()
    a = AdminBrokerProcessor(
        _broker_config(),
        FakeStore(),
        topics,
        FakeOffsets(),
        FakeSubscriptions(),
        ConsumerManager(),
        FakeDelayOffsets(),
        persisted,
        registered,
        FakeHA(),
        FakeRuntime(),
    )
    ext = {
        "topic": "NewTopic",
        "defaultTopic": "TBW102",
        "readQueueNums": "4",
        "writeQueueNums": "4",
        "perm": "6",
        "topicFilterType": "SINGLE_TAG",
    }
    later = a.update_and_create_topic(FakeConn(), RemotingCommand(RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields=ext))
    assert "NewTopic" in topics.table
    assert not isinstance(later, RemotingCommand)
    resp = asyncio.run(_await(later))
    assert resp.code == ResponseCode.SUCCESS
    assert (persisted.persisted, registered.registered) == (1, 1)


async def _await(aw: Any) -> RemotingCommand:
    return await aw
