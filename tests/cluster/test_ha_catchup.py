"""ASYNC_MASTER: ~200 MB written while the slave is down; the slave comes back, catches
up, and ends with a CommitLog byte-identical to the master's and the same ConsumeQueues.

RMQ_HA_CATCHUP_MB shrinks the volume (make test runs the full 200 MB).
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from rmq.protocol.codes import ResponseCode
from tests.cluster.ha_util import (
    assert_commitlogs_identical,
    consume_queue_digests,
    ha_group,
    ha_status,
    master_conf,
    slave_conf,
    wait_in_sync,
)
from tests.integration.broker_util import BrokerApi, props, uniq_key, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TOPIC = "HACatchUp"
QUEUES = 8
# Small enough that 200 MB spans several CommitLog and ConsumeQueue files.
STORE = {"mappedFileSizeCommitLog": 32 << 20, "mappedFileSizeConsumeQueue": 20 * 20_000}


async def _fill(addr: str, nbytes: int) -> int:
    """Batches of 64 x 1 KiB messages (with keys) from 16 senders until the CommitLog
    has grown by nbytes; returns messages sent."""
    body = os.urandom(512).hex().encode()
    sent = 0
    async with BrokerApi(addr) as api:
        start = (await ha_status(addr))["commitLogMaxOffset"]
        target = start + nbytes
        grown = start

        async def sender(k: int) -> None:
            nonlocal sent, grown
            while grown < target:
                items = [(body, props(uniq=uniq_key(), keys=f"k{sent + i}")) for i in range(64)]
                r = await api.send_batch(TOPIC, items, queue_id=k % QUEUES)
                assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
                sent += 64
                grown += 64 * 1150  # about one record; the loop re-reads the truth below
                if sent % (64 * 64) == 0:
                    grown = (await ha_status(addr))["commitLogMaxOffset"]

        await asyncio.gather(*(sender(k) for k in range(16)))
    return sent


async def test_slave_catches_up_200mb_byte_identical(capsys):
    mb = int(os.environ.get("RMQ_HA_CATCHUP_MB", "200"))
    with ha_group(master_conf("ASYNC_MASTER", **STORE), slave_conf(**STORE)) as g:
        async with BrokerApi(g.master.addr) as api:
            r = await api.create_topic(TOPIC, QUEUES)
            assert r.code == ResponseCode.SUCCESS
            for i in range(200):  # the slave has a head start: it resumes, not starts over
                await api.send_ok(TOPIC, b"first-%d" % i, queue_id=i % QUEUES)
        before = await wait_in_sync(g)
        assert before > 0

        g.slave.stop()
        t0 = time.monotonic()
        n = await _fill(g.master.addr, mb * 1_000_000)
        fill_s = time.monotonic() - t0
        m = await ha_status(g.master.addr)
        top = m["commitLogMaxOffset"]
        assert m["haConnectionInfo"] == [] and top - before >= mb * 1_000_000

        t_spawn = time.monotonic()
        g.slave.start()
        await wait_until(
            lambda: _slave_at(g.slave.addr, top), 120, "the slave never reached the master's CommitLog end", 0.02
        )
        caught = time.monotonic() - t_spawn
        s = await ha_status(g.slave.addr)
        cu = s["haClientRuntimeInfo"]["lastCatchUp"]
        assert cu is not None and cu["bytes"] == top - before
        rate = cu["bytes"] / (cu["micros"] / 1e6) / 1e6
        await wait_in_sync(g, timeout=120)
        dispatched = time.monotonic() - t_spawn
        with capsys.disabled():
            print(
                f"\n[ha catch-up] {n} messages, {(top - before) / 1e6:.0f} MB written in "
                f"{fill_s:.1f} s while the slave was down; slave appended them at "
                f"{rate:.0f} MB/s ({cu['micros'] / 1e6:.2f} s from its first byte; "
                f"{caught:.2f} s from process spawn), ConsumeQueues complete after "
                f"{dispatched:.2f} s"
            )

        files = assert_commitlogs_identical(g.master.store_dir, g.slave.store_dir)
        assert files >= mb // 32
        mq, sq = consume_queue_digests(g.master.store_dir), consume_queue_digests(g.slave.store_dir)
        assert any(k.startswith(f"{TOPIC}/") for k in mq)
        assert sq == mq
        # and the slave's recovery takes its own files as they are: restart, same end
        g.slave.stop()
        assert not (g.slave.store_dir / "abort").exists()
        g.slave.start()
        assert (await ha_status(g.slave.addr))["commitLogMaxOffset"] == top


async def _slave_at(addr: str, top: int) -> bool:
    return (await ha_status(addr))["commitLogMaxOffset"] >= top
