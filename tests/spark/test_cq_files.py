"""Queue layout and --verify, without Spark: the rebuilt files are the bytes the store's
own ConsumeQueue writes for the same units (gaps, duplicates, a first offset not 0)."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

from rmq.store.consume_queue import ConsumeQueue
from rmq.store.cq_codec import CQ_UNIT
from spark.cq_files import existing_queues, layout_queue, verify_queue, write_queue
from tests.spark.reference import as_array, cq_files

FILE = 20 * 16  # 16 units a file: queues cross several files


def store_queue(root, units, file_size=FILE):
    cq = ConsumeQueue("T", 0, str(root), file_size)
    cq.load()
    for qoff, phy, size, tags in units:
        cq.put_message_position_info(phy, size, tags, qoff)
    cq.shutdown()
    return cq_files(str(root))


def rebuilt_queue(root, units, file_size=FILE):
    layout = layout_queue(as_array(units), file_size)
    write_queue(str(root), "T", 0, layout, file_size)
    return cq_files(str(root)), layout


def random_units(rng: random.Random, n: int, start: int, messy: bool):
    out = []
    q = start
    phy = rng.randrange(0, 10**6)
    for _ in range(n):
        r = rng.random()
        if messy and r < 0.05:
            q += rng.randrange(2, 40)  # a gap
        elif messy and r < 0.1:
            q -= rng.randrange(1, 5)  # an offset seen before
        elif messy and r < 0.12:
            q = 0  # offset 0 again
        size = rng.randrange(90, 5000)
        out.append((max(q, 0), phy, size, rng.randrange(-(2**63), 2**63)))
        q = max(q, 0) + 1
        phy += size + (rng.randrange(0, 3000) if rng.random() < 0.2 else 0)
    return out


@pytest.mark.parametrize("seed", range(12))
def test_layout_matches_the_store_consume_queue(tmp_path, seed):
    rng = random.Random(seed)
    start = rng.choice([0, 0, 1, 15, 16, 17, 100, 12345])
    units = random_units(rng, rng.randrange(1, 120), start, messy=seed % 2 == 1)
    want = store_queue(tmp_path / "store", units)
    got, layout = rebuilt_queue(tmp_path / "rebuilt", units)
    assert got == want
    assert all(len(b) == FILE for b in got.values())
    assert layout.min_offset == start
    assert verify_queue(str(tmp_path / "store"), "T", 0, layout, FILE, 0) is None


def test_verify_reports_the_first_differing_unit(tmp_path):
    units = [(q, 1000 + 100 * q, 100, q * 7) for q in range(40)]
    store_queue(tmp_path, units)
    layout = layout_queue(as_array(units), FILE)
    assert verify_queue(str(tmp_path), "T", 0, layout, FILE, 0) is None
    # one byte of unit 21 (file 1, unit 5)
    p = tmp_path / "T" / "0" / f"{FILE:020d}"
    data = bytearray(p.read_bytes())
    data[5 * 20 + 11] ^= 0x40
    p.write_bytes(bytes(data))
    d = verify_queue(str(tmp_path), "T", 0, layout, FILE, 0)
    assert (d.first_offset, d.count, d.file, d.file_pos) == (21, 1, f"{FILE:020d}", 100)
    assert d.rebuilt == (1000 + 2100, 100, 147)
    assert d.existing == (1000 + 2100, 100 ^ (0x40 << 0), 147)
    assert "T queue 0: 1 unit(s) differ; first at offset 21" in d.describe()


def test_verify_ignores_length_and_zero_padding_but_not_missing_or_extra_units(tmp_path):
    units = [(q, 1000 + 100 * q, 100, 0) for q in range(20)]
    store_queue(tmp_path, units)
    layout = layout_queue(as_array(units), FILE)
    last = tmp_path / "T" / "0" / f"{FILE:020d}"
    os.truncate(last, 4 * 20)  # zeros after unit 19 cut off
    assert verify_queue(str(tmp_path), "T", 0, layout, FILE, 0) is None
    os.truncate(last, 3 * 20)  # unit 19 itself gone
    d = verify_queue(str(tmp_path), "T", 0, layout, FILE, 0)
    assert (d.first_offset, d.existing, d.rebuilt) == (19, (0, 0, 0), (2900, 100, 0))
    os.unlink(last)
    d = verify_queue(str(tmp_path), "T", 0, layout, FILE, 0)
    assert (d.first_offset, d.count, d.existing, d.file) == (16, 4, None, "")
    # units the rebuild does not have (e.g. past a torn CommitLog tail)
    short = layout_queue(as_array(units[:10]), FILE)
    store_queue(tmp_path / "again", units)
    d = verify_queue(str(tmp_path / "again"), "T", 0, short, FILE, 0)
    assert (d.first_offset, d.count, d.rebuilt) == (10, 10, None)
    # a queue the rebuild has nothing for
    d = verify_queue(str(tmp_path / "again"), "T", 0, None, FILE, 0)
    assert (d.first_offset, d.count) == (0, 20)
    assert existing_queues(str(tmp_path / "again")) == [("T", 0)]


def test_verify_tolerates_expired_units_before_the_rebuilt_start(tmp_path):
    """The broker's queue began before the CommitLog's first file (older files deleted):
    its units there point at deleted data; the rebuild has blanks or nothing there."""
    units = [(q, 100 * q, 100, 0) for q in range(40)]
    store_queue(tmp_path, units)
    commitlog_min = 100 * 20  # the CommitLog now starts at unit 20's message
    layout = layout_queue(as_array(units[20:]), FILE)
    assert layout.min_offset == 20 and layout.blanks == 4
    assert verify_queue(str(tmp_path), "T", 0, layout, FILE, commitlog_min) is None
    # but a unit for a message the rebuild read is a difference even there
    later = layout_queue(as_array(units[25:]), FILE)
    d = verify_queue(str(tmp_path), "T", 0, later, FILE, commitlog_min)
    assert (d.first_offset, d.count, d.rebuilt) == (20, 5, (0, 0x7FFFFFFF, 0))


def test_consecutive_fast_path_equals_the_unit_by_unit_rules(tmp_path):
    units = [(q, 50 * q, 50, q) for q in range(5, 70)]
    fast = layout_queue(as_array(units), FILE)
    from spark.cq_files import _layout_slow

    slow = _layout_slow(as_array(units), FILE)
    assert (fast.start, fast.blanks) == (slow.start, slow.blanks)
    assert np.array_equal(fast.units, slow.units)
    assert fast.units[:5].tobytes() == CQ_UNIT.pack(0, 0x7FFFFFFF, 0) * 5
