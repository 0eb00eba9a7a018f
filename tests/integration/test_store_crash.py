"""Crash safety with a real SIGKILL of a writer process, at random moments.

For each flush mode the same store directory goes through several lives of
`store_writer.py` (64 concurrent producers of single messages and small batches,
files small enough that the CommitLog, every ConsumeQueue and the index roll all the
time), each ended by SIGKILL: very early (interpreter start-up), during load/recovery,
or after READY while puts are in flight. Afterwards the test process opens the store
(abnormal recovery, since `abort` is left behind) and checks:

1. every put the writer saw return PUT_OK is there, intact, by physical offset and by
   its queue (SYNC_FLUSH: fdatasync'ed before PUT_OK; ASYNC_FLUSH: see the comment in
   `_check_acks`);
2. nothing half-written survives: every CommitLog record is complete and CRC-clean,
   PHYSICALOFFSET is its position, non-last files end in a BLANK, and the bytes after
   the recovered end are zeros;
3. ConsumeQueues agree with the CommitLog (every record has exactly one unit, units
   are consecutive and point at the right record with the right size and tag code);
4. the index finds every UNIQ_KEY and KEYS token;
5. the store takes new puts, a clean shutdown removes `abort`, and the next load is a
   normal recovery that sees the same data.

Reproduce a run with RMQ_CRASH_SEED=<seed printed by the test> (timings still vary:
the kill lands at a random *moment*, the seed fixes the delays and the writer knobs).
"""

from __future__ import annotations

import asyncio
import collections
import os
import random
import signal
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from rmq.protocol.message import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    BatchItem,
    MessageExt,
    MessageExtBatch,
    MessageExtBrokerInner,
    decode_record,
    properties_to_string,
    record_length,
    tags_string_to_tags_code,
)
from rmq.store.config import FlushDiskType, MessageStoreConfig
from rmq.store.message_store import MessageStore
from rmq.store.results import GetMessageStatus, PutMessageStatus

from . import store_writer as sw

REPO = Path(__file__).resolve().parents[2]
WRITER = Path(__file__).with_name("store_writer.py")

# One life of the writer per entry. "early": SIGKILL 0-60 ms after spawn (interpreter
# start-up, imports, maybe the lock or the first file). "recovery": after it printed
# LOADING, within about as long as recovery took last time. "ready": after READY, with
# puts in flight. "long" lives outlast the checkpoint's 3 s safety margin, so abnormal
# recovery starts in the middle of the CommitLog and throws index files away. "slow"
# writes so slowly that one index file outlives the whole life and the checkpoint is
# persisted every 200 ms: the index file the next load deletes begins well before
# the point re-dispatch restarts from (index entries in between must be rebuilt).
PLAN = ("early", "ready", "recovery", "long", "recovery", "slow", "ready", "early", "ready")
SLOW_KNOBS = ("pause=4.0", "flushIntervalConsumeQueue=50", "flushConsumeQueueThoroughInterval=200")
# fast lives would produce more records than the checks can afford in the time budget
LONG_KNOBS = ("pause=0.1",)


@dataclass(frozen=True)
class Ack:
    uniq: str
    topic: str
    queue_id: int
    queue_offset: int
    phys: int
    size: int


@dataclass
class Record:
    phys: int
    raw: bytes
    msg: MessageExt


def _lines(path: Path) -> list[str]:
    data = path.read_bytes()
    # a line is complete only with its newline (each is one write(2); belt and braces)
    return data.decode("ascii", "replace").split("\n")[:-1]


def _tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text("utf-8", "replace").splitlines()[-n:])
    except OSError:
        return "<no output>"


class WriterLife:
    """One writer process: stdout/stderr go to files, so a slow reader never stalls it."""

    def __init__(self, root: Path, logs: Path, mode: str, seed: int, n: int, knobs: tuple[str, ...] = ()) -> None:
        self.out = logs / f"life{n}.out"
        self.err = logs / f"life{n}.err"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(WRITER), str(root), mode, str(seed), *knobs],
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                cwd=str(REPO),
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )
        self.started = time.monotonic()

    def wait_for(self, word: str, timeout: float) -> float | None:
        """Monotonic time `word` showed up at the start of a line; None if the
        process died or the timeout passed first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(line.startswith(word) for line in _lines(self.out)):
                return time.monotonic()
            if self.proc.poll() is not None:
                return None
            time.sleep(0.002)
        return None

    def kill(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        return self.proc.wait()

    def acks(self) -> list[Ack]:
        out = []
        for line in _lines(self.out):
            if line.startswith("ACK "):
                _, u, t, q, qo, ph, sz = line.split(" ")
                out.append(Ack(u, t, int(q), int(qo), int(ph), int(sz)))
        return out

    def count(self, word: str) -> int:
        return sum(1 for line in _lines(self.out) if line.startswith(word))


def _run_lives(root: Path, logs: Path, mode: str, base_seed: int) -> list[Ack]:
    """Start and SIGKILL the writer once per PLAN entry; returns every ACK seen."""
    rng = random.Random(f"{base_seed}/{mode}")
    acks: list[Ack] = []
    recovery_s = 0.2  # LOADING -> READY of the last life that got there
    lives: list[WriterLife] = []
    try:
        for n, phase in enumerate(PLAN):
            seed = base_seed * 100 + n + (50 if mode == "ASYNC_FLUSH" else 0)
            knobs = SLOW_KNOBS if phase == "slow" else LONG_KNOBS if phase == "long" else ()
            life = WriterLife(root, logs, mode, seed, n, knobs)
            lives.append(life)
            what = phase
            if phase == "early":
                delay = rng.uniform(0.0, 0.06)
                time.sleep(delay)
            elif phase == "recovery":
                delay = rng.uniform(0.0, recovery_s * 1.2)
                what += f" (last recovery took {recovery_s * 1000:.0f} ms)"
                t = life.wait_for("LOADING", 30)
                assert t is not None, f"life {n} never printed LOADING:\n{_tail(life.err)}"
                time.sleep(delay)
                what += ", it was READY already" if life.count("READY") else ""
            else:
                delay = {"ready": (0.05, 0.8), "long": (3.2, 4.5), "slow": (6.0, 7.0)}[phase]
                delay = rng.uniform(*delay)
                t0 = life.wait_for("LOADING", 30)
                t = life.wait_for("READY", 60)
                assert t is not None, f"life {n} never got READY:\n{_tail(life.err)}"
                if t0 is not None:
                    recovery_s = max(t - t0, 0.01)
                time.sleep(delay)
            rc = life.kill()
            assert rc == -signal.SIGKILL, (
                f"life {n} ({phase}) ended by itself with {rc} before the kill:\n{_tail(life.err)}"
            )
            got = life.acks()
            acks.extend(got)
            conf = next((line for line in _lines(life.out) if line.startswith("CONF")), "CONF -")
            print(
                f"[{mode}] life {n}: seed={seed} kill={what} after {delay * 1000:.0f} ms, "
                f"{len(got)} acks, {life.count('NACK')} nacks, {conf[5:]}"
            )
    finally:
        for life in lives:
            life.kill()
    return acks


def _walk_commitlog(st: MessageStore, recovered_end: int) -> list[Record]:
    """Check 2: every byte of the CommitLog up to the recovered end is a complete,
    CRC-clean record at its own PHYSICALOFFSET (or BLANK padding), zeros after it."""
    files = st.commitlog.mfq.mapped_files
    size = sw.COMMITLOG_FILE_SIZE
    on_disk = sorted(n for n in os.listdir(st.config.commitlog_dir) if n.isdigit())
    assert on_disk == [mf.file_name for mf in files], "files on disk differ from the mapped ones"
    assert files, "the CommitLog is empty: no life got to write anything"
    records: list[Record] = []
    for i, mf in enumerate(files):
        base = mf.file_from_offset
        assert base == i * size, f"CommitLog file {mf.file_name} is out of sequence"
        data = bytes(mf.mm)
        last = i == len(files) - 1
        pos = 0
        while True:
            if last and base + pos == recovered_end:
                break
            assert pos + 8 <= size, f"file {mf.file_name} has no BLANK at its end"
            total, magic = struct.unpack_from(">ii", data, pos)
            if magic == BLANK_MAGIC_CODE:
                assert total == size - pos, f"BLANK at {base + pos} pads {total}, not {size - pos}"
                pos = size
                if last:
                    assert base + pos == recovered_end, "recovery stopped short of a BLANK end"
                break
            assert magic == MESSAGE_MAGIC_CODE and total > 0, (
                f"offset {base + pos} (recovered end {recovered_end}): neither a record nor "
                f"BLANK (size {total}, magic {magic & 0xFFFFFFFF:08X})"
            )
            m = decode_record(data, pos, check_crc=True)  # ProtocolError = torn record
            assert m.commit_log_offset == base + pos, (
                f"record at {base + pos} says PHYSICALOFFSET {m.commit_log_offset}"
            )
            records.append(Record(base + pos, data[pos : pos + total], m))
            pos += total
        if last:
            assert data[pos:] == bytes(size - pos), (
                f"non-zero bytes after the recovered end {recovered_end} in {mf.file_name}"
            )
    return records


def _check_records(records: list[Record]) -> dict[tuple[str, int], list[Record]]:
    """Every record is one the writer sent, unchanged; queue offsets run 0, 1, 2, ...
    per queue in CommitLog order; no UNIQ_KEY twice."""
    queues: dict[tuple[str, int], list[Record]] = collections.defaultdict(list)
    seen: set[str] = set()
    for r in records:
        m = r.msg
        uniq = m.properties.get("UNIQ_KEY")
        assert uniq is not None and uniq not in seen, f"record at {r.phys}: UNIQ_KEY {uniq!r} twice"
        seen.add(uniq)
        parts = uniq.split("-")
        batch_id = uniq if len(parts) == 3 else "-".join(parts[:3])
        spec = sw.message_spec(uniq)
        assert (m.topic, m.queue_id) == sw.batch_target(batch_id), f"{uniq} in the wrong queue"
        assert m.body == spec.body, f"{uniq}: body differs from what was sent"
        assert m.properties == spec.properties(uniq), f"{uniq}: properties differ"
        q = queues[(m.topic, m.queue_id)]
        assert m.queue_offset == len(q), (
            f"{m.topic}-{m.queue_id}: record at {r.phys} has queue offset {m.queue_offset}, "
            f"expected {len(q)} (a queue offset was reused or skipped)"
        )
        q.append(r)
    return queues


def _check_acks(st: MessageStore, by_phys: dict[int, Record], acks: list[Ack], mode: str) -> None:
    """Check 1. Under SYNC_FLUSH PUT_OK came after fdatasync, so the message must be
    there. Under ASYNC_FLUSH nothing promises that across a power cut, but SIGKILL does
    not drop the page cache: what a killed process wrote through its mapping is in
    the file, so every ACKed message must survive here too."""
    assert len({a.uniq for a in acks}) == len(acks), "an ACKed UNIQ_KEY was ACKed twice"
    for a in acks:
        r = by_phys.get(a.phys)
        assert r is not None, f"[{mode}] ACKed {a} is not a record of the recovered CommitLog"
        m = r.msg
        assert (m.properties.get("UNIQ_KEY"), m.topic, m.queue_id, m.queue_offset, m.store_size) == (
            a.uniq,
            a.topic,
            a.queue_id,
            a.queue_offset,
            a.size,
        ), f"[{mode}] {a} reads back as {m}"
        got = st.select_one_message_by_offset(a.phys)
        assert got is not None and bytes(got) == r.raw, f"[{mode}] {a}: select by offset differs"


def _check_consume_queues(st: MessageStore, queues: dict[tuple[str, int], list[Record]], acks: list[Ack]) -> None:
    """Check 3 (and check 1 through the queue): units cover 0..n-1, each points at its
    record with the right size and tag code, get_messages returns the records."""
    known = {(t, q) for t, qs in st.consume_queue_table.items() for q in qs}
    for key in known - set(queues):
        assert st.get_max_offset_in_queue(*key) == 0, f"consume queue {key} has units but no records"
    by_queue: dict[tuple[str, int], dict[int, bytes]] = {}
    for (topic, qid), recs in queues.items():
        cq = st.get_consume_queue(topic, qid)
        assert cq is not None, f"no consume queue for {topic}-{qid}"
        n = len(recs)
        assert (cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()) == (0, n), (
            f"{topic}-{qid}: queue spans {cq.get_min_offset_in_queue()}..{cq.get_max_offset_in_queue()}, records {n}"
        )
        assert st.commitlog.topic_queue_table.get((topic, qid)) == n, (
            f"{topic}-{qid}: next queue offset {st.commitlog.topic_queue_table.get((topic, qid))}, expected {n}"
        )
        units = list(cq.iter_units(0))
        assert [u[0] for u in units] == list(range(n)), f"{topic}-{qid}: units are not consecutive"
        for (idx, off, sz, tag), r in zip(units, recs, strict=False):
            want = (r.phys, len(r.raw), tags_string_to_tags_code(r.msg.properties.get("TAGS")))
            assert (off, sz, tag) == want, f"{topic}-{qid} unit {idx} is {(off, sz, tag)}, record {want}"
        # nothing after the last unit of the last file: a stale unit would come back
        last = cq.mfq.mapped_files[-1]
        assert bytes(last.mm[last.wrote_position :]) == bytes(last.file_size - last.wrote_position), (
            f"{topic}-{qid}: stale bytes after the last unit in {last.path}"
        )
        got: dict[int, bytes] = {}
        off = 0
        while off < n:
            g = st.get_messages("crash-check", topic, qid, off, 32)
            assert g.status is GetMessageStatus.FOUND, f"{topic}-{qid}@{off}: {g.status}"
            for qo, buf in zip(g.queue_offsets, g.buffers, strict=False):
                got[qo] = bytes(buf)
            assert g.next_begin_offset > off
            off = g.next_begin_offset
        assert got == {i: r.raw for i, r in enumerate(recs)}, f"{topic}-{qid}: get_messages differs"
        by_queue[(topic, qid)] = got
    for a in acks:
        raw = by_queue.get((a.topic, a.queue_id), {}).get(a.queue_offset)
        assert raw is not None and decode_record(raw).properties.get("UNIQ_KEY") == a.uniq, (
            f"ACKed {a} is not at its queue offset"
        )


def _check_index(st: MessageStore, records: list[Record]) -> None:
    """Check 4: query_message finds every record by UNIQ_KEY and by each KEYS token."""
    missing = []
    for r in records:
        m = r.msg
        ts = m.store_timestamp
        keys = [m.properties["UNIQ_KEY"]] + (m.properties.get("KEYS") or "").split()
        for k in keys:
            q = st.query_message(m.topic, k, 32, ts - 2000, ts + 1000)
            if not any(decode_record(b).commit_log_offset == r.phys for b in q.buffers):
                missing.append((r.phys, m.topic, k))
    assert not missing, f"{len(missing)} keys not found by the index, first {missing[:5]}, last {missing[-3:]}"


async def _check_new_puts(st: MessageStore, queues: dict[tuple[str, int], list[Record]]) -> dict:
    """Check 5 (part 1): puts continue every queue's offsets and are found."""
    expect: dict[tuple[str, int], int] = {k: len(v) for k, v in queues.items()}
    for i, (topic, qid) in enumerate(sorted(queues)):
        uniq = f"after-{i}"
        spec = sw.message_spec(uniq)
        r = await st.put(
            MessageExtBrokerInner(topic=topic, body=spec.body, queue_id=qid, properties=spec.properties(uniq))
        )
        assert r.status is PutMessageStatus.PUT_OK and r.queue_offset == expect[(topic, qid)]
        expect[(topic, qid)] += 1
    items = [
        BatchItem(
            0,
            sw.message_spec(f"afterb-{j}").body,
            properties_to_string(sw.message_spec(f"afterb-{j}").properties(f"afterb-{j}")),
        )
        for j in range(3)
    ]
    r = await st.put_batch(MessageExtBatch(topic="CrashNew", items=items, queue_id=0))
    assert r.status is PutMessageStatus.PUT_OK and r.queue_offset == 0
    expect[("CrashNew", 0)] = 3
    assert await st.reput.wait_caught_up(timeout=10)
    for (topic, qid), n in expect.items():
        assert st.get_max_offset_in_queue(topic, qid) == n
        g = st.get_messages("crash-check", topic, qid, n - 1, 1)
        assert g.status is GetMessageStatus.FOUND
    q = st.query_message("CrashNew", "afterb-2", 32, 0, 2**62)
    assert len(q.buffers) == 1
    return expect


async def _verify(root: Path, mode: str, acks: list[Ack]) -> None:
    cfg = sw.store_config(str(root), mode)
    assert os.path.exists(cfg.abort_path), "no life reached start(): nothing was tested"
    t0 = time.monotonic()
    st = MessageStore(cfg)
    st.load()
    try:
        assert not st.last_exit_ok
        recovered_end = st.max_phy_offset
        await st.start()
        t1 = time.monotonic()
        records = _walk_commitlog(st, recovered_end)
        queues = _check_records(records)
        by_phys = {r.phys: r for r in records}
        _check_acks(st, by_phys, acks, mode)
        _check_consume_queues(st, queues, acks)
        t2 = time.monotonic()
        _check_index(st, records)
        t3 = time.monotonic()
        expect = await _check_new_puts(st, queues)
        end_after = st.max_phy_offset
    finally:
        await st.shutdown()
    print(
        f"[{mode}] verified {len(records)} records ({len(acks)} ACKed) in {len(queues)} queues, "
        f"CommitLog end {recovered_end} in {len(st.commitlog.mfq.mapped_files) or '-'} files; "
        f"recovery {t1 - t0:.2f} s, log+queues {t2 - t1:.2f} s, index {t3 - t2:.2f} s"
    )
    assert not os.path.exists(cfg.abort_path), "a clean shutdown left `abort` behind"

    # check 5 (part 2): the next load is a normal recovery of exactly that
    st = MessageStore(cfg)
    st.load()
    try:
        assert st.last_exit_ok
        assert st.max_phy_offset == end_after
        await st.start()
        for (topic, qid), n in expect.items():
            assert st.get_max_offset_in_queue(topic, qid) == n, f"{topic}-{qid} after a clean restart"
        for a in acks[-50:]:
            got = st.select_one_message_by_offset(a.phys)
            assert got is not None and bytes(got) == by_phys[a.phys].raw
    finally:
        await st.shutdown()
    assert not os.path.exists(cfg.abort_path)


def _base_seed() -> int:
    env = os.environ.get("RMQ_CRASH_SEED")
    return int(env) if env else random.SystemRandom().randrange(1, 10**6)


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("mode", [FlushDiskType.SYNC_FLUSH.value, FlushDiskType.ASYNC_FLUSH.value])
def test_sigkill_at_random_moments(tmp_path: Path, mode: str) -> None:
    seed = _base_seed()
    print(f"[{mode}] RMQ_CRASH_SEED={seed}")
    root = tmp_path / "store"
    logs = tmp_path / "logs"
    logs.mkdir()
    t0 = time.monotonic()
    acks = _run_lives(root, logs, mode, seed)
    t1 = time.monotonic()
    assert acks, "no put was ever acknowledged"
    print(f"[{mode}] {len(PLAN)} lives in {t1 - t0:.1f} s, {len(acks)} ACKs")
    asyncio.run(_verify(root, mode, acks))
    print(f"[{mode}] verification {time.monotonic() - t1:.1f} s (seed {seed})")


# --------------------------------------------------------------------------- regressions
@pytest.mark.timeout(30)
async def test_blank_record_with_less_than_48_bytes_left(tmp_path):
    """A BLANK end-of-file record written into the last 8..47 bytes of a CommitLog file
    must read as BLANK: dispatch has to skip to the next file, and recovery must keep
    the records after it (found by the SIGKILL test: a file ending 47 bytes after its
    last record stalled dispatch and made recovery truncate every later file)."""
    cfg = MessageStoreConfig(
        storePathRootDir=str(tmp_path / "s"), mappedFileSizeCommitLog=4096, flushDiskType=FlushDiskType.SYNC_FLUSH
    )
    st = MessageStore(cfg)
    st.load()
    await st.start()
    first = 4096 - 20 - record_length(0, 0, 1, 0)  # leaves 20 bytes: BLANK territory
    r1 = await st.put(MessageExtBrokerInner(topic="T", body=b"a" * first))
    r2 = await st.put(MessageExtBrokerInner(topic="T", body=b"b" * 100))
    assert r1.status is r2.status is PutMessageStatus.PUT_OK
    assert (r1.wrote_offset, r1.wrote_bytes, r2.wrote_offset) == (0, 4076, 4096)
    assert await st.reput.wait_caught_up(timeout=5), "dispatch stalled at the BLANK record"
    g = st.get_messages("g", "T", 0, 0, 32)
    assert g.status is GetMessageStatus.FOUND and len(g.buffers) == 2
    st.close_after_crash_test()  # as if killed: `abort` stays

    st = MessageStore(cfg)
    st.load()
    assert not st.last_exit_ok
    assert st.max_phy_offset == 4096 + r2.wrote_bytes, "recovery dropped the record after the BLANK"
    await st.start()
    g = st.get_messages("g", "T", 0, 0, 32)
    assert g.status is GetMessageStatus.FOUND and len(g.buffers) == 2
    await st.shutdown()


@pytest.mark.timeout(30)
async def test_index_rebuilt_below_the_checkpoint_restart_point(tmp_path):
    """After a crash, index files newer than checkpoint.indexMsgTimestamp are deleted,
    while re-dispatch starts at the CommitLog file the physic/logics timestamps allow.
    The keys of records between the deleted files' first entry and that file must be
    indexed again (found by the SIGKILL test with a slow writer, pause=2.0, killed
    12.5 s in: 600+ keys lost)."""
    from rmq.store.checkpoint import StoreCheckpoint

    cfg = MessageStoreConfig(
        storePathRootDir=str(tmp_path / "s"), mappedFileSizeCommitLog=4096, maxHashSlotNum=64, maxIndexNum=4096
    )
    st = MessageStore(cfg)
    st.load()
    await st.start()
    for i in range(40):
        r = await st.put(
            MessageExtBrokerInner(topic="T", body=bytes(400), properties={"KEYS": f"k{i}", "UNIQ_KEY": f"U{i}"})
        )
        assert r.status is PutMessageStatus.PUT_OK
    assert await st.reput.wait_caught_up(timeout=5)
    last_ts = r.store_timestamp
    assert len(st.commitlog.mfq.mapped_files) >= 5
    st.close_after_crash_test()
    # What a checkpoint persisted a little before the kill looks like once the records
    # are more than 3 s old: physic/logics say "everything before the last CommitLog
    # file is in the consume queues"; no index file was ever full, so indexMsgTimestamp is 0.
    cp = StoreCheckpoint(cfg.checkpoint_path)
    cp.physic_msg_timestamp = cp.logics_msg_timestamp = last_ts + 10_000
    cp.index_msg_timestamp = 0
    cp.flush()
    cp.close()

    st = MessageStore(cfg)
    st.load()
    assert not st.last_exit_ok
    await st.start()
    try:
        lost = [
            i
            for i in range(40)
            if len(st.query_message("T", f"k{i}", 32, 0, 2**62).buffers) != 1
            or len(st.query_message("T", f"U{i}", 32, 0, 2**62).buffers) != 1
        ]
        assert not lost, f"keys of messages {lost} are no longer in the index"
    finally:
        await st.shutdown()


_KILL_DURING_CREATE = r"""
import asyncio, os, signal, sys
sys.path.insert(0, sys.argv[1])
from rmq.protocol.message import MessageExtBrokerInner
from rmq.store.config import FlushDiskType, MessageStoreConfig
from rmq.store.message_store import MessageStore

where, nth = sys.argv[3], int(sys.argv[4])
seen = 0


def die_before(real):
    # SIGKILL ourselves between creating a store file and giving it its length
    # (posix_fallocate for preallocated files, ftruncate for sparse ones)
    def hooked(fd, *args):
        global seen
        if where in os.readlink(f"/proc/self/fd/{fd}"):
            seen += 1
            if seen == nth:
                os.kill(os.getpid(), signal.SIGKILL)
        return real(fd, *args)
    return hooked


os.posix_fallocate = die_before(os.posix_fallocate)
os.ftruncate = die_before(os.ftruncate)


async def main():
    cfg = MessageStoreConfig(storePathRootDir=sys.argv[2], mappedFileSizeCommitLog=4096,
                             mappedFileSizeConsumeQueue=40, maxHashSlotNum=8, maxIndexNum=4,
                             flushDiskType=FlushDiskType.SYNC_FLUSH)
    st = MessageStore(cfg)
    st.load()
    await st.start()
    for i in range(40):
        r = await st.put(MessageExtBrokerInner(topic="T", body=bytes(900),
                                               properties={"UNIQ_KEY": f"U{i}"}))
        assert r.status.value == "PUT_OK", r.status
        os.write(1, f"ACK {r.wrote_offset}\n".encode())
        await st.reput.wait_caught_up()
    os.write(1, b"NOT KILLED\n")

asyncio.run(main())
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "where,nth", [("/commitlog/", 3), ("/consumequeue/", 2), ("/index/", 2)], ids=["commitlog", "consumequeue", "index"]
)
async def test_sigkill_while_a_store_file_is_created(tmp_path, where, nth):
    """A SIGKILL between creating a store file and giving it its length (posix_fallocate
    or ftruncate) leaves a 0-byte file; load() must drop it, not fail for ever with
    "length 0 differs from the configured size" (found by the SIGKILL test, seed 543572:
    the kill landed 11 ms after LOADING, as the first put after recovery created the
    next CommitLog file)."""
    root = tmp_path / "s"
    p = subprocess.run(
        [sys.executable, "-c", _KILL_DURING_CREATE, str(REPO), str(root), where, str(nth)],
        capture_output=True,
        timeout=50,
        cwd=str(REPO),
    )
    assert p.returncode == -signal.SIGKILL, p.stdout.decode() + p.stderr.decode()
    acked = [int(line.split()[1]) for line in p.stdout.decode().splitlines() if line.startswith("ACK")]
    cfg = MessageStoreConfig(
        storePathRootDir=str(root),
        mappedFileSizeCommitLog=4096,
        mappedFileSizeConsumeQueue=40,
        maxHashSlotNum=8,
        maxIndexNum=4,
    )
    st = MessageStore(cfg)
    st.load()
    await st.start()
    try:
        for off in acked:
            assert st.select_one_message_by_offset(off) is not None
        assert st.get_max_offset_in_queue("T", 0) >= len(acked)
    finally:
        await st.shutdown()
