"""The slave's side of replication in the store: appending a master's bytes at the same
offsets (MessageStore.replica_file_ready / create_replica_file / append_replicated).

The result must be byte-identical CommitLog files and the same ConsumeQueue units as
the master's own dispatch, whatever the block sizes, also for a slave that starts
mid-stream; bytes that do not continue the CommitLog are refused and change nothing.
"""

from __future__ import annotations

import os
import random

import pytest

from rmq.store.config import BrokerRole
from rmq.store.errors import StoreError

from .conftest import msg

FILE = 16 * 1024


async def _fill_master(st, n: int = 300) -> None:
    rnd = random.Random(5)
    for i in range(n):
        await st.put(
            msg(
                topic=f"T{i % 3}",
                queue_id=i % 2,
                body=os.urandom(rnd.randrange(10, 900)),
                KEYS=f"k{i}",
                TAGS=f"tag{i % 4}",
            )
        )
    await st.reput.wait_caught_up()


async def _replicate(master, slave, start: int, block: int | None = None) -> None:
    """What HAConnection + ReplicaProtocol do, without sockets: blocks of at most
    `block` bytes (random when None), never across a file boundary."""
    rnd = random.Random(7)
    off = start
    while off < master.max_phy_offset:
        want = block or rnd.randrange(1, 5000)
        data = master.get_commitlog_data(off, want)
        assert data is not None and 0 < len(data) <= want
        assert off // FILE == (off + len(data) - 1) // FILE  # one file per block
        if not slave.replica_file_ready(off):
            await slave.create_replica_file(off)
        # several blocks in one call, as one read of the HA client appends them
        half = len(data) // 2
        assert slave.append_replicated(off, [memoryview(data)[:half], data[half:]]) == off + len(data)
        off += len(data)


def _files(st) -> dict[str, bytes]:
    st.allocator.wait_pending()  # the next file may still be being preallocated
    d = st.config.commitlog_dir
    return {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))}


def _units(st) -> dict[tuple[str, int], list]:
    out = {}
    for topic, qs in st.consume_queue_table.items():
        for qid, cq in qs.items():
            out[(topic, qid)] = [
                cq.read_unit(i) for i in range(cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue())
            ]
    return out


@pytest.mark.parametrize("block", [None, 32 * 1024, 1])
async def test_slave_becomes_byte_identical(open_store, tmp_path, block):
    async with open_store(tmp_path / "m") as m, open_store(tmp_path / "s", brokerRole=BrokerRole.SLAVE) as s:
        await _fill_master(m, 120 if block == 1 else 300)
        assert len(m.commitlog.mfq.mapped_files) >= 3
        await _replicate(m, s, 0, block)
        assert s.max_phy_offset == m.max_phy_offset
        await s.reput.wait_caught_up()
        mf, sf = _files(m), _files(s)
        for name, data in sf.items():
            assert mf[name] == data, name
        assert _units(s) == _units(m)
        assert s.get_max_offset_in_queue("T1", 1) == m.get_max_offset_in_queue("T1", 1) > 0


async def test_slave_starting_mid_stream(open_store, tmp_path):
    """RocketMQ's default: an empty slave starts at the master's last file."""
    async with open_store(tmp_path / "m") as m, open_store(tmp_path / "s", brokerRole=BrokerRole.SLAVE) as s:
        await _fill_master(m)
        top = m.max_phy_offset
        start = top - top % FILE
        await _replicate(m, s, start)
        assert s.min_phy_offset == start and s.max_phy_offset == top
        await s.reput.wait_caught_up()
        assert s.reput.reput_from_offset == top
        assert _files(s)[f"{start:020d}"] == _files(m)[f"{start:020d}"]
        units = _units(s)
        assert units and all(u[0] >= start for us in units.values() for u in us)


async def test_bytes_that_do_not_continue_are_refused(open_store, tmp_path):
    async with open_store(tmp_path / "m") as m, open_store(tmp_path / "s", brokerRole=BrokerRole.SLAVE) as s:
        await _fill_master(m, 40)
        data = m.get_commitlog_data(0, 1000)
        await s.create_replica_file(0)
        s.append_replicated(0, [data])
        before = _files(s)
        for bad in (0, 999, 1001):  # a gap or an overlap
            with pytest.raises(StoreError, match="does not continue"):
                s.append_replicated(bad, [m.get_commitlog_data(bad, 100)])
        with pytest.raises(StoreError, match="does not continue"):  # past the file end
            s.append_replicated(1000, [bytes(FILE)])
        assert _files(s) == before and s.max_phy_offset == 1000


async def test_slave_refuses_puts(open_store, tmp_path):
    async with open_store(tmp_path / "s", brokerRole=BrokerRole.SLAVE) as s:
        r = await s.put(msg())
        assert r.status.value == "SERVICE_NOT_AVAILABLE"
        assert "slave mode" in r.remark
        assert s.max_phy_offset == 0


async def test_slave_ending_mid_record_shuts_down_cleanly(open_store, tmp_path):
    """A slave's CommitLog may end inside a record: dispatch stops before it, shutdown
    does not wait for the rest (and is clean), the next start drops the fragment."""
    async with open_store(tmp_path / "m") as m:
        await _fill_master(m, 40)
        data = m.get_commitlog_data(0, 1000)
        boundaries = sorted(u[0] + u[1] for us in _units(m).values() for u in us)
    root = tmp_path / "s"
    async with open_store(root, brokerRole=BrokerRole.SLAVE) as s:
        await s.create_replica_file(0)
        s.append_replicated(0, [data])
        assert await s.reput.wait_caught_up(timeout=5)
        complete = max(b for b in boundaries if b <= 1000)
        assert s.reput.reput_from_offset == complete < 1000
    assert not os.path.exists(root / "abort")
    async with open_store(root, brokerRole=BrokerRole.SLAVE) as s:
        assert s.max_phy_offset == complete
