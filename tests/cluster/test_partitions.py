"""Issue 13, item 6: partition tests, Jepsen-style. Real rmq processes in network
namespaces the tests create and remove (tests/cluster/netns.py); links cut by taking a
host's veth down, so packets vanish as on a real partition (no errors, timeouts).

Every broker group here runs in controller mode: the NameServer in host ``ctl`` runs
the controller (controllerMasterTimeout 3 s, so a master lease of 2.4 s); the first
master in host ``m``, its slave in host ``s``. Each test prints its timeline (the
rig's partition steps and the test's marks, as offsets from the rig's start) and its
timings.

(a) ``test_isolated_master_acks_nothing_after_the_election``: the master and a
    producer share host ``m``; ``m`` is isolated (the producer still reaches the
    master on its own address, nothing else does). The controller elects the slave;
    no SEND_OK from the old master may be answered after that election (the lease has
    run out first). Writes go on at the new master, the partition heals, the old
    master rejoins as a slave, truncates what it wrote past the new epoch's start and
    ends byte-identical. SYNC_MASTER: every message answered SEND_OK, by either
    master, is on the new master. ASYNC_MASTER acknowledges before replicating, so
    what it acked between the cut and the end of its lease is lost: only the first
    assertion holds, and the test prints how many acked messages were lost.

(d) ``test_slave_partitioned_under_load_catches_up_byte_identical``: a producer in the
    root namespace sends to the master at a steady rate; the slave is isolated for 5 s
    and healed; it catches up while the load goes on, and the two CommitLogs end byte
    for byte identical (and the ConsumeQueues the slave dispatched itself equal the
    master's).
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest

from tests.cluster.failover_util import create_topic, wait_dispatched, wait_master, wait_slave
from tests.cluster.ha_util import (
    acks,
    assert_commitlogs_identical,
    consume_queue_digests,
    ha_status,
    uniq_keys_on,
    wait_topic_on,
)
from tests.cluster.netns import NetRig, netrig_fixture
from tests.cluster.partition_util import (
    SendProcess,
    SendStats,
    answer_counts,
    cluster,
    send_loop,
    wait_in_sync_set,
    wait_same_end,
    watch_election,
)
from tests.integration.broker_util import wait_until

netrig = netrig_fixture()

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

MASTER_TIMEOUT_MS = 3000  # controllerMasterTimeout; the master lease is 4/5 of it
QUEUES = 4
ISOLATE_S = 5.0  # (d): how long the slave is away
HOLD_S = 2.0  # (a): how long the old master stays cut off once its successor takes writes
WARM_OK = 300  # (a): SEND_OKs from the first master before the cut
NEW_OK = 100  # (a): SEND_OKs from the new master before the end


def _ack(status: dict) -> int:
    """The one slave's acked offset in a master's HA status (-1: no slave connected)."""
    values = list(acks(status).values())
    assert len(values) <= 1, values
    return values[0] if values else -1


# "kept": the HA connection outlives the partition (haHousekeepingInterval 20 s) and TCP
# retransmits into the healed link; "dropped": both ends give the connection up during
# the partition (2 s without a read), the master's in-sync set shrinks, and the slave
# reconnects, handshakes and resumes from its own end after the heal.
HA_LINK = {"kept": {}, "dropped": {"haHousekeepingInterval": 2000, "haSendHeartbeatInterval": 500}}


@pytest.mark.parametrize("ha_link", list(HA_LINK))
async def test_slave_partitioned_under_load_catches_up_byte_identical(
    netrig: NetRig, tmp_path: Path, ha_link: str
) -> None:
    rig = netrig
    ctl, hm, hs = rig.host("ctl"), rig.host("m"), rig.host("s")
    topic = "PartSlave"
    with cluster(tmp_path) as cl:
        cl.namesrv(ctl, MASTER_TIMEOUT_MS)
        a = cl.broker(hm, "a", "ASYNC_MASTER", 0, **HA_LINK[ha_link])
        b = cl.broker(hs, "b", "ASYNC_MASTER", 1, **HA_LINK[ha_link])
        await wait_master(a.addr)
        await wait_slave(b.addr)
        await create_topic(a.addr, topic, QUEUES)
        await wait_topic_on(b.addr, topic)
        rig.log(f"cluster up: controller {cl.ns_addr}, master {a.addr}, slave {b.addr}")

        stats = SendStats()
        stop = asyncio.Event()
        load = asyncio.create_task(
            send_loop(a.addr, topic, stats.sends.append, stop, senders=8, pace=0.01, queues=QUEUES, body_size=1024)
        )
        try:
            await asyncio.sleep(1.5)
            m0 = await ha_status(a.addr)
            ack_at_cut = _ack(m0)
            assert ack_at_cut > 0, m0
            rig.isolate(hs)
            t_cut = time.monotonic()
            await asyncio.sleep(ISOLATE_S)
            m1 = await ha_status(a.addr)
            stuck_ack, top_at_heal = _ack(m1), m1["commitLogMaxOffset"]
            rig.heal(hs)
            t_heal = time.monotonic()
            # (-1: the master has no slave connection any more)
            rig.log(f"healed: master at {top_at_heal}, slave acked {stuck_ack} (before the cut {ack_at_cut})")

            async def backlog_replayed() -> bool:
                return _ack(await ha_status(a.addr)) >= top_at_heal

            await wait_until(backlog_replayed, 30, "the slave never replayed the backlog", 0.02)
            backlog_s = time.monotonic() - t_heal
            rig.log(f"the slave acked the master's end at heal {backlog_s:.2f}s after the heal")

            async def level() -> bool:
                s = await ha_status(a.addr)
                return _ack(s) == s["commitLogMaxOffset"]

            await wait_until(level, 30, "the slave never level with the master under load", 0.005)
            level_s = time.monotonic() - t_heal
            rig.log(f"the slave level with the master under load {level_s:.2f}s after the heal")
        finally:
            stop.set()
            await load
        t_stop = time.monotonic()

        await wait_until(level, 30, "the slave never caught up after the load stopped", 0.02)
        ms, ss = await wait_dispatched(a.addr), await wait_dispatched(b.addr)
        top = ms["commitLogMaxOffset"]
        assert ss["commitLogMaxOffset"] == top, (ss["commitLogMaxOffset"], top)
        files = assert_commitlogs_identical(a.store_dir, b.store_dir)
        cq_master, cq_slave = consume_queue_digests(a.store_dir), consume_queue_digests(b.store_dir)
        assert cq_master == cq_slave, "the slave's ConsumeQueues differ from the master's"
        rig.log(f"CommitLogs identical ({files} files, {top} bytes), ConsumeQueues equal ({len(cq_master)} files)")

        during = [s for s in stats.sends if t_cut < s.t1 < t_heal]
        ok_during = sum(1 for s in during if s.ok)
        assert ok_during > 0, f"the master stored nothing while its slave was away: {stats.codes()}"
        assert stuck_ack < top_at_heal, "the slave kept acking across the partition"
        total_ok = len(stats.ok())
        dropped = "nothing read for" in a.log_text() and "nothing from master" in b.log_text()
        assert dropped == (ha_link == "dropped"), f"HA connection dropped: {dropped}"
        print(rig.timeline())
        print(
            f"\n[partition d, HA link {ha_link}] slave isolated {t_heal - t_cut:.1f} s under load "
            f"({ok_during / (t_heal - t_cut):.0f} SEND_OK/s, answers {stats.codes()} over "
            f"{t_stop - stats.sends[0].t0:.1f} s); backlog at heal {top_at_heal - max(stuck_ack, ack_at_cut)} "
            f"bytes; backlog replayed {backlog_s:.2f} s "
            f"after heal, level with the master under load after {level_s:.2f} s; HA connection "
            f"{'dropped by both ends and re-made' if dropped else 'kept (TCP resumed)'}; {total_ok} SEND_OK, "
            f"CommitLogs byte-identical ({files} files, {top} bytes), {len(cq_master)} ConsumeQueue files equal"
        )


def _rel(t: float, t0: float) -> str:
    return f"{t - t0:+.2f}s"


@pytest.mark.parametrize("role", ["SYNC_MASTER", "ASYNC_MASTER"])
async def test_isolated_master_acks_nothing_after_the_election(netrig: NetRig, tmp_path: Path, role: str) -> None:
    rig = netrig
    ctl, hm, hs = rig.host("ctl"), rig.host("m"), rig.host("s")
    topic = "PartMaster"
    with cluster(tmp_path) as cl:
        cl.namesrv(ctl, MASTER_TIMEOUT_MS)
        a = cl.broker(hm, "a", role, 0)
        b = cl.broker(hs, "b", role, 1)
        await wait_master(a.addr)
        await wait_slave(b.addr)
        await create_topic(a.addr, topic, QUEUES)
        await wait_topic_on(b.addr, topic)
        await wait_in_sync_set(cl.ns_addr, b.addr)
        rig.log(f"cluster up ({role}): controller {cl.ns_addr}, master {a.addr}, slave {b.addr} in sync")

        producer = SendProcess(hm, a.addr, topic, tmp_path / "m-sends.txt")
        new_sends = SendStats()
        stop = asyncio.Event()
        new_load: asyncio.Task[None] | None = None
        try:

            def warm() -> bool:
                assert producer.proc.poll() is None, producer.errors()
                return sum(1 for s in producer.sends() if s.ok) >= WARM_OK

            await wait_until(warm, 30, f"the producer in m never got {WARM_OK} SEND_OK", 0.05)
            rig.isolate(hm)
            t_cut = time.monotonic()
            election = await watch_election(cl.ns_addr, epoch=1)
            rec = election.status.history[-1]
            rig.log(f"controller: epoch {rec.epoch} from {rec.start_offset}, master {rec.master_addr} ({rec.reason})")
            assert election.status.master_addr == b.addr, election.status
            await wait_master(b.addr)
            t_new = time.monotonic()
            rig.log("the new master takes writes")
            new_load = asyncio.create_task(
                send_loop(b.addr, topic, new_sends.sends.append, stop, senders=2, pace=0.01, queues=QUEUES)
            )
            await asyncio.sleep(HOLD_S)
            rig.heal(hm)
            t_heal = time.monotonic()
            await wait_slave(a.addr)
            t_rejoin = time.monotonic()
            rig.log("the old master follows the new one")
            # (a SYNC_MASTER answers SLAVE_NOT_AVAILABLE until its new slave has caught up)
            await wait_until(
                lambda: len(new_sends.ok()) >= NEW_OK, 30, f"the new master never answered {NEW_OK} SEND_OK", 0.05
            )
            rig.log(f"the new master answered {NEW_OK} SEND_OK")
            await asyncio.sleep(0.5)  # the producer in m keeps asking the old master
        finally:
            old_sends = producer.stop()
            stop.set()
            if new_load is not None:
                await new_load

        await wait_same_end(a.addr, b.addr)
        files = assert_commitlogs_identical(b.store_dir, a.store_dir)
        m = re.search(r"agree up to offset (\d+); truncating the (\d+) bytes", a.log_text())
        truncated = f"{m.group(2)} bytes past offset {m.group(1)}" if m else "nothing"
        rig.log(f"old master rejoined: truncated {truncated}; CommitLogs identical ({files} files)")
        print(rig.timeline())

        old_ok = [s for s in old_sends if s.ok]
        new_ok = new_sends.ok()
        assert old_ok and new_ok, (len(old_ok), len(new_ok))
        late = [s for s in old_ok if s.t1 > election.after]
        last_ok = max(s.t1 for s in old_ok)
        have = set(await uniq_keys_on(b.addr, topic, QUEUES))
        lost_old = [s for s in old_ok if s.key not in have]
        lost_new = [s for s in new_ok if s.key not in have]
        phases = {
            "cut..election": (t_cut, election.after),
            "election..heal": (election.after, t_heal),
            "after heal": (t_heal, float("inf")),
        }
        by_phase = {k: answer_counts([s for s in old_sends if lo < s.t1 <= hi]) for k, (lo, hi) in phases.items()}
        summary = (
            f"\n[partition a, {role}] cut {_rel(t_cut, t_cut)}; election between "
            f"{_rel(election.after, t_cut)} and {_rel(election.seen, t_cut)} ({rec.reason}); new master "
            f"writable {_rel(t_new, t_cut)}; heal {_rel(t_heal, t_cut)}; old master a slave "
            f"{_rel(t_rejoin, t_cut)}. Old master: {len(old_ok)} SEND_OK, the last answered "
            f"{_rel(last_ok, t_cut)}, {len(late)} after the election; its answers {by_phase}. New master: {len(new_ok)} SEND_OK, answers {new_sends.codes()}. "
            f"SEND_OK of the old master missing on the new one: {len(lost_old)}"
            + (
                f" (answered {_rel(min(s.t1 for s in lost_old), t_cut)} .. {_rel(max(s.t1 for s in lost_old), t_cut)})"
                if lost_old
                else ""
            )
            + f"; old master truncated {truncated}"
        )
        print(summary)
        assert not late, (
            f"{len(late)} SEND_OK from the isolated old master after the controller elected its "
            f"successor (election after {_rel(election.after, t_cut)}; late answers at "
            f"{', '.join(_rel(s.t1, t_cut) for s in late[:5])} ... {_rel(max(s.t1 for s in late), t_cut)})"
        )
        assert not lost_new, f"{len(lost_new)} SEND_OK of the new master are not on it"
        if role == "SYNC_MASTER":
            assert not lost_old, f"{len(lost_old)} SEND_OK of the old SYNC_MASTER are not on the new master"
