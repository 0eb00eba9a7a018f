"""Consumption-semantics pieces without a broker: the orderly side of ProcessQueue, the
local offset file, the orderly consume result, transaction checks and the requests a
broker sends to the client instance, the resetOffsetByTime timestamp."""

from __future__ import annotations

import asyncio
import os
from datetime import datetime
from types import SimpleNamespace

import pytest

from rmq.admin.base import UsageError
from rmq.admin.commands.offset import parse_reset_timestamp
from rmq.client.config import ClientConfig
from rmq.client.consume_orderly import ConsumeMessageOrderlyService, ConsumeOrderlyContext, ConsumeOrderlyResult
from rmq.client.instance import MQClientInstance
from rmq.client.message import Message, SendResult, SendStatus
from rmq.client.offset_store import (
    LOCAL_OFFSET_STORE_DIR_ENV,
    LocalFileOffsetStore,
    ReadOffsetType,
    default_local_offset_store_dir,
)
from rmq.client.process_queue import ProcessQueue
from rmq.client.transaction import (
    LocalTransactionState,
    TransactionListener,
    TransactionMessageExt,
    TransactionProducer,
)
from rmq.protocol.bodies import MessageQueue, dumps_object_keyed_map
from rmq.protocol.codes import RequestCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import CheckTransactionStateRequestHeader, ResetOffsetRequestHeader
from rmq.protocol.message import MessageConst, SysFlag, create_message_id, pack_host
from tests.unit.client.records import ext, record

S = LocalTransactionState


# --------------------------------------------------------------------------- process queue
def test_orderly_process_queue_takes_in_order_and_puts_back_at_the_head():
    pq = ProcessQueue()
    assert pq.put_messages([ext(i) for i in (12, 10, 11)]) is True  # start a consume task
    assert pq.put_messages([ext(13)]) is False  # one is running
    first = pq.take_messages(2)
    assert [m.queue_offset for m in first] == [10, 11]
    assert pq.consuming_count == 2 and pq.msg_count == 4 and pq.has_temp_message()
    pq.make_message_to_consume_again(first)  # suspended
    assert [m.queue_offset for m in pq.take_messages(3)] == [10, 11, 12]
    assert pq.commit() == 13 and pq.msg_count == 1
    assert pq.commit() == -1
    assert [m.queue_offset for m in pq.take_messages(5)] == [13]
    assert pq.take_messages(5) == [] and pq.consuming is False  # the task ends
    assert pq.commit() == 14
    assert pq.put_messages([ext(14)]) is True  # a new task
    pq.take_messages(1)
    pq.clear()
    assert pq.commit() == -1 and pq.msg_count == 0


def test_lock_expiry():
    pq = ProcessQueue()
    assert not pq.is_lock_expired()
    pq.last_lock_timestamp -= 30001
    assert pq.is_lock_expired()


# --------------------------------------------------------------------------- local offsets
MQ0, MQ1 = MessageQueue("T", "b", 0), MessageQueue("T", "b", 1)


async def test_local_offset_store_file_layout_and_round_trip(tmp_path):
    store = LocalFileOffsetStore("10.0.0.1@inst", "G", tmp_path)
    assert store.store_path == tmp_path / "10.0.0.1@inst" / "G" / "offsets.json"
    assert await store.read_offset(MQ0, ReadOffsetType.READ_FROM_STORE) == -1  # no file
    store.update_offset(MQ0, 5, False)
    store.update_offset(MQ1, 7, False)
    store.update_offset(MQ0, 3, True)  # increase only: ignored
    await store.persist_all({MQ0, MQ1})
    text = store.store_path.read_bytes()
    assert text == dumps_object_keyed_map("offsetTable", [(MQ0.to_obj(), 5), (MQ1.to_obj(), 7)])
    assert not store.tmp_path.exists() and not store.bak_path.exists()
    store.update_offset(MQ0, 9, False)
    await store.persist_all({MQ0})  # only the given queues are written
    assert store.bak_path.read_bytes() == text  # the previous content
    again = LocalFileOffsetStore("10.0.0.1@inst", "G", tmp_path)
    again.load()
    assert again.offset_table == {MQ0: 9}
    assert await again.read_offset(MQ1, ReadOffsetType.READ_FROM_MEMORY) == -1
    assert await again.read_offset(MQ0, ReadOffsetType.MEMORY_FIRST_THEN_STORE) == 9
    again.remove_offset(MQ0)  # kept, as Java
    assert await again.read_offset(MQ0, ReadOffsetType.READ_FROM_MEMORY) == 9


async def test_local_offset_store_falls_back_to_the_bak_and_reads_java_files(tmp_path):
    store = LocalFileOffsetStore("c", "G", tmp_path)
    store.store_path.parent.mkdir(parents=True)
    store.store_path.write_text('{"offsetTable":{{tor')  # torn / corrupt
    store.bak_path.write_text('{"offsetTable":{{"brokerName":"b","queueId":1,"topic":"T"}:4}}')
    store.load()
    assert store.offset_table == {MQ1: 4}
    # what a Java client writes (JSON.toJSONString(wrapper, true))
    store.store_path.write_text(
        '{\n\t"offsetTable":{{\n\t\t\t"brokerName":"b",\n\t\t\t"queueId":0,\n\t\t\t"topic":"T"\n\t\t}:42\n\t}\n}'
    )
    fresh = LocalFileOffsetStore("c", "G", tmp_path)
    assert await fresh.read_offset(MQ0, ReadOffsetType.READ_FROM_STORE) == 42
    assert fresh.offset_table == {MQ0: 42}


def test_local_offset_store_default_dir(monkeypatch, tmp_path):
    monkeypatch.delenv(LOCAL_OFFSET_STORE_DIR_ENV, raising=False)
    assert default_local_offset_store_dir() == os.path.join(os.path.expanduser("~"), ".rocketmq_offsets")
    monkeypatch.setenv(LOCAL_OFFSET_STORE_DIR_ENV, str(tmp_path))
    assert LocalFileOffsetStore("c", "G").store_path == tmp_path / "c" / "G" / "offsets.json"
    cfg = ClientConfig(local_offset_store_dir="/x")
    assert cfg.copy().local_offset_store_dir == "/x"


# --------------------------------------------------------------------------- orderly results
class FakeStore:
    def __init__(self) -> None:
        self.updates: list[tuple[MessageQueue, int]] = []

    def update_offset(self, mq, offset, increase_only):
        self.updates.append((mq, offset))


def orderly_service(max_reconsume_times: int = -1, sent_back_ok: bool = True):
    consumer = SimpleNamespace(
        group="G",
        instance=None,
        consume_thread_max=1,
        offset_store=FakeStore(),
        max_reconsume_times=max_reconsume_times,
        suspend_current_queue_time_millis=1000,
        message_model=SimpleNamespace(value="CLUSTERING"),
    )
    svc = ConsumeMessageOrderlyService(consumer, lambda msgs, ctx: None)
    svc.later: list[int] = []
    svc.sent_back: list = []
    svc.submit_consume_request_later = lambda pq, mq, ms: svc.later.append(ms)

    async def send_back(m):
        svc.sent_back.append((m.queue_offset, m.reconsume_times))
        return sent_back_ok

    svc.send_message_back = send_back
    return svc, consumer


async def test_orderly_suspend_counts_local_retries_then_sends_back():
    svc, consumer = orderly_service(max_reconsume_times=2)
    pq, mq = ProcessQueue(), MQ0
    pq.put_messages([ext(0), ext(1)])
    for attempt in range(2):
        msgs = pq.take_messages(1)
        ctx = ConsumeOrderlyContext(mq)
        go_on = await svc.process_consume_result(msgs, ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT, ctx, pq, mq)
        assert go_on is False and msgs[0].reconsume_times == attempt + 1
    assert svc.later == [-1, -1] and consumer.offset_store.updates == []
    msgs = pq.take_messages(1)
    assert msgs[0].queue_offset == 0 and msgs[0].reconsume_times == 2
    go_on = await svc.process_consume_result(
        msgs, ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT, ConsumeOrderlyContext(mq), pq, mq
    )
    assert go_on is True and svc.sent_back == [(0, 2)]
    assert consumer.offset_store.updates == [(mq, 1)]  # the queue moves on
    msgs = pq.take_messages(1)
    assert await svc.process_consume_result(msgs, ConsumeOrderlyResult.SUCCESS, ConsumeOrderlyContext(mq), pq, mq)
    assert consumer.offset_store.updates[-1] == (mq, 2)


async def test_orderly_failed_send_back_keeps_the_message_and_default_is_unbounded():
    svc, consumer = orderly_service(max_reconsume_times=0, sent_back_ok=False)
    pq = ProcessQueue()
    pq.put_messages([ext(0)])
    msgs = pq.take_messages(1)
    ctx = ConsumeOrderlyContext(MQ0, suspend_current_queue_time_millis=50)
    assert not await svc.process_consume_result(msgs, ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT, ctx, pq, MQ0)
    assert svc.later == [50] and msgs[0].reconsume_times == 1
    assert [m.queue_offset for m in pq.take_messages(1)] == [0]
    assert orderly_service()[0].max_reconsume_times() == 2**31 - 1


async def test_orderly_manual_commit_and_rollback():
    svc, consumer = orderly_service()
    pq = ProcessQueue()
    pq.put_messages([ext(0), ext(1)])
    ctx = ConsumeOrderlyContext(MQ0, auto_commit=False)
    msgs = pq.take_messages(1)
    assert await svc.process_consume_result(msgs, ConsumeOrderlyResult.SUCCESS, ctx, pq, MQ0)
    assert consumer.offset_store.updates == []  # not committed yet
    msgs = pq.take_messages(1)
    assert not await svc.process_consume_result(msgs, ConsumeOrderlyResult.ROLLBACK, ctx, pq, MQ0)
    assert [m.queue_offset for m in pq.take_messages(2)] == [0, 1]
    assert await svc.process_consume_result(msgs, ConsumeOrderlyResult.COMMIT, ctx, pq, MQ0)
    assert consumer.offset_store.updates == [(MQ0, 2)]


# --------------------------------------------------------------------------- transactions
class FakeApi:
    def __init__(self) -> None:
        self.ends: list[tuple[str, object, str | None]] = []

    async def end_transaction_oneway(self, addr, header, remark=None):
        self.ends.append((addr, header, remark))


def tx_producer(listener) -> tuple[TransactionProducer, FakeApi]:
    p = TransactionProducer("PG", "127.0.0.1:1", transaction_listener=listener)
    api = FakeApi()
    p.instance = SimpleNamespace(api=api, find_broker_address_in_publish=lambda n: "1.2.3.4:10911")
    p._state = "RUNNING"
    p._check_sem = asyncio.Semaphore(1)
    return p, api


class Answers(TransactionListener):
    def __init__(self, execute, check) -> None:
        self.execute, self.check = execute, check
        self.checked: list[TransactionMessageExt] = []

    def execute_local_transaction(self, msg, arg):
        if isinstance(self.execute, Exception):
            raise self.execute
        return self.execute

    def check_local_transaction(self, msg):
        self.checked.append(msg)
        if isinstance(self.check, Exception):
            raise self.check
        return self.check


async def test_check_is_answered_with_the_checks_offsets():
    listener = Answers(None, S.COMMIT_MESSAGE)
    p, api = tx_producer(listener)
    uk = "0A0B0C0D00002A9F0000000000000001"
    msg = ext(7, b"half", {MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: uk, MessageConst.PRODUCER_GROUP: "PG"})
    h = CheckTransactionStateRequestHeader(33, 4400, None, uk, uk, msg.msg_id)
    p.check_transaction_state("1.2.3.4:10911", msg, h)
    await asyncio.gather(*p._check_tasks)
    [(addr, end, remark)] = api.ends
    assert addr == "1.2.3.4:10911" and remark is None
    assert (end.producer_group, end.tran_state_table_offset, end.commit_log_offset) == ("PG", 33, 4400)
    assert end.commit_or_rollback == SysFlag.TRANSACTION_COMMIT_TYPE
    assert end.from_transaction_check is True and end.msg_id == uk and end.transaction_id == uk
    assert listener.checked[0].transaction_id == uk and listener.checked[0].body == b"half"
    # a failing check answers UNKNOW with the exception in the remark
    listener.check = RuntimeError("db down")
    p.check_transaction_state("1.2.3.4:10911", msg, h)
    await asyncio.gather(*p._check_tasks)
    _, end, remark = api.ends[-1]
    assert end.commit_or_rollback == SysFlag.TRANSACTION_NOT_TYPE
    assert "checkLocalTransactionState Exception" in remark and "db down" in remark


@pytest.mark.parametrize(
    "execute,status,want",
    [
        (S.COMMIT_MESSAGE, SendStatus.SEND_OK, S.COMMIT_MESSAGE),
        (S.ROLLBACK_MESSAGE, SendStatus.SEND_OK, S.ROLLBACK_MESSAGE),
        (None, SendStatus.SEND_OK, S.UNKNOW),
        (RuntimeError("boom"), SendStatus.SEND_OK, S.UNKNOW),
        (S.COMMIT_MESSAGE, SendStatus.FLUSH_DISK_TIMEOUT, S.ROLLBACK_MESSAGE),
    ],
)
async def test_send_in_transaction_ends_as_the_local_transaction_says(execute, status, want):
    p, api = tx_producer(Answers(execute, None))
    sent: list[Message] = []
    offset_id = create_message_id(pack_host("1.2.3.4", 10911), 123456)

    async def send(msg):
        sent.append(msg)
        return SendResult(status, "UNIQ1", offset_id, MessageQueue("T", "broker-a", 1), 17)

    p.send = send
    msg = Message("T", b"b", delay_time_level=3)
    r = await p.send_message_in_transaction(msg, "arg")
    assert r.local_transaction_state is want and r.queue_offset == 17
    assert sent[0].properties[MessageConst.TRANSACTION_PREPARED] == "true"
    assert sent[0].properties[MessageConst.PRODUCER_GROUP] == "PG"
    assert sent[0].delay_time_level == 0
    [(addr, end, remark)] = api.ends
    assert addr == "1.2.3.4:10911"
    assert (end.tran_state_table_offset, end.commit_log_offset, end.msg_id) == (17, 123456, "UNIQ1")
    assert end.from_transaction_check is False
    code = {S.COMMIT_MESSAGE: 8, S.ROLLBACK_MESSAGE: 12, S.UNKNOW: 0}[want]
    assert end.commit_or_rollback == code
    assert (remark is not None) == isinstance(execute, Exception)
    if status is SendStatus.SEND_OK:
        assert r.transaction_id == "UNIQ1" == msg.transaction_id


# --------------------------------------------------------------------------- instance
async def test_instance_routes_checks_and_resets_to_their_owner():
    inst = MQClientInstance(ClientConfig(namesrv_addr="127.0.0.1:1"), "1.1.1.1@x")
    checks, resets = [], []
    inst.producer_table["PG"] = SimpleNamespace(
        check_transaction_state=lambda addr, msg, h: checks.append((addr, msg, h))
    )

    async def reset(topic, table):
        resets.append((topic, table))

    inst.consumer_table["CG"] = SimpleNamespace(reset_offset=reset)
    conn = SimpleNamespace(remote_address="9.9.9.9:10911")
    body = record(3, b"half", {MessageConst.PRODUCER_GROUP: "PG"}, topic="RealT")
    h = CheckTransactionStateRequestHeader(3, 300, None, "U", "U", "M")
    cmd = RemotingCommand(RequestCode.CHECK_TRANSACTION_STATE, ext_fields=h.to_ext_fields(), body=body)
    assert inst._process_check_transaction_state(conn, cmd) is None
    [(addr, msg, hh)] = checks
    assert addr == "9.9.9.9:10911" and msg.topic == "RealT" and hh.commit_log_offset == 300
    # a group this client has no producer of: ignored
    body2 = record(3, b"half", {MessageConst.PRODUCER_GROUP: "Other"})
    inst._process_check_transaction_state(
        conn, RemotingCommand(RequestCode.CHECK_TRANSACTION_STATE, ext_fields=h.to_ext_fields(), body=body2)
    )
    assert len(checks) == 1

    table = dumps_object_keyed_map("offsetTable", [(MQ0.to_obj(), 5), (MQ1.to_obj(), 6)])
    rh = ResetOffsetRequestHeader("T", "CG", 1700000000000, True)
    inst._process_reset_offset(
        conn, RemotingCommand(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, ext_fields=rh.to_ext_fields(), body=table)
    )
    await asyncio.gather(*inst._side_tasks)
    assert resets == [("T", {MQ0: 5, MQ1: 6})]
    await inst.remoting.close()


# --------------------------------------------------------------------------- admin
def test_reset_timestamp_forms():
    assert parse_reset_timestamp("-1") == -1
    assert parse_reset_timestamp(" 1700000000123 ") == 1700000000123
    now = parse_reset_timestamp("now")
    assert abs(now - int(datetime.now().timestamp() * 1000)) < 5000
    want = int(datetime(2024, 5, 6, 7, 8, 9, 123000).timestamp() * 1000)
    assert parse_reset_timestamp("2024-05-06#07:08:09:123") == want
    with pytest.raises(UsageError):
        parse_reset_timestamp("yesterday")
