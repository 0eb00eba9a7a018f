"""Retention in-process: which CommitLog / ConsumeQueue / index files a cleanup run deletes,
min offsets after it, and the DISK_FULL mark. The disk usage is a probe the test sets
(tests/integration/test_store_retention.py measures a real, size-limited tmpfs)."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from rmq.store.cleanup import disk_partition_used_ratio, is_time_to_delete
from rmq.store.config import ConfigError, MessageStoreConfig, parse_delete_when
from rmq.store.results import GetMessageStatus, PutMessageStatus, RunningFlags

from .conftest import msg

FILE = 16 * 1024
BODY = b"x" * 900  # ~1 KiB records: ~16 a CommitLog file


class Disk:
    """The usage a run measures (0..1)."""

    def __init__(self) -> None:
        self.ratio = 0.30

    def __call__(self, path: str) -> float:
        return self.ratio


def other_hour() -> str:
    return "%02d" % ((time.localtime().tm_hour + 12) % 24)


def this_hour() -> str:
    h = time.localtime().tm_hour
    return f"{h:02d};{(h + 1) % 24:02d}"  # a run crossing the hour still matches


@pytest.fixture
def store(open_store):
    """open_store with cleanup runs driven by the test and a settable disk."""

    async def _open(**cfg):
        cfg.setdefault("cleanResourceInterval", 3_600_000)
        cfg.setdefault("deleteCommitLogFilesInterval", 0)
        cm = open_store(**cfg)
        st = await cm.__aenter__()
        disk = Disk()
        st.cleaner.commitlog_service.disk_ratio = disk
        return cm, st, disk

    return _open


async def fill(st, n: int, topic: str = "Ret", queues: int = 2) -> list:
    out = []
    for i in range(n):
        r = await st.put(msg(topic, BODY, queue_id=i % queues, KEYS=f"k{i}", UNIQ_KEY=f"U{i:08d}"))
        assert r.status is PutMessageStatus.PUT_OK
        out.append(r)
    await st.reput.wait_caught_up()
    return out


def names(d: Path) -> list[str]:
    return sorted(os.listdir(d)) if d.is_dir() else []


def commitlog(st) -> list[str]:
    """CommitLog files on disk, less the next one preallocated beyond the current file."""
    last = st.commitlog.mfq.mapped_files[-1].file_name
    return [n for n in names(Path(st.config.commitlog_dir)) if n <= last]


def age(files: list[Path], seconds: float) -> None:
    t = time.time() - seconds
    for f in files:
        os.utime(f, (t, t))


def test_delete_when_and_config_validation():
    assert parse_delete_when("04") == [4]
    assert parse_delete_when("04;16") == [4, 16]
    assert parse_delete_when(" 4 ; 23 ;") == [4, 23]
    for bad, word in (("25", "not an hour"), ("4am", "'4am'")):
        with pytest.raises(ConfigError, match="deleteWhen") as e:
            parse_delete_when(bad)
        assert word in str(e.value)
    assert is_time_to_delete("04;16", 16) and not is_time_to_delete("04;16", 5)
    with pytest.raises(ConfigError, match="deleteWhen"):
        MessageStoreConfig(storePathRootDir="/x", deleteWhen="noon").validate()
    with pytest.raises(ConfigError, match="diskSpaceWarningLevelRatio"):
        MessageStoreConfig(storePathRootDir="/x", diskSpaceWarningLevelRatio=0).validate()
    with pytest.raises(ConfigError, match="fileReservedTime"):
        MessageStoreConfig(storePathRootDir="/x", fileReservedTime=-1).validate()
    r = disk_partition_used_ratio(os.path.join(os.getcwd(), "no", "such", "dir"))
    assert 0.0 <= r <= 1.0  # measured on the nearest existing parent


async def test_expired_files_go_at_delete_when_only(store, tmp_path, caplog):
    root = tmp_path / "store"
    cm, st, disk = await store(
        mappedFileSizeCommitLog=FILE,
        fileReservedTime=0.0003,
        deleteWhen=other_hour(),
        mappedFileSizeConsumeQueue=20 * 8,
        maxHashSlotNum=16,
        maxIndexNum=40,
    )
    try:
        sent = await fill(st, 100)
        cl = commitlog(st)
        assert len(cl) >= 6
        index_before = names(root / "index")
        assert len(index_before) >= 3
        time.sleep(1.2)  # 0.0003 h = 1.08 s: every file expired
        assert await st.cleaner.clean_once() == 0  # not the hour, disk not full
        assert commitlog(st) == cl

        st.config.deleteWhen = this_hour()
        caplog.set_level(logging.INFO, "rmq.store.cleanup")
        n = await st.cleaner.clean_once()
        left = commitlog(st)
        assert left == cl[-1:], "every file but the current one"
        assert n >= len(cl) - 1
        # each deleted file logged with its offset range
        for name in cl[:-1]:
            start = int(name)
            assert f"deleted CommitLog file {name}: offsets [{start}, {start + FILE})" in caplog.text
        cl_min = int(cl[-1])
        assert st.min_phy_offset == cl_min

        # consume queues: min offset = first unit still in the CommitLog, files below gone
        for q in (0, 1):
            mine = [r for r in sent if r.queue_offset >= 0 and (sent.index(r) % 2) == q]
            first_kept = min(r.queue_offset for r in mine if r.wrote_offset >= cl_min)
            assert st.get_min_offset_in_queue("Ret", q) == first_kept
            qdir = root / "consumequeue" / "Ret" / str(q)
            files = names(qdir)
            assert int(files[0]) // 20 <= first_kept < int(files[0]) // 20 + 8 + 8
            assert int(files[0]) > 0, "the queue's first file pointed below the minimum"
            # a consumer below the minimum is told where to continue
            got = st.get_messages("G", "Ret", q, 0, 32)
            assert got.status is GetMessageStatus.OFFSET_TOO_SMALL
            assert got.next_begin_offset == first_kept
            got = st.get_messages("G", "Ret", q, first_kept, 32)
            assert got.status is GetMessageStatus.FOUND
        # index files whose entries all point below the minimum are gone (never the last)
        index_after = names(root / "index")
        assert 1 <= len(index_after) < len(index_before)
        for f in st.index_service.index_files[:-1]:
            assert f.end_phy_offset >= cl_min
        # a second run has nothing to do
        assert await st.cleaner.clean_once() == 0
    finally:
        await cm.__aexit__(None, None, None)


async def test_space_watermarks(store, tmp_path):
    root = tmp_path / "store"
    cm, st, disk = await store(
        mappedFileSizeCommitLog=FILE, fileReservedTime=72, deleteWhen=other_hour(), deleteFileBatchMax=2
    )
    try:
        await fill(st, 120)
        cl = commitlog(st)
        assert len(cl) >= 7
        # above diskMaxUsedSpaceRatio: only expired files go, at once (not the hour)
        disk.ratio = 0.80
        assert await st.cleaner.clean_once() == 0
        assert commitlog(st) == cl
        age([root / "commitlog" / cl[0]], 73 * 3600)
        assert await st.cleaner.clean_once() >= 1
        assert commitlog(st) == cl[1:], "the expired head, no further"
        # above diskSpaceCleanForciblyRatio: unexpired files too, oldest first, 2 a run
        disk.ratio = 0.87
        assert await st.cleaner.clean_once() >= 2
        assert commitlog(st) == cl[3:]
        assert st.running_flags.is_writeable()
        # cleanFileForciblyEnable=false: nothing unexpired goes
        st.config.cleanFileForciblyEnable = False
        await st.cleaner.clean_once()
        assert commitlog(st) == cl[3:]
        st.config.cleanFileForciblyEnable = True
        # never the current file, however full the disk
        disk.ratio = 0.99
        for _ in range(5):
            await st.cleaner.clean_once()
        assert commitlog(st) == cl[-1:]
        assert st.min_phy_offset == int(cl[-1])
    finally:
        await cm.__aexit__(None, None, None)


async def test_disk_full_refuses_writes_until_space_returns(store):
    cm, st, disk = await store(deleteWhen=other_hour())
    try:
        await fill(st, 3)
        disk.ratio = 0.93
        await st.cleaner.clean_once()
        assert st.running_flags.is_set(RunningFlags.DISK_FULL)
        r = await st.put(msg("Ret", b"refused"))
        assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert "the disk is full" in r.remark and "93.0%" in r.remark
        assert "diskSpaceWarningLevelRatio 90%" in r.remark
        # between the two watermarks the mark stays (RocketMQ's hysteresis)
        disk.ratio = 0.87
        await st.cleaner.clean_once()
        assert (await st.put(msg("Ret", b"still"))).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        disk.ratio = 0.50
        await st.cleaner.clean_once()
        assert not st.running_flags.is_set(RunningFlags.DISK_FULL)
        assert (await st.put(msg("Ret", b"back"))).status is PutMessageStatus.PUT_OK
    finally:
        await cm.__aexit__(None, None, None)


@pytest.mark.parametrize(
    "drop",
    [
        pytest.param(lambda st: st.delete_topics(["Gone"]), id="deleteTopics"),
        # cleanUnusedTopic: every topic without a config goes, the schedule topic excepted
        pytest.param(lambda st: st.clean_unused_topics(["Kept"]), id="cleanUnusedTopic"),
    ],
)
async def test_dropped_topics_lose_queues_and_offsets(store, tmp_path, drop):
    root = tmp_path / "store"
    cm, st, _ = await store()
    try:
        await fill(st, 6, topic="Gone")
        await fill(st, 2, topic="Kept")
        await fill(st, 1, topic="SCHEDULE_TOPIC_XXXX", queues=1)
        assert st.get_max_offset_in_queue("Gone", 0) == 3
        assert await drop(st) == 2
        assert not (root / "consumequeue" / "Gone").exists()
        assert (root / "consumequeue" / "Kept").is_dir()
        assert st.get_max_offset_in_queue("SCHEDULE_TOPIC_XXXX", 0) == 1
        assert st.get_max_offset_in_queue("Gone", 0) == 0
        assert st.get_messages("G", "Gone", 0, 0, 32).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
        assert await drop(st) == 0
        r = await st.put(msg("Gone", b"again"))
        assert r.queue_offset == 0, "a topic created again starts at offset 0"
    finally:
        await cm.__aexit__(None, None, None)


async def test_manual_delete_then_clean_expired_consume_queues(store):
    """deleteExpiredCommitLog (329) deletes expired files outside deleteWhen; afterwards
    cleanExpiredCQ (306) drops a queue whose every unit points below the CommitLog."""
    cm, st, _ = await store(
        mappedFileSizeCommitLog=FILE,
        fileReservedTime=0.0003,
        deleteWhen=other_hour(),
        mappedFileSizeConsumeQueue=20 * 8,
    )
    try:
        await fill(st, 2, topic="Early", queues=1)
        await fill(st, 100)
        cl = commitlog(st)
        time.sleep(1.2)  # 0.0003 h: every file expired
        assert await st.clean_expired_consume_queues() == 0  # nothing below the CommitLog yet
        assert await st.cleaner.clean_once() == 0  # not the hour
        st.cleaner.commitlog_service.execute_delete_files_manually()
        assert await st.cleaner.clean_once() >= len(cl) - 1
        assert st.min_phy_offset == int(cl[-1])
        assert await st.clean_expired_consume_queues() == 1
        assert st.get_consume_queue("Early", 0) is None
        assert st.get_consume_queue("Ret", 0) is not None  # its last unit is still readable
    finally:
        await cm.__aexit__(None, None, None)
