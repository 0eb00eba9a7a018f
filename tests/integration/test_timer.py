"""Timer messages (RocketMQ 5's TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS), real
processes: not visible before the asked time, visible soon after, intact, refused beyond
timerMaxDelaySec, the delay level winning over TIMER_* keys, and delivery after a SIGKILL."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import msgpack
import pytest

from rmq.broker.timer import TIMER_CHECK_FILE, TIMER_GROUP, TIMER_TOPIC, decode_timer_check
from rmq.protocol.bodies import loads_fastjson
from rmq.protocol.codes import PullSysFlag, RequestCode, ResponseCode
from rmq.protocol.headers import EndTransactionRequestHeader
from rmq.protocol.message import MessageExt, SysFlag, decode_message_id, decode_records
from tests.harness import start_broker, start_namesrv
from tests.integration.broker_util import BrokerApi, props, restart_broker, uniq_key, unique, wait_until
from tests.integration.rigs import ns_and_broker
from tests.metrics_util import eventually, free_ports, scrape

cluster = ns_and_broker("timer", {"messageDelayLevel": "1s 2s 3s", "flushConsumerOffsetInterval": 500})

# generous: "visible at most 1 s after" on a shared 2-core box; the lateness is printed
DEADLINE = 4.0


@contextlib.asynccontextmanager
async def _fresh_topic(cluster, prefix: str) -> AsyncIterator[tuple[BrokerApi, str]]:
    """A connection to the module's broker and a new one-queue topic."""
    _, br = cluster
    topic = unique(prefix)
    async with BrokerApi(br.addr) as api:
        await api.create_topic(topic, queues=1)
        yield api, topic


async def _visible(api: BrokerApi, topic: str, offset: int = 0) -> list[MessageExt]:
    out: list[MessageExt] = []
    while True:
        r = await api.pull(topic, 0, offset)
        if r.code != ResponseCode.SUCCESS:
            return out
        out += decode_records(r.body)
        offset = int(r.ext_fields["nextBeginOffset"])


async def _wait_for(api: BrokerApi, topic: str, uk: str, within: float) -> tuple[MessageExt, float]:
    found: list[MessageExt] = []

    async def arrived() -> bool:
        found[:] = [m for m in await _visible(api, topic) if m.properties.get("UNIQ_KEY") == uk]
        return bool(found)

    await wait_until(arrived, within, f"timer message {uk} on {topic}")
    return found[0], time.time()


@pytest.mark.timeout(120)
async def test_deliver_ms_not_before_its_time_and_intact(cluster, capsys):
    async with _fresh_topic(cluster, "Timer") as (api, topic):
        deliver_at = int(time.time() * 1000) + 2500
        uk = uniq_key()
        r = await api.send(
            topic,
            b"timer-body",
            properties=props(
                tags="TagA", keys="k1 k2", uniq=uk, wait="true", TIMER_DELIVER_MS=str(deliver_at), myProp="v\u00e9"
            ),
        )
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        # a long-polling consumer of the real topic is woken by the delivered copy
        parked = asyncio.ensure_future(
            api.pull(
                topic,
                0,
                0,
                sys_flag=PullSysFlag.SUBSCRIPTION | PullSysFlag.SUSPEND,
                suspend_ms=15000,
                timeout=20,
                group="CG_PARKED",
            )
        )
        # not visible before its time (checked until half a second before)
        while time.time() * 1000 < deliver_at - 500:
            assert await _visible(api, topic) == []
            assert not parked.done()
            await asyncio.sleep(0.1)
        m, seen = await _wait_for(api, topic, uk, DEADLINE)
        late_ms = seen * 1000 - deliver_at
        with capsys.disabled():
            print(f"\ntimer TIMER_DELIVER_MS: visible {late_ms:.0f} ms after the asked time")
        assert seen * 1000 >= deliver_at - 50  # never early (50 ms clock slack)
        p = m.properties
        assert m.topic == topic and m.queue_id == 0 and m.body == b"timer-body"
        assert p["TAGS"] == "TagA" and p["KEYS"] == "k1 k2" and p["myProp"] == "v\u00e9"
        assert p["TIMER_DELIVER_MS"] == str(deliver_at)
        assert int(p["TIMER_DEQUEUE_MS"]) >= deliver_at
        assert "REAL_TOPIC" not in p and "REAL_QID" not in p
        resp = await parked
        assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
        assert [x.properties["UNIQ_KEY"] for x in decode_records(resp.body)] == [uk]


@pytest.mark.timeout(120)
async def test_delay_sec_and_delay_ms_and_past_time(cluster):
    async with _fresh_topic(cluster, "TimerRel") as (api, topic):
        t0 = time.time()
        sec, ms, past = uniq_key(), uniq_key(), uniq_key()
        await api.send_ok(topic, b"sec", properties=props(uniq=sec, wait="true", TIMER_DELAY_SEC="2"))
        await api.send_ok(topic, b"ms", properties=props(uniq=ms, wait="true", TIMER_DELAY_MS="1500"))
        old = str(int(t0 * 1000) - 60_000)
        r = await api.send_ok(topic, b"past", properties=props(uniq=past, wait="true", TIMER_DELIVER_MS=old))
        # a past time is stored in the real topic itself
        assert r.ext_fields["queueId"] == "0" and r.ext_fields["queueOffset"] == "0"
        # PUT_OK comes before dispatch (as in RocketMQ): wait for its ConsumeQueue unit
        await _wait_for(api, topic, past, DEADLINE)
        first = await _visible(api, topic)
        assert [x.properties["UNIQ_KEY"] for x in first] == [past]
        assert "TIMER_OUT_MS" not in first[0].properties
        _, seen_ms = await _wait_for(api, topic, ms, 1.5 + DEADLINE)
        assert seen_ms - t0 >= 1.5 - 0.05
        _, seen_sec = await _wait_for(api, topic, sec, 2 + DEADLINE)
        assert seen_sec - t0 >= 2 - 0.05
        order = [x.properties["UNIQ_KEY"] for x in await _visible(api, topic)]
        assert order == [past, ms, sec]


async def test_beyond_max_delay_is_refused_naming_the_field(cluster):
    async with _fresh_topic(cluster, "TimerMax") as (api, topic):
        too_far = str(3 * 24 * 3600 + 60)
        r = await api.send(topic, b"x", properties=props(uniq=uniq_key(), wait="true", TIMER_DELAY_SEC=too_far))
        assert r.code == ResponseCode.MESSAGE_ILLEGAL, (r.code, r.remark)
        assert "TIMER_DELAY_SEC" in r.remark and "259200000ms" in r.remark, r.remark
        far = str(int(time.time() * 1000) + 4 * 24 * 3600 * 1000)
        r = await api.send(topic, b"x", properties=props(uniq=uniq_key(), wait="true", TIMER_DELIVER_MS=far))
        assert r.code == ResponseCode.MESSAGE_ILLEGAL and "TIMER_DELIVER_MS" in r.remark, (r.code, r.remark)
        r = await api.send(topic, b"x", properties=props(uniq=uniq_key(), wait="true", TIMER_DELAY_MS="soon"))
        assert r.code == ResponseCode.MESSAGE_ILLEGAL and "TIMER_DELAY_MS" in r.remark, (r.code, r.remark)
        assert await _visible(api, topic) == []


@pytest.mark.timeout(120)
async def test_delay_level_wins_over_timer_keys(cluster):
    async with _fresh_topic(cluster, "TimerLevel") as (api, topic):
        uk = uniq_key()
        t0 = time.time()
        await api.send_ok(
            topic, b"lvl", properties=props(uniq=uk, wait="true", DELAY="1", TIMER_DELAY_SEC="600", TIMER_DELAY_MS="1")
        )
        m, seen = await _wait_for(api, topic, uk, 1 + DEADLINE)
        assert seen - t0 >= 1 - 0.05  # level 1 (1 s), not 600 s, not 1 ms
        assert not any(k.startswith("TIMER_") for k in m.properties), m.properties
        assert m.properties["REAL_TOPIC"] == topic  # the 4.9.8 schedule service's copy


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_pending_timers_survive_sigkill(tmp_path, capsys):
    topic = unique("TimerKill")
    (port,) = free_ports(1)
    conf = {"flushConsumerOffsetInterval": 300, "metricsPromExporterPort": port, "metricsPromExporterHost": "127.0.0.1"}
    with start_namesrv(tmp_path) as ns:
        with start_broker(tmp_path, ns.addr, conf=conf) as br:
            async with BrokerApi(br.addr) as api:
                await api.create_topic(topic, queues=1)
                early = uniq_key()
                await api.send_ok(topic, b"early", properties=props(uniq=early, wait="true", TIMER_DELAY_SEC="1"))
                await _wait_for(api, topic, early, 1 + DEADLINE)
                await asyncio.sleep(2.0)  # its checkpoint in config/timercheck (1 s)
                pending = [uniq_key() for _ in range(5)]
                deliver_at = int(time.time() * 1000) + 4000
                for uk in pending:
                    await api.send_ok(
                        topic, uk.encode(), properties=props(uniq=uk, wait="true", TIMER_DELIVER_MS=str(deliver_at))
                    )
                await eventually(
                    lambda: scrape(port).value("rocketmq_timing_messages") == 5, 5, what="5 timers pending"
                )
                assert scrape(port).value("rocketmq_timer_dequeue_total") == 1
            br.kill()
            br2 = restart_broker(tmp_path, ns.addr, br, conf)
            try:
                async with BrokerApi(br2.addr) as api:
                    for uk in pending:
                        await _wait_for(api, topic, uk, max(0.0, deliver_at / 1000 - time.time()) + 10)
                    got = [x.properties["UNIQ_KEY"] for x in await _visible(api, topic)]
                    assert time.time() * 1000 >= deliver_at - 50
                    # the one delivered (and checkpointed) before the kill is not delivered again
                    assert got.count(early) == 1, got
                    assert sorted(got) == sorted([early, *pending])
                    m = scrape(port)
                    assert m.value("rocketmq_timer_dequeue_total") == 5
                    assert m.value("rocketmq_timing_messages") == 0
                    # the progress is in config/timercheck, not in consumer offsets
                    r = await api.call(RequestCode.GET_ALL_CONSUMER_OFFSET)
                    table = loads_fastjson(r.body or b"{}")["offsetTable"]
                    assert not [k for k in table if k.endswith("@" + TIMER_GROUP)], table
                    check = br2.store_dir / "config" / TIMER_CHECK_FILE
                    await wait_until(
                        lambda: decode_timer_check(check.read_bytes())[0].low == 6, 5, "all 6 timers checkpointed"
                    )
            finally:
                br2.stop()


@pytest.mark.timeout(120)
async def test_progress_in_the_old_consumer_offsets_moves_to_timercheck(tmp_path):
    """A store whose timer progress is still in CID_RMQ_SYS_TIMER's offsets (rmq before
    config/timercheck): the broker takes it once, writes the file, drops those offsets
    (other groups' kept) and delivers timers as before."""
    config = tmp_path / "broker-a" / "store" / "config"
    config.mkdir(parents=True)
    old = {f"{TIMER_TOPIC}@{TIMER_GROUP}": {0: 0, 1: 0, 2: 12345}, "T@g": {0: 7}}
    (config / "consumerOffset.msgpack").write_bytes(msgpack.packb({"offsetTable": old}, use_bin_type=True))
    with start_broker(tmp_path, None) as br:
        assert "TimerCheckpoint(low=0, scanned=0, delivered_through=12345) moved" in br.log_text()
        assert (config / TIMER_CHECK_FILE).stat().st_size == 4096
        async with BrokerApi(br.addr) as api:
            r = await api.call(RequestCode.GET_ALL_CONSUMER_OFFSET)
            listed = loads_fastjson(r.body or b"{}")["offsetTable"]
            assert listed["T@g"] == {"0": 7} and not [k for k in listed if k.endswith("@" + TIMER_GROUP)], listed
            topic = unique("TimerMoved")
            await api.create_topic(topic, queues=1)
            uk = uniq_key()
            await api.send_ok(topic, b"moved", properties=props(uniq=uk, wait="true", TIMER_DELAY_SEC="1"))
            await _wait_for(api, topic, uk, 1 + DEADLINE)
    table = msgpack.unpackb((config / "consumerOffset.msgpack").read_bytes(), strict_map_key=False)
    assert table["offsetTable"]["T@g"] == {0: 7} and f"{TIMER_TOPIC}@{TIMER_GROUP}" not in table["offsetTable"]


@pytest.mark.timeout(120)
async def test_records_sent_to_the_timer_topic_itself_do_not_stall_it(cluster):
    async with _fresh_topic(cluster, "TimerDirect") as (api, topic):
        # not through the hook: no TIMER_OUT_MS, and one with a past TIMER_OUT_MS but no REAL_TOPIC
        await api.send_ok(TIMER_TOPIC, b"plain", properties=props(uniq=uniq_key(), wait="true"))
        past = str(int(time.time() * 1000) - 5000)
        await api.send_ok(TIMER_TOPIC, b"no-real", properties=props(uniq=uniq_key(), wait="true", TIMER_OUT_MS=past))
        uk = uniq_key()
        await api.send_ok(topic, b"after", properties=props(uniq=uk, wait="true", TIMER_DELAY_MS="500"))
        await _wait_for(api, topic, uk, 0.5 + DEADLINE)
        # nothing is put back into the timer topic in a loop
        top = await api.max_offset(TIMER_TOPIC, 0)
        await asyncio.sleep(1.5)
        assert await api.max_offset(TIMER_TOPIC, 0) == top


async def test_committed_transaction_with_a_delivery_time_waits_for_it(cluster):
    """RocketMQ 5's put hook sees the commit: a transactional message with TIMER_DELAY_SEC
    is held after its commit until its time, then delivered once, as a COMMIT record."""
    group = unique("TimerTxPG")
    async with _fresh_topic(cluster, "TimerTx") as (api, topic):
        uk = uniq_key()
        r = await api.send(
            topic,
            b"tx-later",
            group=group,
            sys_flag=SysFlag.TRANSACTION_PREPARED_TYPE,
            properties=props(uniq=uk, wait="true", TRAN_MSG="true", PGROUP=group, TIMER_DELAY_SEC="2"),
        )
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        _, _, phy = decode_message_id(r.ext_fields["msgId"])
        t0 = time.time()
        h = EndTransactionRequestHeader(
            group, int(r.ext_fields["queueOffset"]), phy, SysFlag.TRANSACTION_COMMIT_TYPE, uk, None, False, uk
        )
        done = await api.call(RequestCode.END_TRANSACTION, h.to_ext_fields())
        assert done.code == ResponseCode.SUCCESS, done.remark
        assert await _visible(api, topic) == [], "held by the timer, not visible at the commit"
        m, seen = await _wait_for(api, topic, uk, 2 + DEADLINE)
        assert seen - t0 >= 2 - 0.05
        assert m.body == b"tx-later" and SysFlag.transaction_value(m.sys_flag) == SysFlag.TRANSACTION_COMMIT_TYPE
        assert [x.properties["UNIQ_KEY"] for x in await _visible(api, topic)] == [uk]
