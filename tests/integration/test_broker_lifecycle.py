"""Broker life cycle: NameServer registration (start-up, periodic, every NameServer),
clean shutdown on SIGTERM / SIGINT, SIGKILL + recovery, metadata persistence — spec 2.14,
4.6, 2.17 and the issue text ("Registers with every NameServer at start-up ... every 30 s
and on topic changes; unregisters on clean shutdown. SIGTERM and SIGINT shut it down
cleanly within 10 s ... Metadata persisted with atomic replace; survives restart").
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import msgpack
import pytest

from rmq.protocol.codes import PullSysFlag, RequestCode, ResponseCode
from rmq.protocol.frame import RemotingCommand, encode
from rmq.protocol.message import decode_records
from rmq.remoting.errors import RemotingError
from tests.harness import broker_process, start_broker, start_namesrv
from tests.integration.broker_util import (
    BrokerApi,
    RawConn,
    broker_in_route,
    cluster_info,
    props,
    restart_broker,
    route,
    wait_until,
)

pytestmark = pytest.mark.timeout(90)


async def _wait_exit(br, timeout: float) -> tuple[int | None, float]:
    """Wait for the process without blocking the loop (parked pulls must be read)."""
    t0 = time.monotonic()
    while br.proc.poll() is None and time.monotonic() - t0 < timeout:
        await asyncio.sleep(0.02)
    return br.proc.poll(), time.monotonic() - t0


async def _gone_from(client, ns_addr: str, broker_addr: str) -> bool:
    code, rd = await route(client, ns_addr, "TBW102")
    if code == ResponseCode.SUCCESS and any(b.broker_addrs.get(0) == broker_addr for b in rd.broker_datas):
        return False
    ci = await cluster_info(client, ns_addr)
    return all(broker_addr not in bd.broker_addrs.values() for bd in ci.broker_addr_table.values())


@pytest.mark.parametrize("how", ["-n", "namesrvAddr"])
async def test_registered_with_every_namesrv_and_unregistered_on_sigterm(tmp_path, how):
    with start_namesrv(tmp_path, name="ns1") as ns1, start_namesrv(tmp_path, name="ns2") as ns2:
        both = f"{ns1.addr};{ns2.addr}"
        conf = {"namesrvAddr": both} if how == "namesrvAddr" else {}
        with start_broker(tmp_path, both if how == "-n" else None, conf=conf) as br:
            assert "name server is " + both in br.log_text()
            async with BrokerApi(br.addr) as api:
                # registered with both before "boot success": no waiting here
                for ns in (ns1, ns2):
                    rd = await broker_in_route(api.client, ns.addr, "TBW102", br.addr)
                    assert rd is not None, f"not registered with {ns.addr} at start-up"
                    assert [(q.perm, q.read_queue_nums) for q in rd.queue_datas] == [(7, 8)]
                # a topic change reaches both
                assert (await api.create_topic("BothNs", 2)).code == ResponseCode.SUCCESS
                for ns in (ns1, ns2):
                    await wait_until(
                        lambda: broker_in_route(api.client, ns.addr, "BothNs", br.addr),
                        1.0,
                        f"BothNs not registered with {ns.addr} within 1 s",
                    )
                # a pull parked when the signal comes is answered, not dropped
                parked = asyncio.ensure_future(
                    api.pull(
                        "BothNs",
                        0,
                        0,
                        sys_flag=PullSysFlag.SUBSCRIPTION | PullSysFlag.SUSPEND,
                        suspend_ms=30000,
                        timeout=20,
                    )
                )
                await asyncio.sleep(0.2)
                assert not parked.done()
                br.proc.send_signal(signal.SIGTERM)
                rc, took = await _wait_exit(br, 10.0)
                assert rc == 0, f"exit code {rc} after SIGTERM:\n{br.tail()}"
                assert took < 10.0
                p = await asyncio.wait_for(parked, 1.0)
                assert p.code == ResponseCode.PULL_NOT_FOUND
            assert not (br.store_dir / "abort").exists()
            log = br.log_text()
            assert "shut down cleanly" in log
            assert "Traceback" not in log
            async with BrokerApi(ns1.addr) as nsapi:
                for ns in (ns1, ns2):
                    assert await _gone_from(nsapi.client, ns.addr, br.addr), (
                        f"{ns.addr} still lists the broker after a clean shutdown"
                    )
                    code, _ = await route(nsapi.client, ns.addr, "BothNs")
                    assert code == ResponseCode.TOPIC_NOT_EXIST


async def test_a_dead_namesrv_does_not_stop_the_broker(tmp_path):
    """One NameServer of the list is down: the broker starts, registers with the other,
    and still shuts down cleanly and quickly."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    with start_namesrv(tmp_path) as ns, start_broker(tmp_path, f"{dead};{ns.addr}") as br:
        async with BrokerApi(br.addr) as api:
            assert await broker_in_route(api.client, ns.addr, "TBW102", br.addr)
            assert dead in br.log_text()  # the failure is logged
            assert (await api.create_topic("DeadNs", 1)).code == ResponseCode.SUCCESS
            await wait_until(
                lambda: broker_in_route(api.client, ns.addr, "DeadNs", br.addr), 1.0, "DeadNs not registered within 1 s"
            )
            br.proc.send_signal(signal.SIGTERM)
            rc, took = await _wait_exit(br, 10.0)
            assert rc == 0 and took < 5.0, (rc, took)
            assert await _gone_from(api.client, ns.addr, br.addr)


@pytest.mark.slow
async def test_sigterm_under_load_keeps_every_acked_message(tmp_path):
    """SIGTERM while sends are in flight: exit 0, every acknowledged message is there
    after the restart (normal recovery), nothing half-done."""
    with start_namesrv(tmp_path) as ns:
        br = broker_process(tmp_path, ns.addr).start()
        acked: list[tuple[int, int, bytes]] = []
        try:
            async with BrokerApi(br.addr) as api:
                await api.create_topic("Load", 4)
                stop = asyncio.Event()

                async def producer(k: int) -> None:
                    i = 0
                    while not stop.is_set():
                        body = b"p%d-%d" % (k, i)
                        try:
                            r = await api.send("Load", body, queue_id=k % 4, timeout=5)
                        except (RemotingError, OSError):
                            return
                        if r.code == ResponseCode.SUCCESS:
                            acked.append((k % 4, int(r.ext_fields["queueOffset"]), body))
                        else:
                            assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE, (r.code, r.remark)
                        i += 1

                tasks = [asyncio.ensure_future(producer(k)) for k in range(8)]
                await asyncio.sleep(0.5)
                br.proc.send_signal(signal.SIGTERM)
                rc, took = await _wait_exit(br, 10.0)
                stop.set()
                await asyncio.gather(*tasks)
                assert rc == 0 and took < 10.0, (rc, took, br.tail())
        finally:
            br.kill()
        assert len(acked) > 50
        assert not (br.store_dir / "abort").exists()
        br2 = restart_broker(tmp_path, ns.addr, br)
        try:
            assert "last exit clean" in br2.log_text()
            async with BrokerApi(br2.addr) as api:
                for q in range(4):
                    body, nxt = await api.pull_all("Load", q)
                    stored = {m.queue_offset: m.body for m in decode_records(body)}
                    assert sorted(stored) == list(range(nxt))
                    for qq, off, b in acked:
                        if qq == q:
                            assert stored.get(off) == b, f"acked message {b!r} lost"
        finally:
            br2.stop()


async def test_a_client_that_stops_reading_does_not_hold_up_shutdown(tmp_path):
    with start_namesrv(tmp_path) as ns, start_broker(tmp_path, ns.addr) as br:
        async with BrokerApi(br.addr) as api:
            for _i in range(12):
                await api.send_ok("Unread", b"u" * 100_000, queue_id=0)
            await api.wait_max_offset("Unread", 0, 12)
            # ~1 MiB per response, 64 requests, never read
            hog = await RawConn.open(br.addr)
            ext = api.pull_header("Unread", 0, 0, max_nums=32).to_ext_fields()
            for opaque in range(1, 65):
                hog.writer.write(encode(RemotingCommand(RequestCode.PULL_MESSAGE, opaque=opaque, ext_fields=ext)))
            await hog.writer.drain()
            await asyncio.sleep(0.5)
            # the broker still serves others
            assert (await api.runtime_info())["brokerRole"] == "ASYNC_MASTER"
            br.proc.send_signal(signal.SIGTERM)
            rc, took = await _wait_exit(br, 10.0)
            assert rc == 0 and took < 10.0, (rc, took, br.tail())
            hog.writer.transport.abort()
        assert not (br.store_dir / "abort").exists()


async def test_sigint_shuts_down_cleanly(tmp_path):
    with start_namesrv(tmp_path) as ns, start_broker(tmp_path, ns.addr) as br:
        async with BrokerApi(br.addr) as api:
            for i in range(20):
                await api.send_ok("SigInt", b"%d" % i, queue_id=i % 4)
            br.proc.send_signal(signal.SIGINT)
            rc, took = await _wait_exit(br, 10.0)
            assert rc == 0 and took < 10.0, br.tail()
            assert not (br.store_dir / "abort").exists()
            assert await _gone_from(api.client, ns.addr, br.addr)
        # the next start is a normal recovery with every message
        br2 = restart_broker(tmp_path, ns.addr, br)
        try:
            assert "last exit clean" in br2.log_text()
            async with BrokerApi(br2.addr) as api:
                for q in range(4):
                    assert await api.max_offset("SigInt", q) == 5
        finally:
            br2.stop()


@pytest.mark.slow
async def test_reregisters_periodically(tmp_path):
    """registerNameServerPeriod (minimum 10 s): a NameServer that expired the broker
    (here after 3 s) lists it again at the next period."""
    with (
        start_namesrv(tmp_path, "--broker-expire-ms", "3000", "--scan-interval-ms", "200") as ns,
        start_broker(tmp_path, ns.addr, conf={"registerNameServerPeriod": 10000}) as br,
    ):
        booted = time.monotonic()
        async with BrokerApi(br.addr) as api:
            assert await broker_in_route(api.client, ns.addr, "TBW102", br.addr)
            await wait_until(
                lambda: _gone_from(api.client, ns.addr, br.addr),
                6.0,
                "the NameServer never expired the broker",
                interval=0.1,
            )
            gone_at = time.monotonic() - booted
            assert gone_at < 9.0
            await wait_until(
                lambda: broker_in_route(api.client, ns.addr, "TBW102", br.addr),
                8.0,
                "the broker did not register again",
                interval=0.1,
            )
            back_at = time.monotonic() - booted
            assert 9.0 <= back_at <= 12.0, f"re-registered {back_at:.1f}s after boot (period 10 s)"


@pytest.mark.slow
async def test_sigkill_then_restart_recovers_every_acked_message(tmp_path):
    conf = {"flushDiskType": "ASYNC_FLUSH"}
    with start_namesrv(tmp_path) as ns:
        br = broker_process(tmp_path, ns.addr, conf=conf).start()
        try:
            async with BrokerApi(br.addr) as api:
                acked = {0: [], 1: []}
                for i in range(30):
                    r = await api.send_ok(
                        "Crash", b"c-%03d" % i, queue_id=i % 2, properties=props(keys=f"ck{i}", wait="true")
                    )
                    acked[i % 2].append(int(r.ext_fields["queueOffset"]))
                r = await api.send_batch("Crash", [(b"cb-%d" % i, props(tags="B")) for i in range(10)], queue_id=1)
                assert r.code == ResponseCode.SUCCESS and r.ext_fields["queueOffset"] == "15"
                await api.wait_max_offset("Crash", 0, 15)
                await api.wait_max_offset("Crash", 1, 25)
                before = {q: await api.pull_all("Crash", q) for q in (0, 1)}
                max_before = int((await api.runtime_info())["commitLogMaxOffset"])
        finally:
            br.kill()
        assert br.proc.returncode == -signal.SIGKILL
        assert (br.store_dir / "abort").exists(), "no abort file after SIGKILL"

        br2 = restart_broker(tmp_path, ns.addr, br, conf)
        try:
            assert "ABNORMAL" in br2.log_text()
            async with BrokerApi(br2.addr) as api:
                assert await api.max_offset("Crash", 0) == 15
                assert await api.max_offset("Crash", 1) == 25
                for q in (0, 1):
                    body, nxt = await api.pull_all("Crash", q)
                    assert (body, nxt) == before[q], f"queue {q} differs after recovery"
                msgs = decode_records(before[1][0])
                assert [m.body for m in msgs[15:]] == [b"cb-%d" % i for i in range(10)]
                assert int((await api.runtime_info())["commitLogMaxOffset"]) == max_before
                # queue offsets continue where they were
                r = await api.send_ok("Crash", b"after", queue_id=0)
                assert r.ext_fields["queueOffset"] == "15"
                r = await api.send_ok("Crash", b"after", queue_id=1)
                assert r.ext_fields["queueOffset"] == "25"
                # and the new address is what the NameServer hands out
                assert await broker_in_route(api.client, ns.addr, "Crash", br2.addr)
        finally:
            br2.stop()
        assert not (br2.store_dir / "abort").exists()


def _read_msgpack(path: Path) -> dict:
    data = msgpack.unpackb(path.read_bytes(), raw=False, strict_map_key=False)
    assert isinstance(data, dict)
    return data


def _config_files(store: Path) -> list[str]:
    return sorted(p.name for p in (store / "config").iterdir())


@pytest.mark.slow
async def test_metadata_survives_restarts_as_msgpack(tmp_path):
    conf1 = {"flushConsumerOffsetInterval": 1000}
    with start_namesrv(tmp_path) as ns:
        # life 1: topics, groups, offsets; persisted periodically; then SIGKILL
        br = broker_process(tmp_path, ns.addr, conf=conf1).start()
        cfg = br.store_dir / "config"
        try:
            async with BrokerApi(br.addr) as api:
                assert (await api.create_topic("MetaTopic", 3)).code == ResponseCode.SUCCESS
                await api.send_ok("AutoMeta", b"x", queue_id=0)
                assert (
                    await api.heartbeat("127.0.0.1@meta", [("MetaG", [("AutoMeta", "*")])])
                ).code == ResponseCode.SUCCESS
                await api.update_offset("MetaG", "MetaTopic", 0, 7)
                await api.update_offset("MetaG", "MetaTopic", 2, 9)

                def persisted() -> bool:
                    try:
                        t = _read_msgpack(cfg / "consumerOffset.msgpack")
                    except (FileNotFoundError, ValueError):
                        return False
                    return t.get("offsetTable", {}).get("MetaTopic@MetaG") == {0: 7, 2: 9}

                await wait_until(
                    persisted,
                    3.0,
                    "consumer offsets not persisted within flushConsumerOffsetInterval (1 s)",
                    interval=0.1,
                )
                await wait_until(
                    lambda: (cfg / "topics.msgpack").exists() and (cfg / "subscriptionGroup.msgpack").exists(),
                    3.0,
                    "topics / subscription groups not persisted",
                    interval=0.1,
                )
        finally:
            br.kill()

        # life 2: everything persisted before the crash is back
        br2 = restart_broker(tmp_path, ns.addr, br, conf1)
        try:
            async with BrokerApi(br2.addr) as api:
                topics = await api.topics()
                assert topics["MetaTopic"].read_queue_nums == 3
                assert "AutoMeta" in topics and "%RETRY%MetaG" in topics
                r = await api.query_offset("MetaG", "MetaTopic", 2)
                assert (r.code, r.ext_fields) == (ResponseCode.SUCCESS, {"offset": "9"})
                await api.update_offset("MetaG", "MetaTopic", 0, 8)
                await api.create_topic("MetaTopic2", 1)
        finally:
            rc = br2.stop()
        assert rc == 0

        # the files: msgpack, RocketMQ's names with .msgpack, nothing else left behind, and
        # the timer service's checkpoint in RocketMQ 5's own binary layout and name
        names = _config_files(br2.store_dir)
        assert names == [
            "consumerOffset.msgpack",
            "delayOffset.msgpack",
            "subscriptionGroup.msgpack",
            "timercheck",
            "topics.msgpack",
        ], names
        t = _read_msgpack(cfg / "topics.msgpack")
        assert {"MetaTopic", "MetaTopic2", "AutoMeta", "%RETRY%MetaG", "TBW102"} <= set(t["topicConfigTable"])
        assert t["topicConfigTable"]["MetaTopic"]["readQueueNums"] == 3
        assert "dataVersion" in t
        o = _read_msgpack(cfg / "consumerOffset.msgpack")
        assert o["offsetTable"]["MetaTopic@MetaG"] == {0: 8, 2: 9}
        s = _read_msgpack(cfg / "subscriptionGroup.msgpack")
        assert "MetaG" in s["subscriptionGroupTable"]

        # life 3: no auto-creation any more; what was created before is still there
        conf3 = {"autoCreateTopicEnable": "false", "autoCreateSubscriptionGroup": "false"}
        br3 = restart_broker(tmp_path, ns.addr, br2, conf3)
        try:
            async with BrokerApi(br3.addr) as api:
                topics = await api.topics()
                assert {"MetaTopic", "MetaTopic2", "AutoMeta", "%RETRY%MetaG"} <= set(topics)
                # registered at start-up with the persisted topics
                assert await broker_in_route(api.client, ns.addr, "MetaTopic2", br3.addr)
                r = await api.query_offset("MetaG", "MetaTopic", 0)
                assert r.ext_fields == {"offset": "8"}
                r = await api.pull("AutoMeta", 0, 0, group="MetaG")
                assert r.code == ResponseCode.SUCCESS
                r = await api.pull("AutoMeta", 0, 0, group="NeverSeenG")
                assert r.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST == 26
                assert r.remark.startswith("subscription group [NeverSeenG] does not exist")
        finally:
            br3.stop()


async def test_auto_created_topics_and_groups_survive_an_immediate_sigkill(tmp_path):
    """RocketMQ writes topics.json and subscriptionGroup.json on every change (consumer
    offsets only every flushConsumerOffsetInterval): what a send / heartbeat / pull created
    is still there after a crash right afterwards."""
    with start_namesrv(tmp_path) as ns:
        br = broker_process(tmp_path, ns.addr).start()
        try:
            async with BrokerApi(br.addr) as api:
                await api.send_ok("KillTopic", b"x", queue_id=0)
                assert (
                    await api.heartbeat("127.0.0.1@kill", [("KillG", [("KillTopic", "*")])])
                ).code == ResponseCode.SUCCESS
                assert (await api.pull("KillTopic", 0, 0, group="KillPullG")).code in (
                    ResponseCode.SUCCESS,
                    ResponseCode.PULL_NOT_FOUND,
                )
                await asyncio.sleep(0.3)  # far below flushConsumerOffsetInterval (5 s)
        finally:
            br.kill()
        conf = {"autoCreateTopicEnable": "false", "autoCreateSubscriptionGroup": "false"}
        br2 = restart_broker(tmp_path, ns.addr, br, conf)
        try:
            async with BrokerApi(br2.addr) as api:
                topics = await api.topics()
                assert "KillTopic" in topics and "%RETRY%KillG" in topics
                for g in ("KillG", "KillPullG"):
                    r = await api.pull("KillTopic", 0, 0, group=g)
                    assert r.code == ResponseCode.SUCCESS, f"group {g} lost by the crash: {r.code} {r.remark}"
        finally:
            br2.stop()
