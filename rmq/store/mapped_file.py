"""MappedFile and MappedFileQueue: fixed-size mmapped files named by their start offset.

Every file is reserved on disk with posix_fallocate when it is created, so a write
through the mapping can never fault (SIGBUS) on a full disk: a full disk shows up as
a failed file creation, which the put path answers with an error instead.

Data goes into the files with pwrite(2), never through the mapping; the mapping is for
reading. pwrite into the page cache costs a fraction of first-touch page faults on a
shared mapping, and makes fdatasync write about the bytes written (through the mapping
the device wrote ~7.5x as much per sync). See `write_size_last` for crash safety.

Threading: all bookkeeping (positions, the file list) belongs to the event-loop
thread. Blocking work (creating a file, fdatasync, unlink) is done by the caller in a
worker thread on objects it holds; `hold()`/`release()` keep a file's descriptor and
mapping alive while a worker uses it.
"""

from __future__ import annotations

import concurrent.futures
import logging
import mmap
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from rmq.store.errors import StoreError

log = logging.getLogger("rmq.store")

OS_PAGE_SIZE = 4096


_ZERO_CHUNK = bytes(1 << 20)


def zero_range(mm: mmap.mmap, start: int, end: int, fd: int | None = None) -> None:
    """Zero [start, end) of a mapped file, writing only chunks that are not zero
    already (so a clean tail costs a read, not a page cache full of dirty zero pages,
    nor blocks allocated in the holes of a sparse file). With fd the zeros go in with
    pwrite, else through the mapping."""
    pos = start
    while pos < end:
        n = min(len(_ZERO_CHUNK), end - pos)
        chunk = _ZERO_CHUNK if n == len(_ZERO_CHUNK) else bytes(n)
        if mm[pos : pos + n] != chunk:
            if fd is None:
                mm[pos : pos + n] = chunk
            else:
                pwrite_all(fd, chunk, pos)
        pos += n


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, pos: int) -> None:
    """pwrite every byte of data at pos (a regular file may take fewer on a signal)."""
    n = os.pwrite(fd, data, pos)
    if n != len(data):
        mv = memoryview(data)
        while n < len(mv):
            k = os.pwrite(fd, mv[n:], pos + n)
            if k <= 0:
                raise OSError(f"pwrite wrote nothing at {pos + n}")
            n += k


def write_size_last(fd: int, data: bytes | bytearray | memoryview, pos: int, head: int) -> None:
    """Write data at pos so that its first `head` bytes land last.

    A pwrite of many pages is not atomic: on SIGKILL the kernel stops between pages
    (generic_perform_write checks fatal_signal_pending per page), leaving a prefix. The
    format's readers stop at the first entry whose size field is 0 (zeros beyond the
    write position are guaranteed by preallocation and by truncation zeroing the dirty
    tail), so writing the first entry's size field last means a torn write is never
    read back: until the second pwrite has returned, everything of this write is
    behind an entry that reads as "end of data". CommitLog: head = 4 (TOTALSIZE of the
    first record); ConsumeQueue: head = 12 (offset + size of the first unit). Callers
    must bound one write, so that the truncation after a crash can zero all of it.

    A write inside one page is copied in one step (the kill is only seen between
    pages), so it needs no split: one syscall instead of two for what dispatch writes
    most, a single 20-byte ConsumeQueue unit (queues spread over many queues get one
    unit each per batch), and for a commit of a record or two.
    """
    n = len(data)
    if n > head and pos // OS_PAGE_SIZE != (pos + n - 1) // OS_PAGE_SIZE:
        pwrite_all(fd, memoryview(data)[head:], pos + head)
        pwrite_all(fd, memoryview(data)[:head], pos)
    else:
        pwrite_all(fd, data, pos)


class Destroyable(Protocol):
    def destroy(self) -> None: ...


def destroy_now(files: Iterable[Destroyable]) -> int:
    """Delete files already taken out of their queue, on this thread; how many there were
    (the synchronous form of cleanup.destroy_files)."""
    n = 0
    for f in files:
        f.destroy()
        n += 1
    return n


def offset_to_file_name(offset: int) -> str:
    """20-digit zero-padded start offset (UtilAll.offset2FileName)."""
    return f"{offset:020d}"


class MappedFile:
    """One fixed-size file mapped into memory, with wrote/committed/flushed positions.

    wrote_position: bytes appended (for the CommitLog this includes bytes still in its
    write buffer); committed_position: bytes in the file (the page cache), the readable
    end; flushed_position: bytes made durable by fdatasync. Files written directly
    (ConsumeQueue, replicated CommitLog data) keep wrote == committed.
    """

    __slots__ = (
        "path",
        "file_name",
        "file_from_offset",
        "file_size",
        "fd",
        "mm",
        "wrote_position",
        "committed_position",
        "flushed_position",
        "store_timestamp",
        "sparse",
        "_refs",
        "_destroyed",
        "_closed",
    )

    def __init__(self, path: str, file_size: int, fd: int, mm: mmap.mmap, sparse: bool = False) -> None:
        self.path = path
        self.file_name = os.path.basename(path)
        try:
            self.file_from_offset = int(self.file_name)
        except ValueError:
            self.file_from_offset = 0
        self.file_size = file_size
        self.fd = fd
        self.mm = mm
        self.wrote_position = 0
        self.committed_position = 0
        self.flushed_position = 0
        self.store_timestamp = 0
        # A sparse file has holes; writing a hole through the mapping faults (SIGBUS)
        # when the disk is full, so its data goes in with pwrite, which fails cleanly.
        self.sparse = sparse
        self._refs = 0
        self._destroyed = False
        self._closed = False

    # --- creation (blocking; run off the event loop) ---
    @classmethod
    def create(cls, path: str, file_size: int, preallocate: bool = True) -> MappedFile:
        """Create (or reuse an existing empty) file of file_size bytes and map it."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if preallocate:
                # Reserve the blocks now: a write into an mmapped hole on a full disk
                # kills the process with SIGBUS; a failed fallocate is just an error.
                os.posix_fallocate(fd, 0, file_size)
            else:
                os.ftruncate(fd, file_size)
            mm = mmap.mmap(fd, file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            try:
                if os.path.getsize(path) in (0, file_size):
                    os.unlink(path)
            except OSError:
                pass
            raise
        return cls(path, file_size, fd, mm, sparse=not preallocate)

    @classmethod
    def open_existing(cls, path: str, file_size: int, sparse: bool = False) -> MappedFile:
        actual = os.path.getsize(path)
        if actual != file_size:
            raise StoreError(
                f"{path}: length {actual} differs from the configured file size {file_size}; "
                "files of one queue must all have the configured size"
            )
        fd = os.open(path, os.O_RDWR)
        try:
            mm = mmap.mmap(fd, file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, file_size, fd, mm, sparse=sparse)

    # --- positions ---
    @property
    def read_position(self) -> int:
        """Readable end: what is in the file (RocketMQ's getReadPosition with a write
        buffer is its committed position)."""
        return self.committed_position

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    @property
    def end_offset(self) -> int:
        return self.file_from_offset + self.file_size

    def set_positions(self, pos: int) -> None:
        self.wrote_position = self.committed_position = self.flushed_position = pos

    # --- data ---
    def append(self, data: bytes | bytearray | memoryview, head: int = 0) -> int:
        """Write data into the file at the wrote position (no buffering: wrote and
        committed move together); returns the position it was written at. head > 0
        writes the first head bytes last (see write_size_last)."""
        pos = self.wrote_position
        if pos != self.committed_position:
            raise StoreError(
                f"{self.file_name}: direct append while {self.wrote_position - pos} buffered bytes are not committed"
            )
        end = pos + len(data)
        if end > self.file_size:
            raise StoreError(f"{self.file_name}: append of {len(data)} bytes at {pos} overflows")
        if head:
            write_size_last(self.fd, data, pos, head)
        else:
            pwrite_all(self.fd, data, pos)
        self.wrote_position = self.committed_position = end
        return pos

    def read(self, pos: int, size: int) -> bytes:
        return self.mm[pos : pos + size]

    def is_able_to_flush(self, least_pages: int) -> bool:
        flushed = self.flushed_position
        write = self.committed_position
        if write >= self.file_size and flushed < write:
            return True
        if least_pages > 0:
            return (write // OS_PAGE_SIZE) - (flushed // OS_PAGE_SIZE) >= least_pages
        return write > flushed

    # --- lifetime ---
    def hold(self) -> bool:
        if self._destroyed:
            return False
        self._refs += 1
        return True

    def release(self) -> None:
        self._refs -= 1
        if self._refs <= 0 and self._destroyed:
            self._close()

    def sync(self) -> None:
        """fdatasync the file (blocking). The page cache is shared with the mapping,
        so this makes every byte written through the mmap before the call durable."""
        os.fdatasync(self.fd)

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.mm.close()
        except BufferError:
            # A memoryview still points into the mapping; unmapping would leave it
            # dangling. The mapping dies with the object instead.
            log.warning("mapped file %s still has exported views; deferring unmap", self.path)
        try:
            os.close(self.fd)
        except OSError:
            pass

    def close(self) -> None:
        """Unmap and close (the file stays on disk)."""
        self._destroyed = True
        if self._refs <= 0:
            self._close()

    def destroy(self) -> None:
        """Delete the file; unmap once no worker holds it any more."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.close()

    def detach(self) -> bool:
        """Loop thread: the file is leaving its queue; no new holder is accepted. True
        when nobody holds it now: the caller may then destroy() it from any thread.
        False: a holder's release() unmaps it, the caller only unlink()s."""
        self._destroyed = True
        return self._refs <= 0

    def unlink(self) -> None:
        """Delete the file from the directory (blocking); the mapping stays valid."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def truncate_file(self) -> None:
        """Shrink the file on disk to its data (only for preallocated files that hold none)."""
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def last_modified(self) -> float:
        try:
            return os.path.getmtime(self.path)
        except OSError:
            return 0.0

    def __repr__(self) -> str:
        return (
            f"MappedFile({self.file_name}, wrote={self.wrote_position}, "
            f"committed={self.committed_position}, flushed={self.flushed_position})"
        )


class AllocateMappedFileService:
    """Creates the next file in a background thread so the put path never waits for it.

    RocketMQ's AllocateMappedFileService: when file N is taken into use, file N+1 is
    requested; by the time N is full, N+1 exists and is mapped.
    """

    def __init__(self, preallocate: bool = True) -> None:
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="rmq-allocate")
        self._pending: dict[str, concurrent.futures.Future[MappedFile]] = {}
        self._lock = threading.Lock()
        self._preallocate = preallocate
        self.waits = 0  # times a caller had to wait for a file
        self.wait_seconds = 0.0

    def request(self, path: str, size: int) -> None:
        with self._lock:
            if path in self._pending or os.path.exists(path):
                return
            self._pending[path] = self._executor.submit(MappedFile.create, path, size, self._preallocate)

    def take(self, path: str, size: int) -> MappedFile:
        """The file at path: preallocated if it was requested, else created now."""
        with self._lock:
            fut = self._pending.pop(path, None)
        if fut is None:
            return MappedFile.create(path, size, self._preallocate)
        if not fut.done():
            self.waits += 1
            t0 = time.perf_counter()
            mf = fut.result()
            self.wait_seconds += time.perf_counter() - t0
            return mf
        return fut.result()

    def wait_pending(self) -> None:
        """Block until every requested file exists whole (tests compare store directories;
        a file still being created reads short)."""
        with self._lock:
            pending = list(self._pending.values())
        concurrent.futures.wait(pending)

    def shutdown(self) -> None:
        """Stop and delete files that were preallocated but never used."""
        with self._lock:
            pending = list(self._pending.items())
            self._pending.clear()
        for _path, fut in pending:
            try:
                mf = fut.result()
            except Exception:
                continue
            mf.destroy()
        self._executor.shutdown(wait=True)


@dataclass(slots=True)
class FlushPlan:
    """Files to fdatasync and the positions that become durable once they are."""

    files: list[tuple[MappedFile, int]]
    flushed_where: int
    store_timestamp: int

    def run(self) -> None:
        """Blocking part: runs in a flush thread."""
        for mf, _ in self.files:
            mf.sync()


@dataclass(slots=True)
class TruncatePlan:
    """The disk half of a truncation whose bookkeeping is done (HA: a returning old
    master drops what the new master does not have).

    Readers on the loop already see the shortened files; what is left touches only
    bytes and files nobody can reach any more: zero the dropped tail of each kept file
    and fdatasync it, unlink the detached files (`run`, blocking: a worker thread),
    then unmap them (`finish`, loop thread).
    """

    zero: list[tuple[MappedFile, int, int]]
    doomed: list[MappedFile]
    dirs: list[str]

    @classmethod
    def empty(cls) -> TruncatePlan:
        return cls([], [], [])

    def add(self, other: TruncatePlan) -> None:
        self.zero.extend(other.zero)
        self.doomed.extend(other.doomed)
        self.dirs.extend(other.dirs)

    def run(self) -> None:
        for mf, start, end in self.zero:
            # pwrite, not the mapping: sparse ConsumeQueue files must not fault on a
            # full disk, and the page cache is shared with the mapping anyway.
            zero_range(mf.mm, start, end, mf.fd)
            mf.sync()
        for mf in self.doomed:
            try:
                os.unlink(mf.path)
            except FileNotFoundError:
                pass
        for d in self.dirs:
            try:
                os.rmdir(d)
            except OSError:
                pass  # not empty (another queue of the topic) or gone

    def finish(self) -> None:
        for mf in self.doomed:
            mf.close()


class MappedFileQueue:
    """The ordered files of one CommitLog or ConsumeQueue."""

    def __init__(
        self,
        store_path: str,
        mapped_file_size: int,
        allocator: AllocateMappedFileService | None = None,
        preallocate: bool = True,
    ) -> None:
        self.store_path = store_path
        self.mapped_file_size = mapped_file_size
        self.allocator = allocator
        self.preallocate = preallocate
        self.mapped_files: list[MappedFile] = []
        self.flushed_where = 0
        self.committed_where = 0
        self.store_timestamp = 0

    # --- load ---
    def load(self) -> None:
        """Map every file in the directory; all at full length, positions at the end."""
        if not os.path.isdir(self.store_path):
            return
        names = sorted(n for n in os.listdir(self.store_path) if n.isdigit() and len(n) == 20)
        for n in names:
            path = os.path.join(self.store_path, n)
            size = os.path.getsize(path)
            if size != self.mapped_file_size:
                if size == 0 and n == names[-1]:
                    # created, killed before posix_fallocate/ftruncate: holds nothing
                    log.warning("%s: empty, its creation was cut short (crash); deleting it", path)
                    os.unlink(path)
                    continue
                raise StoreError(
                    f"{path}: length {size} differs from the configured size "
                    f"{self.mapped_file_size}; check mappedFileSize* in the config"
                )
            mf = MappedFile.open_existing(path, self.mapped_file_size, sparse=not self.preallocate)
            mf.set_positions(self.mapped_file_size)
            self.mapped_files.append(mf)

    # --- lookup ---
    def get_first_mapped_file(self) -> MappedFile | None:
        return self.mapped_files[0] if self.mapped_files else None

    def get_last_mapped_file(self) -> MappedFile | None:
        return self.mapped_files[-1] if self.mapped_files else None

    def path_for(self, start_offset: int) -> str:
        return os.path.join(self.store_path, offset_to_file_name(start_offset))

    def make_file(self, start_offset: int) -> MappedFile:
        """Create (or take the preallocated) file at start_offset without adding it to
        the queue. Blocking, and touches no bookkeeping: a worker thread may run it."""
        os.makedirs(self.store_path, exist_ok=True)
        path = self.path_for(start_offset)
        if self.allocator is not None:
            return self.allocator.take(path, self.mapped_file_size)
        return MappedFile.create(path, self.mapped_file_size, self.preallocate)

    def add_file(self, mf: MappedFile) -> None:
        """Append a file made by make_file (loop thread) and preallocate the next one."""
        last = self.mapped_files[-1] if self.mapped_files else None
        if last is not None and mf.file_from_offset != last.file_from_offset + self.mapped_file_size:
            raise StoreError(f"{mf.file_name} does not follow {last.file_name}")
        self.mapped_files.append(mf)
        if self.allocator is not None:
            nxt = mf.file_from_offset + self.mapped_file_size
            self.allocator.request(self.path_for(nxt), self.mapped_file_size)

    def create_mapped_file(self, start_offset: int) -> MappedFile:
        """Create the file that starts at start_offset (a multiple of the file size)."""
        mf = self.make_file(start_offset)
        self.add_file(mf)
        return mf

    def get_last_mapped_file_for_write(self, start_offset: int = 0) -> MappedFile:
        """The last file, or a new one when there is none or the last is full.

        start_offset places the first file of an empty queue (e.g. a slave that starts
        mid-stream, or a ConsumeQueue whose first unit is not at offset 0).
        """
        last = self.mapped_files[-1] if self.mapped_files else None
        if last is None:
            create_offset = start_offset - start_offset % self.mapped_file_size
        elif last.is_full():
            create_offset = last.file_from_offset + self.mapped_file_size
        else:
            return last
        return self.create_mapped_file(create_offset)

    def find_mapped_file_by_offset(self, offset: int, return_first_on_not_found: bool = False) -> MappedFile | None:
        files = self.mapped_files
        if not files:
            return None
        first = files[0]
        idx = offset // self.mapped_file_size - first.file_from_offset // self.mapped_file_size
        if 0 <= idx < len(files):
            mf = files[idx]
            if mf.file_from_offset <= offset < mf.file_from_offset + self.mapped_file_size:
                return mf
        # Files are contiguous by construction; fall back to a scan if a gap exists.
        for mf in files:
            if mf.file_from_offset <= offset < mf.file_from_offset + self.mapped_file_size:
                return mf
        return first if return_first_on_not_found else None

    # --- offsets ---
    def get_min_offset(self) -> int:
        return self.mapped_files[0].file_from_offset if self.mapped_files else -1

    def get_max_offset(self) -> int:
        """Readable end: start of the last file + its committed position."""
        last = self.mapped_files[-1] if self.mapped_files else None
        return last.file_from_offset + last.committed_position if last else 0

    def get_max_wrote_offset(self) -> int:
        """End of everything appended, including bytes not committed yet."""
        last = self.mapped_files[-1] if self.mapped_files else None
        return last.file_from_offset + last.wrote_position if last else 0

    def remain_to_flush(self) -> int:
        return self.get_max_offset() - self.flushed_where

    # --- flush ---
    def flush_plan(self, least_pages: int) -> FlushPlan | None:
        """What to fdatasync now (None when nothing is due). Loop thread only.

        Unlike RocketMQ (one file per call) the plan covers every file from the flushed
        position to the committed position, so one round flushes across a roll. Bytes
        still in a write buffer are not covered: commit them first.
        """
        files = self.mapped_files
        if not files:
            return None
        start = self.find_mapped_file_by_offset(self.flushed_where, True)
        if start is None:
            return None
        i = files.index(start) if start is not files[-1] else len(files) - 1
        plan: list[tuple[MappedFile, int]] = []
        for mf in files[i:]:
            if not mf.is_able_to_flush(least_pages):
                if mf.flushed_position < mf.committed_position:
                    break  # below least_pages: leave the rest for later
                continue
            if not mf.hold():
                continue
            plan.append((mf, mf.committed_position))
        if not plan:
            return None
        last_mf, last_pos = plan[-1]
        return FlushPlan(plan, last_mf.file_from_offset + last_pos, self.store_timestamp)

    def apply_flush(self, plan: FlushPlan) -> None:
        for mf, pos in plan.files:
            if pos > mf.flushed_position:
                mf.flushed_position = pos
            mf.release()
        if plan.flushed_where > self.flushed_where:
            self.flushed_where = plan.flushed_where

    def abandon_flush(self, plan: FlushPlan) -> None:
        for mf, _ in plan.files:
            mf.release()

    def flush_now(self, least_pages: int = 0) -> None:
        """Blocking flush from the loop thread (start-up, shutdown, tests only)."""
        plan = self.flush_plan(least_pages)
        if plan is not None:
            try:
                plan.run()
            finally:
                self.apply_flush(plan)

    # --- truncate / delete ---
    def truncate_dirty_files(self, offset: int, dirty_end: Callable[[MappedFile, int], int] | None = None) -> None:
        """Drop everything at and after offset (spec 4.0 truncateDirtyFiles).

        dirty_end(file, pos) says how far stale bytes may reach beyond pos in the file
        that keeps its head; that range is zeroed so neither a later append (which
        relies on zeros beyond the write position) nor a later recovery scan can take
        stale bytes for data. Only the format's owner knows that extent, and zeroing
        the whole tail of a 1 GiB file on every start would be absurd.
        """
        keep: list[MappedFile] = []
        for mf in self.mapped_files:
            file_tail = mf.file_from_offset + self.mapped_file_size
            if file_tail > offset:
                if offset >= mf.file_from_offset:
                    pos = offset - mf.file_from_offset
                    if dirty_end is not None:
                        end = min(dirty_end(mf, pos), mf.file_size)
                        zero_range(mf.mm, pos, end, mf.fd)
                    mf.set_positions(pos)
                    keep.append(mf)
                else:
                    mf.destroy()
            else:
                keep.append(mf)
        self.mapped_files = keep
        if self.flushed_where > offset:
            self.flushed_where = offset
        if self.committed_where > offset:
            self.committed_where = offset

    def detach_from(self, offset: int) -> TruncatePlan:
        """Bookkeeping half of dropping every byte at and after offset, no I/O.

        Files that start at or past offset leave the queue, except the first one when
        offset > 0 (kept empty, it says where the next byte goes); the file holding
        offset keeps its head, with every position set to offset. The plan zeroes the
        dropped bytes of that file (everything past its old write position is zero
        already: preallocation, and truncate_dirty_files on recovery, see to that) and
        unlinks the detached files.
        """
        files = self.mapped_files
        if files and offset < files[0].file_from_offset:
            raise ValueError(
                f"{self.store_path}: offset {offset} is before the first file ({files[0].file_from_offset})"
            )
        plan = TruncatePlan.empty()
        keep: list[MappedFile] = []
        for i, mf in enumerate(files):
            if mf.end_offset <= offset:
                keep.append(mf)
            elif mf.file_from_offset < offset or (i == 0 and offset > 0):
                pos = offset - mf.file_from_offset
                old_end = max(mf.wrote_position, mf.committed_position)
                if pos > old_end:
                    raise ValueError(f"{mf.path}: offset {offset} is past the data (position {old_end})")
                if old_end > pos:
                    plan.zero.append((mf, pos, old_end))
                mf.set_positions(pos)
                keep.append(mf)
            else:
                plan.doomed.append(mf)
        self.mapped_files = keep
        self.flushed_where = min(self.flushed_where, offset)
        self.committed_where = min(self.committed_where, offset)
        return plan

    def detach_all(self) -> TruncatePlan:
        """Every file leaves the queue (and the directory goes once it is empty)."""
        plan = TruncatePlan([], list(self.mapped_files), [self.store_path])
        self.mapped_files = []
        self.flushed_where = self.committed_where = 0
        return plan

    def delete_last_mapped_file(self) -> None:
        if self.mapped_files:
            self.mapped_files.pop().destroy()

    def delete_files(self, files: Iterable[MappedFile]) -> int:
        doomed = set(id(f) for f in files)
        n = 0
        keep = []
        for mf in self.mapped_files:
            if id(mf) in doomed:
                mf.destroy()
                n += 1
            else:
                keep.append(mf)
        self.mapped_files = keep
        return n

    def detach_first(self, n: int) -> list[MappedFile]:
        """Take the first n files out of the queue (loop thread; retention). The caller
        deletes them (MappedFile.detach, then destroy or unlink in a worker thread)."""
        doomed = self.mapped_files[:n]
        self.mapped_files = self.mapped_files[n:]
        return doomed

    def reset_to(self, offset: int) -> None:
        """Set an empty queue's positions so its next write lands at offset."""
        self.flushed_where = self.committed_where = offset

    def shutdown(self, delete_unused_tail: bool = True) -> None:
        """Close every file; a trailing file with no data at all is deleted."""
        if delete_unused_tail and self.mapped_files:
            last = self.mapped_files[-1]
            if last.wrote_position == 0 and len(self.mapped_files) > 1:
                self.mapped_files.pop()
                last.destroy()
        for mf in self.mapped_files:
            mf.close()

    def destroy(self) -> None:
        for mf in self.mapped_files:
            mf.destroy()
        self.mapped_files = []
        self.flushed_where = self.committed_where = 0
        try:
            os.rmdir(self.store_path)
        except OSError:
            pass
