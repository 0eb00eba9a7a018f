"""Controller mode on the HA link: epoch histories in the handshake (codec and a live
HAService/HAClient pair) and the master's in-sync set, which bounds what dispatch
shows consumers to what the slave acked."""

from __future__ import annotations

import asyncio
import struct

import pytest

from ha.client import HAClient
from ha.protocol import (
    FLAG_EPOCHS,
    FLAG_FULL_SYNC,
    HAProtocolError,
    MasterAccept,
    MasterStreamReader,
    SlaveHello,
    SlaveStreamReader,
    encode_accept,
    encode_hello,
)
from ha.service import HAService
from rmq.protocol.epoch import EpochEntry
from rmq.store.config import BrokerRole
from tests.unit.waiting import wait_until

from ..store.conftest import msg
from .test_replication_inproc import _open

HIST = (EpochEntry(1, 0, 4096), EpochEntry(3, 4096))


# --------------------------------------------------------------------------- codec
def test_hello_with_epochs_sets_the_flag_and_round_trips():
    h = SlaveHello("C", "b", 2, 3, 4096, 9000, 1 << 20, FLAG_FULL_SYNC, HIST)
    [got] = MasterStreamReader().feed(encode_hello(h))
    assert got.epochs == HIST and got.flags == FLAG_FULL_SYNC | FLAG_EPOCHS and got.full_sync
    [plain] = MasterStreamReader().feed(encode_hello(SlaveHello("C", "b", 2, flags=FLAG_EPOCHS)))
    assert plain.epochs is None and not plain.flags & FLAG_EPOCHS
    [empty] = MasterStreamReader().feed(encode_hello(SlaveHello("C", "b", 2, epochs=())))
    assert empty.epochs == ()


def test_accept_history_is_read_only_by_a_slave_that_asked():
    raw = encode_accept(MasterAccept(3, 9000, HIST))
    asked = SlaveStreamReader(128 * 1024, expect_epochs=True)
    asked.feed(raw)
    assert asked.events() == [MasterAccept(3, 9000, HIST)]
    classic = SlaveStreamReader(128 * 1024)  # ignores what it does not know
    classic.feed(raw)
    assert classic.events() == [MasterAccept(3, 9000)]
    # a master without the extension answers nothing more: no history, no error
    old = SlaveStreamReader(128 * 1024, expect_epochs=True)
    old.feed(encode_accept(MasterAccept(3, 9000)))
    assert old.events() == [MasterAccept(3, 9000, None)]


@pytest.mark.parametrize(
    "mutate",
    [
        lambda p: p[:-7],  # list cut short
        lambda p: p[:-44] + struct.pack(">i", 2) + p[-40:-20] + p[-40:-20],  # epochs repeat
    ],
)
def test_a_broken_history_closes_the_connection(mutate):
    frame = encode_hello(SlaveHello("C", "b", 2, epochs=HIST))
    payload = mutate(frame[12:])
    bad = frame[:8] + struct.pack(">i", len(payload)) + payload
    with pytest.raises(HAProtocolError):
        MasterStreamReader().feed(bad)


# --------------------------------------------------------------------------- live pair
async def test_histories_cross_and_dispatch_waits_for_the_in_sync_slave(tmp_path):
    m = await _open(tmp_path / "m", brokerRole=BrokerRole.ASYNC_MASTER)
    s = await _open(tmp_path / "s", brokerRole=BrokerRole.SLAVE)
    master_hist = [EpochEntry(1, 0), EpochEntry(2, 0)]
    seen: list[MasterAccept] = []
    hellos: list[SlaveHello] = []

    def check(h: SlaveHello) -> None:
        hellos.append(h)
        return None

    svc = HAService(
        m,
        cluster="C",
        broker_name="b",
        host="127.0.0.1",
        epoch_provider=lambda: (2, 0),
        epochs_provider=lambda: master_hist,
        hello_check=check,
        confirm_reads=True,
    )
    client = HAClient(
        s,
        cluster="C",
        broker_name="b",
        broker_id=3,
        epochs_provider=lambda: [EpochEntry(1, 0)],
        accept_hook=seen.append,
    )
    try:
        await svc.start()
        client.update_master_address(f"127.0.0.1:{svc.port}")
        await client.start()
        await wait_until(lambda: svc.synced_acks() == {"3": 0})
        assert seen[0].epochs == tuple(master_hist)
        assert hellos[0].epochs == (EpochEntry(1, 0),)
        for i in range(100):
            await m.put(msg(body=b"%d" % i))
        await wait_until(lambda: m.dispatch_behind_bytes == 0 and s.max_phy_offset == m.max_phy_offset)
        assert svc.synced_acks() == {"3": m.max_phy_offset}

        # the slave stops acking (frozen): the master goes on storing, but consumers
        # see only what the slave has
        client.conn.transport.pause_reading()
        frozen = s.max_phy_offset
        for i in range(100):
            await m.put(msg(body=b"tail %d" % i))
        await asyncio.sleep(0.1)
        assert s.max_phy_offset == frozen < m.max_phy_offset
        assert m.dispatched_offset == frozen
        assert m.get_max_offset_in_queue("TopicA", 0) == 100

        # it leaves the set when its connection ends, but holds dispatch until the
        # controller has heard of it (it may have been promoted)
        gen = svc.shrink_generation
        await client.stop()
        await wait_until(lambda: svc.shrink_generation == gen + 1)
        await asyncio.sleep(0.05)
        assert m.dispatched_offset == frozen and svc.synced_acks() == {}
        svc.release_departed(gen)  # a report from before it left
        await asyncio.sleep(0.05)
        assert m.dispatched_offset == frozen
        svc.release_departed(gen + 1)
        await wait_until(lambda: m.dispatch_behind_bytes == 0)
        assert m.get_max_offset_in_queue("TopicA", 0) == 200
        assert svc.synced_acks() == {}
    finally:
        await client.stop()
        await svc.stop()
        await s.shutdown()
        await m.shutdown()
