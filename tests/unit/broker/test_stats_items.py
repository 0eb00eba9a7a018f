"""BrokerStatsManager (VIEW_BROKER_STATS_DATA's stats items) against 4.9.8's StatsItem
arithmetic: 10 s / 10 min / 1 h snapshots, a zero snapshot one period before a key's
first, sum / tps / avgpt from the oldest kept snapshot to the newest."""

from __future__ import annotations

import asyncio

import pytest

from rmq.broker.processors.stats import BrokerStatsProcessor
from rmq.broker.stats import (
    BROKER_GET_NUMS,
    BROKER_PUT_NUMS,
    DAY,
    GROUP_GET_LATENCY,
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    HOUR,
    MINUTE,
    SNDBCK_PUT_NUMS,
    TOPIC_PUT_NUMS,
    TOPIC_PUT_SIZE,
    BrokerStats,
    BrokerStatsManager,
    StatsSamplingService,
)
from rmq.protocol.bodies import BrokerStatsData, ConsumeStats, ConsumeStatsList, MessageQueue, OffsetWrapper
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.errors import ProtocolError
from rmq.protocol.frame import RemotingCommand
from rmq.store.results import GetMessageResult, GetMessageStatus, PutMessageResult, PutMessageStatus


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000_000

    def __call__(self) -> int:
        return self.ms


def _put(stats: BrokerStats, topic: str, n: int, size: int) -> None:
    stats.on_put(PutMessageResult(PutMessageStatus.PUT_OK, wrote_bytes=size, msg_num=n), None, topic)


def _get(stats: BrokerStats, group: str, topic: str, qid: int, n: int, size: int, ms: int) -> None:
    r = GetMessageResult(GetMessageStatus.FOUND, buffers=[b"x"] * n, buffer_total_size=size)
    stats.on_get(group, topic, r, qid, ms)


def test_minute_window_from_the_zero_snapshot_then_rolling():
    stats, clock = BrokerStats(), Clock()
    m = BrokerStatsManager(stats, "C", clock)
    _put(stats, "T", 1, 100)
    _put(stats, "T", 3, 300)  # a batch of three: one put
    m.sample(MINUTE)
    item = m.get_stats_item(TOPIC_PUT_NUMS, "T")
    assert item is not None
    ss = item.minute()
    # [(now-10s, 0, 0), (now, 2 puts, 4 messages)]
    assert (ss.sum, ss.tps, ss.avgpt, ss.times) == (4, 0.4, 2.0, 2)
    size = m.get_stats_item(TOPIC_PUT_SIZE, "T")
    assert size is not None and size.minute().sum == 400 and size.minute().avgpt == 200.0
    # eight more samples, 10 s apart, one message each: only seven snapshots are kept
    for _ in range(8):
        clock.ms += 10_000
        _put(stats, "T", 1, 100)
        m.sample(MINUTE)
    ss = item.minute()
    assert ss.sum == 6 and ss.tps == 0.1 and ss.times == 6
    assert item.hour().sum == 0 and item.day().sum == 0  # not sampled yet


def test_hour_and_day_windows_start_at_their_own_samples():
    stats, clock = BrokerStats(), Clock()
    m = BrokerStatsManager(stats, "C", clock)
    _put(stats, "T", 5, 500)
    m.sample(HOUR)
    m.sample(DAY)
    item = m.get_stats_item(TOPIC_PUT_NUMS, "T")
    assert item is not None
    assert item.hour().sum == 5 and item.hour().tps == 5 / 600
    assert item.day().sum == 5 and item.day().tps == 5 / 3600
    assert item.minute().sum == 0


def test_group_send_back_latency_and_broker_keys():
    stats, clock = BrokerStats(), Clock()
    m = BrokerStatsManager(stats, "Cluster", clock)
    assert m.get_stats_item(BROKER_PUT_NUMS, "Cluster") is None  # nothing put yet
    _put(stats, "T", 2, 200)
    _get(stats, "G", "T", 1, 2, 200, 4)
    _get(stats, "G", "T", 1, 0, 0, 8)  # a pull that found nothing is not a get
    stats.on_send_back("G", "T")
    m.sample(MINUTE)

    def minute(name: str, key: str) -> tuple[int, float]:
        item = m.get_stats_item(name, key)
        assert item is not None, (name, key)
        return item.minute().sum, item.minute().avgpt

    assert minute(GROUP_GET_NUMS, "T@G") == (2, 1.0)
    assert minute(GROUP_GET_SIZE, "T@G") == (200, 100.0)
    assert minute(GROUP_GET_LATENCY, "1@T@G") == (12, 6.0)
    assert minute(SNDBCK_PUT_NUMS, "T@G") == (1, 1.0)
    # incBrokerPutNums adds to the value only: no times, so no average
    assert minute(BROKER_PUT_NUMS, "Cluster") == (2, 0.0)
    assert minute(BROKER_GET_NUMS, "Cluster") == (2, 0.0)
    assert m.tps_group_get_nums("G", "T") == 0.2
    assert m.tps_group_get_nums("G", "Other") == 0.0


def test_a_key_added_since_the_last_sample_exists_with_zero_figures():
    stats = BrokerStats()
    m = BrokerStatsManager(stats, "C", Clock())
    assert m.get_stats_item(TOPIC_PUT_NUMS, "T") is None
    _put(stats, "T", 1, 10)
    item = m.get_stats_item(TOPIC_PUT_NUMS, "T")
    assert item is not None and item.minute().sum == 0
    assert m.get_stats_item("NO_SUCH_STATS", "T") is None


def _view(p: BrokerStatsProcessor, name: str, key: str) -> RemotingCommand:
    req = RemotingCommand(code=RequestCode.VIEW_BROKER_STATS_DATA, ext_fields={"statsName": name, "statsKey": key})
    return p.view_broker_stats_data(None, req)


def test_processor_answers_broker_stats_data_or_not_exist():
    stats, clock = BrokerStats(), Clock()
    m = BrokerStatsManager(stats, "C", clock)
    p = BrokerStatsProcessor(m)
    _put(stats, "T", 3, 30)
    m.sample(MINUTE)
    resp = _view(p, TOPIC_PUT_NUMS, "T")
    assert resp.code == ResponseCode.SUCCESS
    assert resp.body == (
        b'{"statsDay":{"avgpt":0.0,"sum":0,"tps":0.0},"statsHour":{"avgpt":0.0,"sum":0,"tps":0.0},'
        b'"statsMinute":{"avgpt":3.0,"sum":3,"tps":0.3}}'
    )
    data = BrokerStatsData.from_json(resp.body)
    assert data.stats_minute.sum == 3 and data.stats_minute.tps == 0.3 and data.compute_24hour_sum() == 3
    resp = _view(p, GROUP_GET_NUMS, "T@NoGroup")
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert resp.remark == "The stats <GROUP_GET_NUMS> <T@NoGroup> not exist"
    resp = p.view_broker_stats_data(None, RemotingCommand(code=315, ext_fields={"statsName": TOPIC_PUT_NUMS}))
    assert resp.code == ResponseCode.SYSTEM_ERROR and "statsKey" in (resp.remark or "")


def test_sampling_service_samples_at_start_then_at_a_fixed_rate():
    stats = BrokerStats()
    m = BrokerStatsManager(stats, "C", Clock())
    calls: list[int] = []
    m.sample = calls.append  # type: ignore[method-assign]
    now = [100.0]
    svc = StatsSamplingService(m, lambda: now[0])

    async def run() -> None:
        await svc.on_start()
        assert calls == [MINUTE, HOUR, DAY] and svc.interval() == 10.0
        now[0] += 10.5  # late: the next one stays at +20 s
        await svc.run_once()
        assert calls[3:] == [MINUTE] and svc.interval() == 9.5
        now[0] = 100.0 + 600
        await svc.run_once()
        assert calls[4:] == [MINUTE, HOUR]

    asyncio.run(run())


def test_consume_stats_list_reads_what_the_broker_writes():
    cs = ConsumeStats([(MessageQueue("T", "b", q), OffsetWrapper(10, 4 + q, 7)) for q in range(2)], 1.5)
    written = ConsumeStatsList("1.2.3.4:10911", [("G1", [cs, cs]), ("G2", [])], 11)
    back = ConsumeStatsList.from_json(written.to_json())
    assert (back.broker_addr, back.total_diff) == ("1.2.3.4:10911", 11)
    assert [(g, len(s)) for g, s in back.groups] == [("G1", 2), ("G2", 0)]
    assert back.groups[0][1][1].offset_table == cs.offset_table and back.groups[0][1][0].consume_tps == 1.5
    with pytest.raises(ProtocolError, match="malformed ConsumeStatsList"):
        ConsumeStatsList.from_json(b'{"consumeStatsList":[{"G":[}')


def test_deleting_a_topic_or_a_group_drops_its_items_and_counters():
    stats = BrokerStats()
    m = BrokerStatsManager(stats, "C", Clock())
    for topic in ("T", "U"):
        _put(stats, topic, 1, 10)
        for group in ("G", "H"):
            _get(stats, group, topic, 0, 1, 10, 1)
            stats.on_send_back(group, topic)
    m.sample(MINUTE)
    m.on_topic_deleted("T")
    assert m.get_stats_item(TOPIC_PUT_NUMS, "T") is None and m.get_stats_item(TOPIC_PUT_NUMS, "U") is not None
    for name, key in ((GROUP_GET_NUMS, "T@G"), (SNDBCK_PUT_NUMS, "T@H"), (GROUP_GET_LATENCY, "0@T@G")):
        assert m.get_stats_item(name, key) is None, (name, key)
    assert m.get_stats_item(GROUP_GET_NUMS, "U@G") is not None
    m.on_group_deleted("G")
    for name, key in ((GROUP_GET_NUMS, "U@G"), (GROUP_GET_SIZE, "U@G"), (SNDBCK_PUT_NUMS, "U@G")):
        assert m.get_stats_item(name, key) is None, (name, key)
    assert m.get_stats_item(GROUP_GET_LATENCY, "0@U@G") is None
    assert m.get_stats_item(GROUP_GET_NUMS, "U@H") is not None and m.get_stats_item(GROUP_GET_LATENCY, "0@U@H")
    assert set(stats.get_by_group_topic) == {("H", "U")} and set(stats.send_backs) == {("U", "H")}
