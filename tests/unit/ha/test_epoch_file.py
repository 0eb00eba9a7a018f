"""ha.epoch.EpochFile: RocketMQ's epochFileCheckpoint format, atomic writes, rules."""

from __future__ import annotations

import os

import pytest

from ha.epoch import EPOCH_FILE_NAME, EpochFile, EpochFileError
from rmq.protocol.epoch import EpochEntry


async def test_new_store_has_no_history(tmp_path):
    ef = EpochFile.load(str(tmp_path))
    assert ef.last_epoch() == -1 and ef.last_entry() is None and ef.entries() == []
    assert ef.epoch_and_start() == (0, -1)
    assert not (tmp_path / EPOCH_FILE_NAME).exists()


async def test_append_persists_in_rocketmq_format(tmp_path):
    ef = EpochFile.load(str(tmp_path))
    assert await ef.append(1, 0)
    assert await ef.append(2, 4096)
    assert (tmp_path / EPOCH_FILE_NAME).read_text() == "2\n1-0\n2-4096\n"
    again = EpochFile.load(str(tmp_path))
    assert again.entries() == [EpochEntry(1, 0, 4096), EpochEntry(2, 4096, None)]
    assert again.entries(max_offset=5000)[-1] == EpochEntry(2, 4096, 5000)
    assert again.last_epoch() == 2
    assert again.epoch_and_start() == (2, 4096)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


async def test_reads_a_rocketmq_written_file(tmp_path):
    # CheckpointFile.write: size line, then "epoch-startOffset" lines, newline-terminated
    (tmp_path / EPOCH_FILE_NAME).write_text("3\n1-0\n2-1073741824\n5-1073750000\n")
    ef = EpochFile.load(str(tmp_path))
    assert [(e.epoch, e.start_offset) for e in ef.entries()] == [(1, 0), (2, 1073741824), (5, 1073750000)]


async def test_append_rules(tmp_path):
    ef = EpochFile.load(str(tmp_path))
    await ef.append(3, 100)
    assert await ef.append(3, 100) is False  # heard again: nothing written
    with pytest.raises(EpochFileError, match="not newer"):
        await ef.append(2, 200)
    with pytest.raises(EpochFileError, match="not newer"):
        await ef.append(3, 150)
    with pytest.raises(EpochFileError, match="before the last one"):
        await ef.append(4, 99)
    assert await ef.append(4, 100)  # an epoch that wrote nothing
    assert ef.entries() == [EpochEntry(3, 100, 100), EpochEntry(4, 100, None)]
    assert EpochFile.load(str(tmp_path)).entries() == ef.entries()


async def test_truncate_suffix(tmp_path):
    ef = EpochFile.load(str(tmp_path))
    for epoch, start in ((1, 0), (2, 1000), (3, 1000), (4, 2500)):
        await ef.append(epoch, start)
    assert await ef.truncate_suffix(3000) == []
    dropped = await ef.truncate_suffix(1000)
    assert [e.epoch for e in dropped] == [2, 3, 4]
    assert ef.entries() == [EpochEntry(1, 0, None)]
    assert EpochFile.load(str(tmp_path)).entries() == [EpochEntry(1, 0, None)]
    await ef.append(5, 1000)
    assert [e.epoch for e in await ef.truncate_from_epoch(5)] == [5]
    assert ef.last_epoch() == 1
    assert [e.epoch for e in await ef.truncate_suffix(0)] == [1]
    assert (tmp_path / EPOCH_FILE_NAME).read_text() == "0\n"
    assert EpochFile.load(str(tmp_path)).entries() == []


async def test_failed_write_changes_nothing(tmp_path, monkeypatch):
    ef = EpochFile.load(str(tmp_path))
    await ef.append(1, 0)

    def disk_full(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("ha.epoch.atomic_write", disk_full)
    with pytest.raises(OSError):
        await ef.append(2, 10)
    with pytest.raises(OSError):
        await ef.truncate_suffix(0)
    assert ef.entries() == [EpochEntry(1, 0, None)]
    assert EpochFile.load(str(tmp_path)).last_epoch() == 1


@pytest.mark.parametrize(
    "content, why",
    [
        ("", "empty"),
        ("x\n1-0\n", "not an entry count"),
        ("2\n1-0\n", "expects 2 entries, found 1"),
        ("1\n1-0\n2-5\n", "expects 1 entries, found 2"),
        ("1\n1:0\n", "line 2"),
        ("1\n1-abc\n", "line 2"),
        ("2\n2-0\n1-5\n", "not a history"),
        ("2\n1-50\n2-5\n", "not a history"),
        ("1\n-1-0\n", "line 2"),
    ],
)
async def test_corrupt_file_is_a_clear_error(tmp_path, content, why):
    (tmp_path / EPOCH_FILE_NAME).write_text(content)
    with pytest.raises(EpochFileError, match=why) as ei:
        EpochFile.load(str(tmp_path))
    assert EPOCH_FILE_NAME in str(ei.value)


async def test_binary_garbage(tmp_path):
    (tmp_path / EPOCH_FILE_NAME).write_bytes(b"\xff\x00\x13")
    with pytest.raises(EpochFileError, match="binary"):
        EpochFile.load(str(tmp_path))
