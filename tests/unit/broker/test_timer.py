"""The pure parts of timer messages (rmq/broker/timer.py): the put hook's parsing, validation
and rewrite, the slot rounding, the copy for the real topic, and the wheel state's progress
(what a checkpoint may claim, restarts, the memory window), and config/timercheck (its bytes,
the move from the old consumer offsets, GET_TIMER_CHECK_POINT and the slave's copy)."""

from __future__ import annotations

import asyncio
import os
import struct
from collections.abc import Callable, Iterable

import pytest

from rmq.broker.config import BrokerConfig
from rmq.broker.processors.send import SendMessageProcessor
from rmq.broker.processors.timer_check import TimerCheckProcessor
from rmq.broker.slave_sync import SlaveSynchronize
from rmq.broker.timer import (
    TIMER_CHECK_FILE,
    TIMER_GROUP,
    TIMER_TOPIC,
    TimerCheckpoint,
    TimerHook,
    TimerIllegal,
    TimerMessageService,
    TimerWheelState,
    decode_timer_check,
    due_of,
    encode_timer_check,
    parse_deliver_ms,
    slot_of,
    timer_copy,
)
from rmq.common.clock import now_ms
from rmq.protocol.bodies import DataVersion, TopicConfig
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import SendMessageRequestHeader
from rmq.protocol.message import MessageExt, MessageExtBrokerInner, SysFlag, string_to_properties
from rmq.store.results import PutMessageResult, PutMessageStatus
from tests.integration.broker_util import wait_until
from tests.unit.broker.fakes import FakeConn, FakeStats, FakeStore, FakeSubscriptions, FakeTopics

NOW = 1_700_000_000_123


def _hook(**kw) -> TimerHook:
    return TimerHook(clock=lambda: NOW, **kw)


def _msg(**props: str) -> MessageExtBrokerInner:
    return MessageExtBrokerInner(topic="T", body=b"b", queue_id=3, properties=dict(props))


# --------------------------------------------------------------------------- parsing
def test_parse_deliver_ms_keys_and_precedence():
    assert parse_deliver_ms({}, NOW) is None
    assert parse_deliver_ms({"TIMER_DELIVER_MS": str(NOW + 5)}, NOW) == NOW + 5
    assert parse_deliver_ms({"TIMER_DELAY_MS": "250"}, NOW) == NOW + 250
    assert parse_deliver_ms({"TIMER_DELAY_SEC": "3"}, NOW) == NOW + 3000
    # RocketMQ 5 reads DELAY_SEC, then DELAY_MS, then DELIVER_MS
    both = {"TIMER_DELIVER_MS": "1", "TIMER_DELAY_MS": "7", "TIMER_DELAY_SEC": "2"}
    assert parse_deliver_ms(both, NOW) == NOW + 2000


def test_parse_deliver_ms_names_the_bad_field():
    with pytest.raises(TimerIllegal, match="TIMER_DELAY_SEC='soon'"):
        parse_deliver_ms({"TIMER_DELAY_SEC": "soon"}, NOW)


@pytest.mark.parametrize(("deliver", "slot"), [(10_000, 9_000), (10_001, 10_000), (10_999, 10_000), (11_000, 10_000)])
def test_slot_of_floors_and_moves_exact_multiples_one_slot_earlier(deliver, slot):
    assert slot_of(deliver, 1000) == slot
    # the slot's end, when it is delivered, is never early and less than a slot late
    assert deliver <= slot + 1000 < deliver + 1000


def test_due_of_is_the_asked_time_within_its_slot():
    out = slot_of(NOW + 2000, 1000)
    assert due_of({"TIMER_OUT_MS": str(out), "TIMER_DELIVER_MS": str(NOW + 2000)}, NOW, 1000) == NOW + 2000
    # relative delays count from the store time (after the hook's clock read)
    assert due_of({"TIMER_OUT_MS": str(out), "TIMER_DELAY_MS": "2000"}, NOW + 3, 1000) == NOW + 2003
    # outside the slot (clock moved), unreadable or missing: the slot's end
    assert due_of({"TIMER_OUT_MS": str(out), "TIMER_DELAY_SEC": "9"}, NOW, 1000) == out + 1000
    assert due_of({"TIMER_OUT_MS": str(out), "TIMER_DELAY_SEC": "x"}, NOW, 1000) == out + 1000
    assert due_of({"TIMER_OUT_MS": str(out)}, NOW, 1000) == out + 1000
    assert due_of({"TIMER_DELIVER_MS": "5"}, NOW, 1000) is None
    assert due_of({"TIMER_OUT_MS": "x"}, NOW, 1000) is None


# --------------------------------------------------------------------------- the hook
def test_hook_rewrites_into_the_timer_topic():
    m = _msg(TIMER_DELIVER_MS=str(NOW + 2000), UNIQ_KEY="U")
    m.properties_string = "stale"
    _hook()(m)
    assert (m.topic, m.queue_id) == (TIMER_TOPIC, 0)
    p = m.properties
    assert p["REAL_TOPIC"] == "T" and p["REAL_QID"] == "3"
    assert p["TIMER_OUT_MS"] == str(slot_of(NOW + 2000, 1000))
    assert p["TIMER_DELIVER_MS"] == str(NOW + 2000) and p["UNIQ_KEY"] == "U"
    assert m.properties_string is None  # encoded again by the caller


def test_hook_past_time_goes_straight_to_the_real_topic():
    m = _msg(TIMER_DELIVER_MS=str(NOW - 1))
    _hook()(m)
    assert m.topic == "T" and "TIMER_OUT_MS" not in m.properties


def test_hook_refuses_beyond_max_delay_naming_the_field():
    m = _msg(TIMER_DELAY_SEC=str(3600 * 24 * 3 + 1))
    with pytest.raises(TimerIllegal, match="max delay 259200000ms: TIMER_DELAY_SEC=259201"):
        _hook()(m)
    _hook()(_msg(TIMER_DELAY_SEC=str(3600 * 24 * 3)))  # exactly the max is fine
    with pytest.raises(TimerIllegal, match="TIMER_DELAY_SEC"):
        _hook(max_delay_sec=10)(_msg(TIMER_DELAY_SEC="11"))


def test_hook_delay_level_wins_and_drops_timer_keys():
    m = _msg(DELAY="2", TIMER_DELIVER_MS=str(NOW + 5000), TIMER_DELAY_SEC="5", TIMER_DELAY_MS="5")
    _hook()(m)
    assert m.topic == "T"
    assert m.properties == {"DELAY": "2"}


def test_hook_leaves_half_messages_and_disabled_wheel_refuses():
    half = _msg(TIMER_DELAY_SEC="5")
    half.sys_flag = SysFlag.TRANSACTION_PREPARED_TYPE
    _hook()(half)
    assert half.topic == "T"
    with pytest.raises(TimerIllegal, match="timerWheelEnable is false"):
        _hook(enabled=False)(_msg(TIMER_DELAY_SEC="5"))
    untouched = _msg(TIMER_OUT_MS="1", TIMER_DELAY_SEC="5")  # already transformed
    _hook()(untouched)
    assert untouched.topic == "T"


def test_timer_copy_restores_the_destination():
    unset = ("store_size", "magic", "body_crc", "queue_offset", "commit_log_offset", "sys_flag")
    more = ("born_timestamp", "reconsume_times", "prepared_transaction_offset")
    stored = MessageExt(
        **dict.fromkeys(unset + more, 0),
        born_host=b"",
        store_host=b"",
        topic=TIMER_TOPIC,
        queue_id=0,
        body=b"payload",
        flag=7,
        properties={
            "REAL_TOPIC": "T",
            "REAL_QID": "3",
            "TIMER_OUT_MS": "1000",
            "KEYS": "k1 k2",
            "UNIQ_KEY": "U",
            "TIMER_DELIVER_MS": "2000",
        },
        store_timestamp=555,
    )
    c = timer_copy(stored, 2001)
    assert (c.topic, c.queue_id, c.body, c.flag) == ("T", 3, b"payload", 7)
    p = c.properties
    assert "REAL_TOPIC" not in p and "REAL_QID" not in p
    assert p["TIMER_DEQUEUE_MS"] == "2001" and p["TIMER_ENQUEUE_MS"] == "555"
    assert p["KEYS"] == "k1 k2" and p["UNIQ_KEY"] == "U" and p["TIMER_OUT_MS"] == "1000"


# --------------------------------------------------------------------------- progress
def _scan(st: TimerWheelState, now: int, entries: list[tuple[int, int]]) -> None:
    """One pass (new entries, or a re-read from far_low) over (cq offset, due) entries."""
    st.begin_pass(now)
    for off, due in entries:
        if off >= st.cursor:
            st.offer(off, off * 100, 100, due)
    st.end_pass()


def _deliver(st: TimerWheelState, now: int) -> list[int]:
    out = []
    while st.peek_due(now) is not None:
        out.append(st.delivered()[1])
    return out


def test_checkpoint_low_is_the_lowest_undelivered_offset():
    st = TimerWheelState(0, None, 0, window_ms=10_000)
    _scan(st, 0, [(0, 5000), (1, 1000), (2, 3000)])
    assert st.checkpoint(0) == TimerCheckpoint(0, 3, 0)
    assert _deliver(st, 3000) == [1, 2]
    cp = st.checkpoint(3000)
    assert cp == TimerCheckpoint(0, 3, 3000)  # offset 0 (due 5000) still pending
    assert _deliver(st, 5000) == [0]
    assert st.checkpoint(5000) == TimerCheckpoint(3, 3, 5000)
    # through is capped below the earliest pending due
    _scan(st, 5000, [(3, 6000)])
    assert st.checkpoint(7000).delivered_through == 5999


def test_restart_skips_what_the_checkpoint_proves_delivered():
    entries = [(0, 9000), (1, 1000), (2, 2000), (3, 8000)]
    st = TimerWheelState(0, None, 0, window_ms=100_000)
    _scan(st, 0, entries)
    _deliver(st, 2500)
    cp = st.checkpoint(2500)
    assert cp == TimerCheckpoint(0, 4, 2500)
    # a new entry arrives after the checkpoint, then the process dies
    entries.append((4, 3000))
    st2 = TimerWheelState(cp.low, cp, 2600, window_ms=100_000)
    assert st2.checkpoint(2600) == cp  # until the old scan end is passed again
    _scan(st2, 2600, entries)
    assert sorted(e[1] for e in st2.heap) == [0, 3, 4]  # 1 and 2 not again
    assert st2.restored is None
    assert _deliver(st2, 10_000) == [4, 3, 0]


def test_far_entries_stay_on_disk_until_the_horizon_nears():
    window = 10_000
    entries = [(0, 1000), (1, 50_000), (2, 2000), (3, 30_000)]
    st = TimerWheelState(0, None, 0, window_ms=window)
    _scan(st, 0, entries)
    assert [e[1] for e in sorted(st.heap)] == [0, 2]
    assert st.far_low == 1 and st.pending == 4
    _deliver(st, 2000)
    assert st.checkpoint(2000).low == 1
    assert not st.needs_rescan(2000)
    now = window // 2  # the horizon is half a window away: read the far ones again
    assert st.needs_rescan(now)
    _scan(st, now, entries)
    assert st.heap == [] and st.far_low == 1  # still beyond now + window (15 s)
    now = 25_000
    _scan(st, now, entries)
    assert [e[1] for e in st.heap] == [3] and st.far_low == 1 and st.far == 1
    now = 45_000
    _scan(st, now, entries)
    assert sorted(e[1] for e in st.heap) == [1, 3] and st.far_low is None and st.far == 0
    assert _deliver(st, 50_000) == [3, 1]
    assert st.checkpoint(50_000) == TimerCheckpoint(4, 4, 50_000)


def test_checkpoint_within_a_shorter_queue():
    cp = TimerCheckpoint(3, 9, 123)
    assert cp.within(9) == cp
    # a log that ends before the old scan end: those offsets hold entries not seen
    assert cp.within(5) == TimerCheckpoint(3, 5, 123)
    assert cp.within(1) == TimerCheckpoint(1, 1, 123)


def test_timer_check_bytes_are_rocketmq_5s_layout_and_round_trip():
    cp, version = TimerCheckpoint(3, 9, NOW), DataVersion(NOW + 5, 7, 0)
    raw = encode_timer_check(cp, version)
    # lastReadTimeMs, lastTimerLogFlushPos (our low), lastTimerQueueOffset,
    # masterTimerQueueOffset, then the DataVersion (stateVersion, timestamp, counter)
    assert raw == struct.pack(">7q", NOW, 3, 9, 9, 0, NOW + 5, 7)
    assert decode_timer_check(raw) == (cp, version)
    page = encode_timer_check(cp, version, 4096)
    assert len(page) == 4096 and page[:56] == raw and page[56:] == bytes(4040)
    assert decode_timer_check(page) == (cp, version)
    # a file from before the DataVersion: the first four longs
    assert decode_timer_check(raw[:32]) == (cp, DataVersion(0, 0, 0))
    with pytest.raises(ValueError, match="31 bytes"):
        decode_timer_check(raw[:31])


def test_checkpoint_from_the_old_offsets():
    assert TimerCheckpoint.from_offsets({0: 3, 1: 9, 2: 123}) == TimerCheckpoint(3, 9, 123)
    assert TimerCheckpoint.from_offsets({}) is None


# --------------------------------------------------------------------------- the service
class _CQ:
    def __init__(self) -> None:
        self.units: list[tuple[int, int]] = []

    def iter_units(self, start: int):
        for i in range(max(start, 0), len(self.units)):
            yield i, *self.units[i], 0

    def get_min_offset_in_queue(self) -> int:
        return 0


class _Store:
    """The few store calls the timer service makes; commits complete when the test says."""

    def __init__(self) -> None:
        self.cq = _CQ()
        self.records: dict[int, MessageExt] = {}
        self.puts: list[MessageExtBrokerInner] = []
        self.commit: asyncio.Future[PutMessageStatus] | None = None
        self.put_status = PutMessageStatus.PUT_OK

    def add_timer(self, due: int) -> None:
        phy = 1000 + 100 * len(self.cq.units)
        props = {"REAL_TOPIC": "T", "REAL_QID": "1", "TIMER_OUT_MS": str(slot_of(due, 1000))}
        props["TIMER_DELIVER_MS"] = str(due)
        unset = ("store_size", "magic", "body_crc", "queue_offset", "sys_flag", "born_timestamp", "reconsume_times")
        self.records[phy] = MessageExt(
            **dict.fromkeys(unset, 0),
            commit_log_offset=phy,
            prepared_transaction_offset=0,
            born_host=b"",
            store_host=b"",
            store_timestamp=1,
            topic=TIMER_TOPIC,
            queue_id=0,
            body=str(due).encode(),
            flag=0,
            properties=props,
        )
        self.cq.units.append((phy, 100))

    def get_consume_queue(self, topic: str, queue_id: int) -> _CQ | None:
        return self.cq if (topic, queue_id) == (TIMER_TOPIC, 0) else None

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return 0

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return len(self.cq.units)

    def look_message_by_offset(self, phy: int) -> MessageExt | None:
        return self.records.get(phy)

    def put_nowait(self, msg: MessageExtBrokerInner):
        if self.put_status is PutMessageStatus.PUT_OK:
            self.puts.append(msg)
        return PutMessageResult(self.put_status, wrote_offset=len(self.puts)), None

    def commit_waiter(self, result: PutMessageResult):
        return self.commit


class _Offsets:
    """The consumer offset table as the migration sees it."""

    def __init__(self, table: dict[str, dict[int, int]] | None = None) -> None:
        self.table = table or {}

    def query_offsets(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.table.get(f"{topic}@{group}", {}))

    def remove_group(self, group: str, topics: Iterable[str] | None = None) -> None:
        for key in list(self.table):
            t, _, g = key.partition("@")
            if g == group and (topics is None or t in topics):
                del self.table[key]


def _file(tmp_path) -> TimerCheckpoint | None:
    path = tmp_path / TIMER_CHECK_FILE
    if not path.exists():
        return None
    raw = path.read_bytes()
    assert len(raw) == 4096  # one page, as RocketMQ maps it
    return decode_timer_check(raw)[0]


async def test_progress_is_saved_only_after_the_copies_are_committed(tmp_path):
    store = _Store()
    now = now_ms()
    for due in (now - 10, now + 60_000, now - 5):
        store.add_timer(due)
    svc = TimerMessageService(store, str(tmp_path))
    svc.state = TimerWheelState(0, None, now)  # as start() makes it, without the loops
    svc.scan_step()
    svc.deliver_step()
    assert [m.body for m in store.puts] == [str(now - 10).encode(), str(now - 5).encode()]
    assert (store.puts[0].topic, store.puts[0].queue_id) == ("T", 1)
    store.commit = asyncio.get_running_loop().create_future()
    saving = asyncio.ensure_future(svc.save_checkpoint())
    await asyncio.sleep(0.01)
    assert _file(tmp_path) is None  # the copies are not committed yet
    store.commit.set_result(PutMessageStatus.PUT_OK)
    await saving
    cp = _file(tmp_path)
    assert cp is not None and cp.low == 1 and cp.scanned == 3  # offset 1 (a minute ahead) pending
    assert svc.saved == cp and svc.version.counter == 1
    assert svc.figures() == {"timer_pending": 1, "timer_delivered": 2, "timer_latency_ms": 0}
    # unchanged progress: the file is not written again
    mtime = os.stat(tmp_path / TIMER_CHECK_FILE).st_mtime_ns
    svc._last_put = None
    svc.state.checkpoint = lambda now: cp  # type: ignore[method-assign]
    await svc.save_checkpoint()
    assert svc.version.counter == 1 and os.stat(tmp_path / TIMER_CHECK_FILE).st_mtime_ns == mtime


async def test_a_failed_put_keeps_the_entry_and_progress(tmp_path):
    store = _Store()
    now = now_ms()
    store.add_timer(now - 10)
    svc = TimerMessageService(store, str(tmp_path))
    svc.state = TimerWheelState(0, None, now)
    svc.scan_step()
    store.put_status = PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert svc.deliver_step() > 0 and store.puts == []
    await svc.save_checkpoint()
    assert _file(tmp_path) == TimerCheckpoint(0, 1, min(now_ms(), now - 10 - 1))
    store.put_status = PutMessageStatus.PUT_OK
    svc.deliver_step()
    assert len(store.puts) == 1 and svc.state.pending == 0


async def test_start_resumes_from_the_file_and_stop_saves_progress(tmp_path):
    store = _Store()
    now = now_ms()
    store.add_timer(now - 3000)  # delivered before the "restart"
    store.add_timer(now - 2000)  # pending then
    store.add_timer(now + 60_000)
    (tmp_path / TIMER_CHECK_FILE).write_bytes(
        encode_timer_check(TimerCheckpoint(0, 2, now - 2500), DataVersion(1, 4, 0))
    )
    svc = TimerMessageService(store, str(tmp_path))
    stale = _Offsets({f"{TIMER_TOPIC}@{TIMER_GROUP}": {0: 9, 1: 9, 2: 9}})
    await svc.load(stale)  # the file wins over offsets left by a crash after the move
    assert svc.saved == TimerCheckpoint(0, 2, now - 2500) and svc.version == DataVersion(1, 4, 0)
    assert stale.table == {}
    svc.start()
    await wait_until(lambda: len(store.puts) == 1, 5, "the pending timer delivered")
    await asyncio.sleep(0.3)
    await svc.stop()
    assert [m.body for m in store.puts] == [str(now - 2000).encode()]
    cp = _file(tmp_path)
    assert cp is not None and (cp.low, cp.scanned) == (2, 3)
    assert svc.version.counter > 4
    assert not svc.started and svc.figures()["timer_pending"] == 0


async def test_a_checkpoint_in_the_old_offsets_moves_to_the_file_once(tmp_path):
    other = {0: 5}
    offsets = _Offsets({f"{TIMER_TOPIC}@{TIMER_GROUP}": {0: 3, 1: 9, 2: 123}, "T@g": dict(other)})
    svc = TimerMessageService(_Store(), str(tmp_path))
    await svc.load(offsets)
    assert _file(tmp_path) == TimerCheckpoint(3, 9, 123) == svc.saved
    assert offsets.table == {"T@g": other}  # the internal group is gone, the rest kept
    again = TimerMessageService(_Store(), str(tmp_path))
    await again.load(offsets)
    assert again.saved == TimerCheckpoint(3, 9, 123) and again.version == svc.version
    # nothing anywhere: no file, no checkpoint
    fresh = tmp_path / "fresh"
    none = TimerMessageService(_Store(), str(fresh))
    await none.load(_Offsets())
    assert none.saved is None and not (fresh / TIMER_CHECK_FILE).exists()


async def test_a_bad_file_stops_the_load_naming_it(tmp_path):
    (tmp_path / TIMER_CHECK_FILE).write_bytes(b"short")
    with pytest.raises(ValueError, match=TIMER_CHECK_FILE):
        await TimerMessageService(_Store(), str(tmp_path)).load(_Offsets())


class _MasterClient:
    """A RemotingClient whose master answers GET_TIMER_CHECK_POINT from its timer service."""

    def __init__(self, master: TimerMessageService) -> None:
        self.processor = TimerCheckProcessor(master)
        self.asked: list[int] = []

    async def invoke(self, addr: str, request: RemotingCommand, timeout: float) -> RemotingCommand:
        self.asked.append(request.code)
        return self.processor.get_timer_check_point(None, request)


async def test_a_slave_stores_its_masters_checkpoint_and_resumes_from_it(tmp_path):
    master = TimerMessageService(_Store(), str(tmp_path / "a"))
    assert decode_timer_check(
        TimerCheckProcessor(master).get_timer_check_point(None, RemotingCommand(RequestCode.GET_TIMER_CHECK_POINT)).body
        or b""
    ) == (TimerCheckpoint(0, 0, 0), DataVersion(0, 0, 0))  # before any
    await master.adopt(encode_timer_check(TimerCheckpoint(1, 4, NOW), DataVersion(NOW, 3, 0)))  # as if saved
    slave_store = _Store()
    for due in (NOW - 10, NOW + 1):
        slave_store.add_timer(due)
    slave = TimerMessageService(slave_store, str(tmp_path / "b"))
    client = _MasterClient(master)
    sync = SlaveSynchronize(client, BrokerConfig(), None, None, None, None, slave)  # type: ignore[arg-type]
    await sync.sync_timer_check_point("master:10911")
    assert client.asked == [RequestCode.GET_TIMER_CHECK_POINT]
    assert _file(tmp_path / "b") == TimerCheckpoint(1, 4, NOW) == slave.saved
    assert slave.version == DataVersion(NOW, 3, 0)  # the master's (assignNewOne)
    mtime = os.stat(tmp_path / "b" / TIMER_CHECK_FILE).st_mtime_ns
    assert not await slave.adopt(master.check_body())  # same version: not written again
    assert os.stat(tmp_path / "b" / TIMER_CHECK_FILE).st_mtime_ns == mtime
    # promoted: resumes from it, cut to its own timer queue (2 entries)
    slave.start()
    try:
        assert slave.state is not None and slave.state.restored == TimerCheckpoint(1, 2, NOW)
        # offset 0 is below the master's low (delivered there); offset 1 is not
        await wait_until(lambda: len(slave_store.puts) == 1, 5, "the timer the master had not delivered")
        assert slave_store.puts[0].body == str(NOW + 1).encode()
        assert not await slave.adopt(encode_timer_check(TimerCheckpoint(0, 0, 0), DataVersion(1, 9, 0)))
    finally:
        await slave.stop()


# --------------------------------------------------------------------------- the send path
def _never_called(msg: MessageExtBrokerInner) -> None:
    raise AssertionError("the timer hook was called for a message without TIMER_ keys")


def _timer_send(props: str, hook: Callable[[MessageExtBrokerInner], None]) -> tuple[RemotingCommand, FakeStore]:
    store = FakeStore()
    p = SendMessageProcessor(
        BrokerConfig(brokerName="broker-a", brokerIP1="10.0.0.1"),
        store,
        FakeTopics(TopicConfig("T", 4, 4)),
        FakeSubscriptions(),
        FakeStats(),
        None,
        timer_hook=hook,
    )
    h = SendMessageRequestHeader("pg", "T", "TBW102", 4, 2, 0, NOW, 0, properties=props)
    resp = p.process(FakeConn(), RemotingCommand(RequestCode.SEND_MESSAGE, ext_fields=h.to_ext_fields(), body=b"b"))
    assert isinstance(resp, RemotingCommand)
    return resp, store


def test_send_processor_stores_a_timer_message_in_the_timer_topic():
    resp, store = _timer_send("UNIQ_KEY\x01U\x02TIMER_DELAY_SEC\x015\x02", _hook())
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    (m,) = store.puts
    assert isinstance(m, MessageExtBrokerInner)
    assert (m.topic, m.queue_id) == (TIMER_TOPIC, 0)
    stored = string_to_properties(m.properties_string)
    assert stored["REAL_TOPIC"] == "T" and stored["REAL_QID"] == "2" and stored["UNIQ_KEY"] == "U"
    assert stored["TIMER_OUT_MS"] == str(slot_of(NOW + 5000, 1000))
    # without TIMER_ in the properties the hook is not called
    resp, store = _timer_send("UNIQ_KEY\x01U\x02", _never_called)
    assert resp.code == ResponseCode.SUCCESS and store.puts[0].topic == "T"


def test_send_processor_answers_the_refusals():
    resp, store = _timer_send("TIMER_DELAY_SEC\x01999999\x02", _hook())
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "TIMER_DELAY_SEC" in (resp.remark or "")
    resp, store = _timer_send("TIMER_DELAY_SEC\x015\x02", _hook(enabled=False))
    assert resp.code == ResponseCode.SYSTEM_ERROR and "timerWheelEnable" in (resp.remark or "")
    assert store.puts == []
