"""MessageStore put throughput, group commit and dispatch lag, against the disk's own limit.

Run from the repository root (after ``pip install -e .``)::

    python bench/store_bench.py                      # the target set-up, both flush modes
    python bench/store_bench.py --json               # + figures as JSON on the last line
    python bench/store_bench.py --store-dir /tmp/sb  # keep the stores (one root per run)
    python bench/store_bench.py --profile            # + cProfile top functions per mode

What one run does, all in this process:

1. For each flush mode (ASYNC_FLUSH, SYNC_FLUSH): a fresh store with the default
   configuration (1 GiB CommitLog files, default ConsumeQueue and index sizes, index
   enabled) on a uvloop event loop; ``--concurrency`` writer tasks each put one
   message at a time (``put_nowait`` and, when the store hands back a waiter, await
   it), i.e. at most that many puts are in flight.  Messages look like a Java
   producer's: topic ``BenchmarkTest``, 8 queues round robin, a ``--size`` byte body,
   properties UNIQ_KEY (client-side unique id), WAIT=true, TAGS (and KEYS with
   ``--keys``).  A writer whose put answers at once (ASYNC_FLUSH) yields to the loop
   before its next put, as a broker answering one request per loop callback would.
   After ``--warmup`` seconds the figures are measured for ``--duration`` seconds:
   puts/s, MB/s of CommitLog bytes, fsyncs/s, messages and bytes per fsync, put latency
   (call to answer, every put of the window), dispatch backlog (sampled every 10 ms),
   CPU of the loop thread and of the process, GC time, minor page faults.  Then the
   writers stop and the time until dispatch is back at the CommitLog end is measured
   (``dispatch_lag_ms_after_stop``).  The store is checked (every message in a
   ConsumeQueue) and shut down cleanly.
2. The put path's CPU ceiling, in a separate store: building messages, the put path
   (``put_nowait`` in a tight loop of ``--concurrency`` messages, no awaits, then the
   write buffer's commit) and dispatch (``ReputMessageService.do_reput`` over that
   chunk), alternating as in one loop iteration, each timed alone, in microseconds of
   loop-thread time per message.
3. The disk's own limit: a preallocated temp file on the same filesystem as the
   stores; sequential ``os.write`` + ``os.fdatasync`` of exactly the bytes per fsync
   the SYNC_FLUSH run achieved (right after that run; also through a shared mmap, the
   way the CommitLog wrote before its write buffer), and of 1 KiB and 4 MiB,
   ``--disk-seconds`` each.  The
   ratio store MB/s / disk MB/s is printed.
4. With ``--profile``: a short run per mode under cProfile (loop thread), top 25
   functions by tottime.

MB is 10**6 bytes.  Without ``--store-dir`` every store and temp file is removed.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import cProfile
import gc
import io
import json
import logging
import math
import mmap
import os
import pstats
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import uvloop
from _cluster import steal_seconds

from rmq.protocol.message import MessageExtBrokerInner, UniqueIdGenerator
from rmq.store.config import FlushDiskType, MessageStoreConfig
from rmq.store.mapped_file import MappedFile
from rmq.store.message_store import MessageStore
from rmq.store.results import PutMessageStatus

try:
    import numpy as np
except ImportError:  # numpy is a dependency of rmq; keep a fallback anyway
    np = None

TOPIC = "BenchmarkTest"
MB = 1e6
GiB = 1 << 30
PUT_OK = PutMessageStatus.PUT_OK
MODE_NAMES = {
    "async": FlushDiskType.ASYNC_FLUSH,
    "async_flush": FlushDiskType.ASYNC_FLUSH,
    "sync": FlushDiskType.SYNC_FLUSH,
    "sync_flush": FlushDiskType.SYNC_FLUSH,
}
SAMPLE_INTERVAL = 0.010
# Stop a run early (and say so) rather than fill the filesystem.
MIN_FREE_BYTES = 3 * GiB

log = logging.getLogger("store_bench")


def out(*a) -> None:
    print(*a, flush=True)


# ---------------------------------------------------------------------------- messages
class MessageFactory:
    """Messages as the broker builds them from a Java producer's SEND_MESSAGE_V2."""

    def __init__(self, size: int, queues: int, keys: bool, store_host: bytes) -> None:
        # Incompressible body, one object shared by every message (a broker gets a
        # fresh bytes object per request; the store only reads it).
        self.body = os.urandom(size)
        self.queues = queues
        self.keys = keys
        self.store_host = store_host
        self.born_host = b"\x7f\x00\x00\x01\x00\x00\xd4\x31"
        self.ids = UniqueIdGenerator()
        self.n = 0

    def make(self) -> MessageExtBrokerInner:
        n = self.n
        self.n = n + 1
        now = time.time_ns() // 1_000_000
        uid = self.ids.next_id(now)
        if self.keys:
            k = f"order-{n}"
            props = {"KEYS": k, "UNIQ_KEY": uid, "WAIT": "true", "TAGS": "TagA"}
            ps = f"KEYS\x01{k}\x02UNIQ_KEY\x01{uid}\x02WAIT\x01true\x02TAGS\x01TagA\x02"
        else:
            props = {"UNIQ_KEY": uid, "WAIT": "true", "TAGS": "TagA"}
            ps = f"UNIQ_KEY\x01{uid}\x02WAIT\x01true\x02TAGS\x01TagA\x02"
        return MessageExtBrokerInner(
            topic=TOPIC,
            body=self.body,
            queue_id=n % self.queues,
            properties=props,
            properties_string=ps,
            born_timestamp=now,
            born_host=self.born_host,
            store_host=self.store_host,
        )


# ---------------------------------------------------------------------------- helpers
def percentile(sorted_vals, q: float) -> float:
    """Nearest-rank percentile of an ascending sequence."""
    n = len(sorted_vals)
    if n == 0:
        return float("nan")
    k = max(0, min(n - 1, math.ceil(q / 100 * n) - 1))
    return float(sorted_vals[k])


def sort_samples(a: array.array):
    if np is not None:
        return np.sort(np.frombuffer(a, dtype=np.int64))
    return sorted(a)


class GcTimer:
    """Total time spent in the cyclic garbage collector (gc.callbacks)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = 0
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._t0
            self.collections += 1

    def __enter__(self) -> GcTimer:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self)


def device_stat_path(path: str) -> str | None:
    """/sys/dev/block/MAJ:MIN/stat of the block device holding path (None if unknown)."""
    dev = os.stat(path).st_dev
    p = f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/stat"
    return p if os.path.exists(p) else None


def device_writes(stat_path: str | None) -> tuple[int, int]:
    """(bytes written, write requests completed) of the device so far; (0, 0) if unknown."""
    if stat_path is None:
        return 0, 0
    try:
        with open(stat_path) as f:
            fields = f.read().split()
        return int(fields[6]) * 512, int(fields[4])
    except (OSError, ValueError, IndexError):
        return 0, 0


class SyncTimer:
    """Time spent inside fdatasync itself for the CommitLog's files (measured in the flush
    thread), to tell the syscall apart from the executor/GIL round trip around it."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        self._prefixes: tuple[str, ...] = ()
        self._orig = MappedFile.sync

    def watch(self, commitlog_dir: str) -> None:
        self._prefixes = (os.path.join(os.path.abspath(commitlog_dir), ""),)

    def install(self) -> None:
        orig = self._orig

        def sync(mf: MappedFile) -> None:
            if not mf.path.startswith(self._prefixes):
                return orig(mf)
            t0 = time.perf_counter()
            try:
                return orig(mf)
            finally:
                self.seconds += time.perf_counter() - t0
                self.calls += 1

        MappedFile.sync = sync  # type: ignore[method-assign]

    def uninstall(self) -> None:
        MappedFile.sync = self._orig  # type: ignore[method-assign]


SYNC_TIMER = SyncTimer()


@dataclass
class Snapshot:
    wall: float
    puts: int
    bytes: int
    fsyncs: int
    rounds: int
    waiters: int
    fsync_seconds: float
    dispatched: int
    thread_utime: float
    thread_stime: float
    thread_minflt: int
    proc_utime: float
    proc_stime: float
    gc_seconds: float
    gc_collections: int
    dev_bytes: int
    dev_writes: int
    steal: float
    cq_fsyncs: int
    syscall_seconds: float
    syscall_calls: int
    commits: int


@dataclass
class RunCtx:
    st: MessageStore
    factory: MessageFactory
    measuring: bool = False
    stop: bool = False
    stored: int = 0  # every put of the run whose message is in the CommitLog
    window_puts: int = 0  # successful puts answered while measuring
    errors: dict = field(default_factory=dict)
    lat: array.array = field(default_factory=lambda: array.array("q"))
    behind: array.array = field(default_factory=lambda: array.array("q"))
    stopped_for_space: bool = False
    dev_stat: str | None = None


def snapshot(ctx: RunCtx, gct: GcTimer) -> Snapshot:
    st = ctx.st
    fs = st.flush_service.stats
    tr = resource.getrusage(resource.RUSAGE_THREAD)
    pr = resource.getrusage(resource.RUSAGE_SELF)
    return Snapshot(
        time.perf_counter(),
        ctx.window_puts,
        st.commitlog.max_offset,
        fs.fsyncs,
        fs.rounds,
        fs.waiters,
        fs.fsync_seconds,
        st.reput.dispatched_records,
        tr.ru_utime,
        tr.ru_stime,
        tr.ru_minflt,
        pr.ru_utime,
        pr.ru_stime,
        gct.seconds,
        gct.collections,
        *device_writes(ctx.dev_stat),
        steal_seconds(),
        st.flush_cq_service.stats.fsyncs,
        SYNC_TIMER.seconds,
        SYNC_TIMER.calls,
        getattr(st.commitlog, "commits", 0),
    )


def new_store(root: str, mode: FlushDiskType) -> MessageStore:
    cfg = MessageStoreConfig(storePathRootDir=root, flushDiskType=mode)
    st = MessageStore(cfg)
    st.load()
    return st


async def writer(ctx: RunCtx) -> None:
    put_nowait = ctx.st.put_nowait
    make = ctx.factory.make
    lat_append = ctx.lat.append
    clock = time.perf_counter_ns
    sleep = asyncio.sleep
    while not ctx.stop:
        msg = make()
        t0 = clock()
        result, waiter = put_nowait(msg)
        if waiter is not None:
            status = await waiter
        else:
            status = result.status
        t1 = clock()
        if status is PUT_OK:
            ctx.stored += 1
            if ctx.measuring:
                ctx.window_puts += 1
                lat_append(t1 - t0)
        else:
            ctx.errors[status.name] = ctx.errors.get(status.name, 0) + 1
            if status.stored:
                ctx.stored += 1
            else:
                # the store refuses writes (disk full, shutting down): do not spin
                await sleep(0.01)
        if waiter is None:
            await sleep(0)


async def sampler(ctx: RunCtx, space_dir: str) -> None:
    st = ctx.st
    append = ctx.behind.append
    n = 0
    while not ctx.stop:
        await asyncio.sleep(SAMPLE_INTERVAL)
        if ctx.measuring:
            append(st.dispatch_behind_bytes)
        n += 1
        if n % 20 == 0 and shutil.disk_usage(space_dir).free < MIN_FREE_BYTES:
            ctx.stopped_for_space = True
            log.warning("less than %d GiB free under %s: stopping the writers early", MIN_FREE_BYTES // GiB, space_dir)
            return


async def wait_or_space(ctx: RunCtx, seconds: float) -> None:
    end = time.perf_counter() + seconds
    while not ctx.stopped_for_space:
        left = end - time.perf_counter()
        if left <= 0:
            return
        await asyncio.sleep(min(left, 0.1))


def verify_store(st: MessageStore, expected: int) -> str:
    """Every stored message has a ConsumeQueue unit and dispatch is at the end."""
    problems = []
    qs = st.consume_queue_table.get(TOPIC, {})
    in_cq = sum(cq.get_max_offset_in_queue() for cq in qs.values())
    if in_cq != expected:
        problems.append(f"ConsumeQueues hold {in_cq} units, {expected} messages were stored")
    if st.reput.dispatched_records != expected:
        problems.append(f"dispatched {st.reput.dispatched_records} records, expected {expected}")
    if st.dispatch_behind_bytes:
        problems.append(f"dispatch {st.dispatch_behind_bytes} bytes behind")
    return "; ".join(problems) or "ok"


# ---------------------------------------------------------------------------- one store run
async def run_mode(
    mode: FlushDiskType, root: str, args, space_dir: str, duration: float, warmup: float, profile: bool = False
) -> dict:
    st = new_store(root, mode)
    SYNC_TIMER.watch(st.config.commitlog_dir)
    await st.start()
    ctx = RunCtx(st, MessageFactory(args.size, args.queues, args.keys, st.store_host), dev_stat=device_stat_path(root))
    gct = GcTimer()
    prof = cProfile.Profile() if profile else None
    with gct:
        tasks = [asyncio.create_task(writer(ctx)) for _ in range(args.concurrency)]
        samp = asyncio.create_task(sampler(ctx, space_dir))
        await wait_or_space(ctx, warmup)
        if prof is not None:
            prof.enable()
        a = snapshot(ctx, gct)
        ctx.measuring = True
        await wait_or_space(ctx, duration)
        ctx.measuring = False
        b = snapshot(ctx, gct)
        if prof is not None:
            prof.disable()
        ctx.stop = True
        await asyncio.gather(*tasks)
        t_stop = time.perf_counter()
        behind_at_stop = st.dispatch_behind_bytes
        caught_up = await st.reput.wait_caught_up(timeout=60)
        lag_s = time.perf_counter() - t_stop
        samp.cancel()
        try:
            await samp
        except asyncio.CancelledError:
            pass
    check = verify_store(st, ctx.stored)
    t0 = time.perf_counter()
    await st.shutdown()
    shutdown_s = time.perf_counter() - t0
    if os.path.exists(st.config.abort_path):
        check += "; abort file left behind (unclean shutdown)"
    alloc = st.allocator

    win = b.wall - a.wall
    puts = b.puts - a.puts
    nbytes = b.bytes - a.bytes
    fsyncs = b.fsyncs - a.fsyncs
    rounds = b.rounds - a.rounds
    lat = sort_samples(ctx.lat)
    beh = ctx.behind
    put_rate = puts / win if win > 0 else 0.0
    byte_rate = nbytes / win if win > 0 else 0.0
    loop_cpu = (b.thread_utime - a.thread_utime) + (b.thread_stime - a.thread_stime)
    r = {
        "mode": mode.value,
        "concurrency": args.concurrency,
        "window_s": win,
        "puts": puts,
        "puts_per_s": put_rate,
        "mb_per_s": byte_rate / MB,
        "record_bytes": nbytes / puts if puts else 0.0,
        "fsyncs_per_s": fsyncs / win if win > 0 else 0.0,
        # write-buffer commits (one pwrite each, normally one per loop iteration)
        "commits_per_s": (b.commits - a.commits) / win if win > 0 else 0.0,
        "bytes_per_commit": nbytes / (b.commits - a.commits) if b.commits > a.commits else None,
        "group_commit_rounds_per_s": rounds / win if win > 0 else 0.0,
        "msgs_per_fsync": puts / fsyncs if fsyncs else None,
        "bytes_per_fsync": nbytes / fsyncs if fsyncs else None,
        "fsync_ms_avg": (b.fsync_seconds - a.fsync_seconds) / fsyncs * 1e3 if fsyncs else None,
        "fdatasync_syscall_ms_avg": (
            (b.syscall_seconds - a.syscall_seconds) / (b.syscall_calls - a.syscall_calls) * 1e3
            if b.syscall_calls > a.syscall_calls
            else None
        ),
        "flush_thread_busy_pct": (b.fsync_seconds - a.fsync_seconds) / win * 100 if win else 0.0,
        "p50_ms": percentile(lat, 50) / 1e6,
        "p99_ms": percentile(lat, 99) / 1e6,
        "max_ms": float(lat[-1]) / 1e6 if len(lat) else float("nan"),
        "dispatch_behind_max_bytes": max(beh) if beh else 0,
        "dispatch_behind_mean_bytes": sum(beh) / len(beh) if beh else 0.0,
        "dispatch_behind_mean_ms": ((sum(beh) / len(beh)) / byte_rate * 1e3 if beh and byte_rate else 0.0),
        "dispatch_behind_at_stop_bytes": behind_at_stop,
        "dispatch_lag_ms_after_stop": lag_s * 1e3 if caught_up else None,
        "dispatched_in_window": b.dispatched - a.dispatched,
        "loop_cpu_pct": loop_cpu / win * 100 if win else 0.0,
        "loop_user_pct": (b.thread_utime - a.thread_utime) / win * 100 if win else 0.0,
        "loop_sys_pct": (b.thread_stime - a.thread_stime) / win * 100 if win else 0.0,
        "loop_cpu_us_per_put": loop_cpu / puts * 1e6 if puts else None,
        "process_cpu_pct": ((b.proc_utime - a.proc_utime) + (b.proc_stime - a.proc_stime)) / win * 100 if win else 0.0,
        "gc_pct_of_window": (b.gc_seconds - a.gc_seconds) / win * 100 if win else 0.0,
        "gc_collections": b.gc_collections - a.gc_collections,
        "minor_faults_per_put": (b.thread_minflt - a.thread_minflt) / puts if puts else None,
        "steal_cpu_pct": (b.steal - a.steal) / win * 100 if win else 0.0,
        "cq_index_fsyncs_per_s": (b.cq_fsyncs - a.cq_fsyncs) / win if win else 0.0,
        "device_mb_per_s": (b.dev_bytes - a.dev_bytes) / win / MB if win else 0.0,
        "device_writes_per_s": (b.dev_writes - a.dev_writes) / win if win else 0.0,
        "device_bytes_per_commitlog_byte": ((b.dev_bytes - a.dev_bytes) / nbytes if nbytes and ctx.dev_stat else None),
        "allocator_waits": alloc.waits,
        "errors": dict(ctx.errors),
        "stopped_early_for_disk_space": ctx.stopped_for_space,
        "check": check,
        "shutdown_s": shutdown_s,
    }
    if prof is not None:
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
        r["profile"] = s.getvalue()
    return r


# ---------------------------------------------------------------------------- ceiling
async def run_ceiling(root: str, args, n: int) -> dict:
    """Loop-thread cost per message of each stage, measured apart (ASYNC_FLUSH store).

    The puts go in chunks of --concurrency messages, each chunk followed by dispatching
    it, as one loop iteration of the store runs them (the write buffer is committed at
    the end of the chunk; dispatch takes the put path's ready requests); each stage is
    timed on its own."""
    st = new_store(root, FlushDiskType.ASYNC_FLUSH)
    await st.start()
    factory = MessageFactory(args.size, args.queues, args.keys, st.store_host)
    put_nowait = st.put_nowait
    commit = getattr(st, "commit_now", lambda: None)
    reput = st.reput
    chunk = max(1, args.concurrency)
    # first file creation and first touches are not what is measured
    for _ in range(1000):
        put_nowait(factory.make())
    await st.reput.wait_caught_up()
    best = {
        "make_us": math.inf,
        "put_us": math.inf,
        "dispatch_us": math.inf,
        "put_faults": math.inf,
        "dispatch_faults": math.inf,
    }
    for _ in range(args.ceiling_rounds):
        gc.collect()
        t0 = time.thread_time()
        msgs = [factory.make() for _ in range(n)]
        best["make_us"] = min(best["make_us"], (time.thread_time() - t0) / n * 1e6)
        put_s = dispatch_s = 0.0
        put_f = dispatch_f = 0
        for i in range(0, n, chunk):
            f0 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
            t0 = time.thread_time()
            for m in msgs[i : i + chunk]:
                put_nowait(m)  # no await: flush is not waited for
            commit()  # the end-of-iteration pwrite of the write buffer
            t1 = time.thread_time()
            f1 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
            while reput.do_reput(reput.batch_limit):
                pass
            t2 = time.thread_time()
            f2 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
            put_s += t1 - t0
            dispatch_s += t2 - t1
            put_f += f1 - f0
            dispatch_f += f2 - f1
        best["put_us"] = min(best["put_us"], put_s / n * 1e6)
        best["dispatch_us"] = min(best["dispatch_us"], dispatch_s / n * 1e6)
        best["put_faults"] = min(best["put_faults"], put_f / n)
        best["dispatch_faults"] = min(best["dispatch_faults"], dispatch_f / n)
        del msgs
        await asyncio.sleep(0)
    # the cost of one writer-task step (sleep(0) round trip through the loop), per put
    ctx_n = 0

    async def spin(k: int) -> None:
        nonlocal ctx_n
        for _ in range(k):
            await asyncio.sleep(0)
            ctx_n += 1

    t0 = time.thread_time()
    await asyncio.gather(*(spin(n // args.concurrency + 1) for _ in range(args.concurrency)))
    best["task_switch_us"] = (time.thread_time() - t0) / ctx_n * 1e6
    await st.reput.wait_caught_up()
    check = verify_store(st, factory.n)
    await st.shutdown()
    total = best["make_us"] + best["put_us"] + best["dispatch_us"] + best["task_switch_us"]
    best["sum_us"] = total
    best["ceiling_puts_per_s"] = 1e6 / total
    best["store_only_puts_per_s"] = 1e6 / (best["put_us"] + best["dispatch_us"])
    best["messages"] = n
    best["check"] = check
    return best


# ---------------------------------------------------------------------------- disk limit
def disk_limit(dir_: str, block: int, seconds: float, max_bytes: int, use_mmap: bool = False) -> dict:
    """Sequential os.write of `block` bytes + fdatasync, into a preallocated file (as the
    CommitLog's files are), for `seconds` or until max_bytes are written.  With use_mmap
    the bytes are copied into a shared mapping instead (how the CommitLog wrote before
    it had a write buffer; it now pwrites, as os.write here)."""
    block = max(1, int(block))
    size = max(block, (max_bytes // block) * block)
    fd, path = tempfile.mkstemp(prefix="rmq-disk-limit-", dir=dir_)
    try:
        os.posix_fallocate(fd, 0, size)
        os.fsync(fd)
        buf = os.urandom(block)
        dev = device_stat_path(path)
        dev0 = device_writes(dev)
        mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) if use_mmap else None
        lat = array.array("q")
        written = 0
        n = 0
        t_start = time.perf_counter()
        deadline = t_start + seconds
        clock = time.perf_counter_ns
        while written + block <= size:
            t0 = clock()
            if mm is None:
                k = os.write(fd, buf)
            else:
                mm[written : written + block] = buf
                k = block
            os.fdatasync(fd)
            lat.append(clock() - t0)
            written += k
            n += 1
            if n & 7 == 0 and time.perf_counter() >= deadline:
                break
        elapsed = time.perf_counter() - t_start
        dev1 = device_writes(dev)
        if mm is not None:
            mm.close()
    finally:
        os.close(fd)
        os.unlink(path)
    # MB/s of each 0.5 s slice: how much the (shared) disk's speed moved during the test
    slices: list[float] = []
    acc_ns = 0
    acc_n = 0
    for v in lat:
        acc_ns += v
        acc_n += 1
        if acc_ns >= 500_000_000:
            slices.append(acc_n * block / (acc_ns / 1e9) / MB)
            acc_ns = acc_n = 0
    if acc_ns >= 100_000_000 or not slices and acc_n:
        slices.append(acc_n * block / (acc_ns / 1e9) / MB)
    lat_s = sort_samples(lat)
    return {
        "block_bytes": block,
        "seconds": elapsed,
        "syncs": n,
        "slice_mb_per_s_min": min(slices) if slices else None,
        "slice_mb_per_s_max": max(slices) if slices else None,
        "mb_per_s": written / elapsed / MB,
        "syncs_per_s": n / elapsed,
        "p50_ms": percentile(lat_s, 50) / 1e6,
        "p99_ms": percentile(lat_s, 99) / 1e6,
        "file_full": written + block > size,
        "device_bytes_per_byte": (dev1[0] - dev0[0]) / written if written and dev else None,
        "device_writes_per_sync": (dev1[1] - dev0[1]) / n if n and dev else None,
    }


# ---------------------------------------------------------------------------- printing
def fmt(v, spec: str = ",.0f", none: str = "-") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return none
    return format(v, spec)


def print_table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    out("  ".join(h.rjust(w) for h, w in zip(header, widths, strict=False)))
    for r in rows:
        out("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=False)))


def per_kb(key: str) -> Callable[[dict], float | None]:
    return lambda r: r[key] / 1e3 if r[key] else None


def errors_cell(r: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in r["errors"].items()) or "0"


def slice_range(d: dict) -> str:
    return fmt(d["slice_mb_per_s_min"], ",.1f") + "-" + fmt(d["slice_mb_per_s_max"], ",.1f")


def disk_note(d: dict) -> str:
    return d.get("label", "") + (" (file full)" if d["file_full"] else "")


# A table column: its header, the row's key (or a function of the row) and how ``fmt``
# formats the value (None: the value is the cell's text).
Column = tuple[str, str | Callable[[dict], Any], str | None]

RUN_COLUMNS: list[Column] = [
    ("mode", "mode", None),
    ("msgs/s", "puts_per_s", ",.0f"),
    ("MB/s", "mb_per_s", ",.1f"),
    ("fsyncs/s", "fsyncs_per_s", ",.1f"),
    ("msgs/fsync", "msgs_per_fsync", ",.1f"),
    ("KB/fsync", per_kb("bytes_per_fsync"), ",.1f"),
    ("p50 ms", "p50_ms", ",.3f"),
    ("p99 ms", "p99_ms", ",.3f"),
    ("lag max KB", lambda r: r["dispatch_behind_max_bytes"] / 1e3, ",.1f"),
    ("lag mean KB", lambda r: r["dispatch_behind_mean_bytes"] / 1e3, ",.1f"),
    ("lag mean ms", "dispatch_behind_mean_ms", ",.2f"),
    ("lag after stop ms", lambda r: fmt(r["dispatch_lag_ms_after_stop"], ",.1f", "NOT CAUGHT UP"), None),
]
TIME_COLUMNS: list[Column] = [
    ("mode", "mode", None),
    ("loop CPU %", "loop_cpu_pct", ".0f"),
    ("user %", "loop_user_pct", ".0f"),
    ("sys %", "loop_sys_pct", ".0f"),
    ("loop us/put", "loop_cpu_us_per_put", ".2f"),
    ("GC %", "gc_pct_of_window", ".1f"),
    ("faults/put", "minor_faults_per_put", ".3f"),
    ("commits/s", "commits_per_s", ",.0f"),
    ("KB/commit", per_kb("bytes_per_commit"), ",.1f"),
    ("proc CPU %", "process_cpu_pct", ".0f"),
    ("steal %", "steal_cpu_pct", ".0f"),
    ("fsync ms", "fsync_ms_avg", ".2f"),
    ("syscall ms", "fdatasync_syscall_ms_avg", ".2f"),
    ("flush busy %", "flush_thread_busy_pct", ".0f"),
    ("dev MB/s", "device_mb_per_s", ",.1f"),
    ("dev B/B", "device_bytes_per_commitlog_byte", ".2f"),
    ("rec B", "record_bytes", ".0f"),
    ("errors", errors_cell, None),
    ("check", "check", None),
]
DISK_COLUMNS: list[Column] = [
    ("bytes/sync", "block_bytes", ",d"),
    ("MB/s", "mb_per_s", ",.1f"),
    ("MB/s 0.5s min-max", slice_range, None),
    ("syncs/s", "syncs_per_s", ",.0f"),
    ("sync p50 ms", "p50_ms", ".3f"),
    ("sync p99 ms", "p99_ms", ".3f"),
    ("dev B/B", "device_bytes_per_byte", ".2f"),
    ("dev writes/sync", "device_writes_per_sync", ".1f"),
    ("note", disk_note, None),
]


def print_columns(items: list[dict], columns: list[Column]) -> None:
    rows = []
    for item in items:
        values = ((what(item) if callable(what) else item[what], spec) for _, what, spec in columns)
        rows.append([v if spec is None else fmt(v, spec) for v, spec in values])
    print_table(rows, [header for header, _, _ in columns])


def print_results(runs: list[dict], ceiling: dict | None, disk: list[dict], args) -> None:
    out()
    out(
        f"== MessageStore put benchmark: {args.concurrency} concurrent writers, "
        f"{args.size} B bodies, {args.queues} queues, {args.duration:g} s measured "
        f"after {args.warmup:g} s warm-up =="
    )
    print_columns(runs, RUN_COLUMNS)
    out()
    out("where the time goes (measured window):")
    print_columns(runs, TIME_COLUMNS)
    for r in runs:
        if r["mode"] == "SYNC_FLUSH" and r["group_commit_rounds_per_s"] and r["loop_cpu_us_per_put"]:
            per_round = r["puts_per_s"] / r["group_commit_rounds_per_s"]
            loop_ms = per_round * r["loop_cpu_us_per_put"] / 1e3
            fs_ms = r["fsync_ms_avg"] or 0.0
            out(
                f"  SYNC_FLUSH round: {1e3 / r['group_commit_rounds_per_s']:.2f} ms measured for "
                f"{per_round:.0f} msgs; loop CPU {loop_ms:.2f} ms ({per_round:.0f} x "
                f"{r['loop_cpu_us_per_put']:.1f} us) + fsync round trip {fs_ms:.2f} ms = "
                f"{loop_ms + fs_ms:.2f} ms if the two take turns"
            )
        if r["stopped_early_for_disk_space"]:
            out(f"  NOTE: {r['mode']} stopped early: less than {MIN_FREE_BYTES // GiB} GiB free")
    if ceiling is not None:
        out()
        out(
            f"put-path CPU ceiling (loop thread, best of {args.ceiling_rounds} x "
            f"{ceiling['messages']:,} messages in chunks of {args.concurrency}, each stage "
            f"timed alone):"
        )
        out(f"  build message (producer/broker side) {ceiling['make_us']:7.2f} us")
        out(
            f"  put_nowait + commit (CommitLog)      {ceiling['put_us']:7.2f} us"
            f"   ({ceiling['put_faults']:.3f} page faults/msg)"
        )
        out(
            f"  dispatch (CQ unit + index)           {ceiling['dispatch_us']:7.2f} us"
            f"   ({ceiling['dispatch_faults']:.3f} page faults/msg)"
        )
        out(f"  writer task switch (sleep(0))        {ceiling['task_switch_us']:7.2f} us")
        out(
            f"  sum                                  {ceiling['sum_us']:7.2f} us"
            f"  -> ceiling {ceiling['ceiling_puts_per_s']:,.0f} puts/s on one core"
            f" (store alone, put+dispatch: {ceiling['store_only_puts_per_s']:,.0f}/s)"
            f"  [check: {ceiling['check']}]"
        )
    if disk:
        out()
        out(
            f"disk limit (sequential os.write + fdatasync into a preallocated file on the same "
            f"filesystem, {args.disk_seconds:g} s each; 'mmap': the bytes copied into a shared "
            f"mapping instead, as the CommitLog wrote them before its write buffer; dev B/B: bytes the block device "
            f"wrote per byte written):"
        )
        print_columns(disk, DISK_COLUMNS)
        for r in runs:
            ref = r.get("disk_ref")
            if ref is None:
                continue
            out(
                f"  {r['mode']}: store {r['mb_per_s']:,.1f} MB/s / disk "
                f"{ref['mb_per_s']:,.1f} MB/s at {ref['block_bytes']:,} B/sync = "
                f"{r['mb_per_s'] / ref['mb_per_s']:.2f}"
                + (
                    f"; store fsyncs/s / disk syncs/s = {r['fsyncs_per_s'] / ref['syncs_per_s']:.2f}"
                    if r["mode"] == "SYNC_FLUSH"
                    else ""
                )
            )


def json_figures(runs: list[dict], profile_runs: list[dict], ceiling: dict | None, disk: list[dict], args) -> dict:
    j: dict = {
        "concurrency": args.concurrency,
        "size": args.size,
        "queues": args.queues,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
    }
    for key in (
        "async_puts_per_s",
        "sync_puts_per_s",
        "sync_msgs_per_fsync",
        "dispatch_lag_ms_after_stop",
        "disk_limit_mb_per_s",
    ):
        j[key] = None
    lags = []
    for r in runs:
        p = "async" if r["mode"] == "ASYNC_FLUSH" else "sync"
        for k, v in r.items():
            if k in ("mode", "profile", "concurrency", "disk_ref"):
                continue
            j[f"{p}_{k}"] = v
        lag = r["dispatch_lag_ms_after_stop"]
        lags.append(math.inf if lag is None else lag)
        ref = r.get("disk_ref")
        if ref is not None:
            j[f"{p}_disk_ratio"] = r["mb_per_s"] / ref["mb_per_s"]
    if lags:
        worst = max(lags)
        j["dispatch_lag_ms_after_stop"] = None if math.isinf(worst) else worst
    sync = next((r for r in runs if r["mode"] == "SYNC_FLUSH"), None)
    if sync is not None and sync.get("disk_ref") is not None:
        j["disk_limit_mb_per_s"] = sync["disk_ref"]["mb_per_s"]
        j["disk_limit_syncs_per_s"] = sync["disk_ref"]["syncs_per_s"]
        j["disk_limit_bytes_per_sync"] = sync["disk_ref"]["block_bytes"]
    elif disk:
        j["disk_limit_mb_per_s"] = max(d["mb_per_s"] for d in disk)
    for d in disk:
        j[f"disk_{d['label'].replace(' ', '_').replace('-', '_')}_mb_per_s"] = d["mb_per_s"]
        j[f"disk_{d['label'].replace(' ', '_').replace('-', '_')}_syncs_per_s"] = d["syncs_per_s"]
    if ceiling is not None:
        for k, v in ceiling.items():
            j[f"ceiling_{k}"] = v
    for r in profile_runs:
        p = "async" if r["mode"] == "ASYNC_FLUSH" else "sync"
        j[f"profile_{p}_puts_per_s"] = r["puts_per_s"]
    return j


# ---------------------------------------------------------------------------- main
def parse_modes(s: str) -> list[FlushDiskType]:
    modes = []
    for tok in s.replace(" ", "").split(","):
        if not tok:
            continue
        m = MODE_NAMES.get(tok.lower())
        if m is None:
            raise argparse.ArgumentTypeError(f"unknown flush mode {tok!r} (async, sync)")
        if m not in modes:
            modes.append(m)
    if not modes:
        raise argparse.ArgumentTypeError("no flush mode given")
    return modes


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    ap.add_argument(
        "--modes", type=parse_modes, default="async,sync", help="flush modes to run, comma separated: async, sync"
    )
    ap.add_argument("--concurrency", type=int, default=256, help="writer tasks, i.e. puts in flight")
    ap.add_argument("--size", type=int, default=1024, help="message body bytes")
    ap.add_argument("--queues", type=int, default=8, help="queues of the topic (round robin)")
    ap.add_argument("--keys", action="store_true", help="also set a KEYS property (indexed)")
    ap.add_argument("--duration", type=float, default=20.0, help="measured seconds per mode")
    ap.add_argument("--warmup", type=float, default=3.0, help="warm-up seconds per mode")
    ap.add_argument("--disk-seconds", type=float, default=3.0, help="seconds per disk-limit measurement")
    ap.add_argument(
        "--ceiling-messages",
        type=int,
        default=100_000,
        help="messages per round of the put-path ceiling measurement (0: skip)",
    )
    ap.add_argument("--ceiling-rounds", type=int, default=3)
    ap.add_argument(
        "--profile", action="store_true", help="also run each mode under cProfile and print the top 25 by tottime"
    )
    ap.add_argument("--profile-seconds", type=float, default=5.0)
    ap.add_argument("--store-dir", metavar="DIR", help="keep the stores: one store root per run under DIR")
    ap.add_argument(
        "--tmp-dir",
        metavar="DIR",
        default=None,
        help="where temporary stores and the disk-limit file go "
        "(default: the system temp dir; ignored for stores with --store-dir)",
    )
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object on the last output line")
    args = ap.parse_args()
    if isinstance(args.modes, str):
        args.modes = parse_modes(args.modes)
    if args.concurrency < 1 or args.size < 0 or args.queues < 1 or args.duration <= 0:
        ap.error("--concurrency and --queues must be >= 1, --size >= 0, --duration > 0")
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

    t_begin = time.perf_counter()
    if args.store_dir:
        base = os.path.abspath(args.store_dir)
        os.makedirs(base, exist_ok=True)
        keep = True
    else:
        base = tempfile.mkdtemp(prefix="rmq-store-bench-", dir=args.tmp_dir)
        keep = False
    free = shutil.disk_usage(base).free
    out(
        f"store root(s) under {base} ({free / GiB:.1f} GiB free); "
        f"CPUs: {os.cpu_count()}; python {sys.version.split()[0]}, uvloop {uvloop.__version__}"
    )
    if free < MIN_FREE_BYTES + 2 * GiB:
        out(
            f"not enough disk space under {base}: {free / GiB:.1f} GiB free, "
            f"need at least {(MIN_FREE_BYTES + 2 * GiB) / GiB:.0f} GiB"
        )
        return 2

    def store_root(name: str) -> str:
        root = os.path.join(base, name)
        if os.path.exists(root) and os.listdir(root):
            raise SystemExit(f"{root} exists and is not empty; give an empty --store-dir")
        return root

    def run_loop(coro):
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)

    def disk_cap() -> int:
        space = shutil.disk_usage(base).free - MIN_FREE_BYTES
        return max(64 << 20, min(4 * GiB, space))

    SYNC_TIMER.install()
    runs: list[dict] = []
    profile_runs: list[dict] = []
    ceiling = None
    disk: list[dict] = []
    try:
        for mode in args.modes:
            name = mode.value.lower()
            out(
                f"running {mode.value}: {args.concurrency} writers, {args.warmup:g} s warm-up + {args.duration:g} s ..."
            )
            r = run_loop(run_mode(mode, store_root(name), args, base, args.duration, args.warmup))
            out(
                f"  {r['puts_per_s']:,.0f} puts/s, {r['mb_per_s']:,.1f} MB/s, "
                f"lag after stop {fmt(r['dispatch_lag_ms_after_stop'], ',.1f', 'NOT CAUGHT UP')} ms, "
                f"check {r['check']}"
            )
            runs.append(r)
            if not keep:
                shutil.rmtree(os.path.join(base, name), ignore_errors=True)
            if mode is FlushDiskType.SYNC_FLUSH and args.disk_seconds > 0 and r["bytes_per_fsync"]:
                # right after the SYNC run: the shared disk's speed drifts over minutes
                block = int(round(r["bytes_per_fsync"]))
                out(f"measuring the disk's own limit at {block:,} bytes per fdatasync ...")
                d = disk_limit(base, block, args.disk_seconds, disk_cap())
                d["label"] = "sync-run"
                disk.append(d)
                d = disk_limit(base, block, args.disk_seconds, disk_cap(), use_mmap=True)
                d["label"] = "sync-run mmap"
                disk.append(d)

        if args.ceiling_messages > 0:
            out(f"measuring the put-path CPU ceiling ({args.ceiling_rounds} x {args.ceiling_messages:,} messages) ...")
            ceiling = run_loop(run_ceiling(store_root("ceiling"), args, args.ceiling_messages))
            if not keep:
                shutil.rmtree(os.path.join(base, "ceiling"), ignore_errors=True)

        if args.disk_seconds > 0:
            out("measuring the disk's own limit ...")
            for block, label in ((1024, "1KiB"), (4 << 20, "4MiB")):
                d = disk_limit(base, block, args.disk_seconds, disk_cap())
                d["label"] = label
                disk.append(d)
            by_label = {d["label"]: d for d in disk}
            for r in runs:
                r["disk_ref"] = by_label.get("sync-run" if r["mode"] == "SYNC_FLUSH" else "4MiB")

        if args.profile:
            for mode in args.modes:
                name = "profile-" + mode.value.lower()
                out(f"profiling {mode.value} for {args.profile_seconds:g} s ...")
                pr = run_loop(
                    run_mode(
                        mode, store_root(name), args, base, args.profile_seconds, min(args.warmup, 1.0), profile=True
                    )
                )
                profile_runs.append(pr)
                if not keep:
                    shutil.rmtree(os.path.join(base, name), ignore_errors=True)
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)

    print_results(runs, ceiling, disk, args)
    for pr in profile_runs:
        out()
        out(
            f"cProfile, {pr['mode']}, {pr['window_s']:.1f} s "
            f"({pr['puts_per_s']:,.0f} puts/s under the profiler; loop CPU "
            f"{pr['loop_cpu_pct']:.0f}%), top 25 by tottime:"
        )
        out(pr["profile"].rstrip())
    out()
    out(
        f"total time {time.perf_counter() - t_begin:.0f} s"
        + (f"; stores kept under {base}" if keep else "; temporary stores removed")
    )
    if args.json:
        j = json_figures(runs, profile_runs, ceiling, disk, args)
        for r in runs:
            r.pop("disk_ref", None)
        sys.stderr.flush()
        sys.stdout.flush()
        sys.stdout.write(json.dumps(j, separators=(",", ":"), default=str) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
