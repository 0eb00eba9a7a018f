"""Rebuild-cq benchmark: the Spark job against single-process scans and `cat`, on the
same gigabyte of CommitLog.

    python bench/rebuild_bench.py                  # 1 GiB, 4 files of 256 MiB, local[2]
    python bench/rebuild_bench.py --gib 2 --file-size 1g --split-size 64m --json
    python bench/rebuild_bench.py --dir /tmp/rb --keep   # keep the generated store

1. Generates the CommitLog with the record codec straight into files (no broker):
   1 KiB bodies, 50 topics x 8 queues round robin, UNIQ_KEY / TAGS / WAIT properties as a
   Java producer sends them; whole files only (the last one ends with a BLANK).
2. `cat FILES > /dev/null`, twice: the second (page cache warm, as for every run
   below) is the I/O limit; `dd iflag=direct` reads them past the page cache (the disk).
3. One Python process, the broker's own way: record after record through
   check_message_and_return_size (what a restarting broker's single-threaded re-dispatch
   does per record), units collected in lists.
4. One Python process, the job's scan (spark/scan.py) over each whole file.
5. The Spark job on --master (default local[2]) writing ConsumeQueues to a fresh
   directory, --runs times (3); Spark's start-up (the JVM, the context and its Python
   workers) is timed on its own and excluded. The median, best and worst run are
   summarised: on a machine shared with other work, runs differ.

MB = 10^6 bytes of CommitLog; records/s counts every record. Nothing here is a test.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from rmq.protocol.record import check_message_and_return_size
from rmq.store.config import MessageStoreConfig
from spark.commitlog_files import check_files, list_local, make_splits, parse_size
from spark.rebuild_consume_queue import Options, Rebuild, start_spark
from spark.scan import ScanOptions, scan_local_split
from tests.spark.commitlog_gen import CommitLogWriter

TOPICS, QUEUES, BODY = 50, 8, 1024


def generate(store: str, total: int, file_size: int) -> tuple[int, int, float]:
    """Whole files of records until total bytes are reached: (records, bytes, seconds)."""
    t0 = time.perf_counter()
    w = CommitLogWriter(os.path.join(store, "commitlog"), file_size, keep=False)
    body = os.urandom(BODY)
    topics = [f"BenchTopic{i:02d}" for i in range(TOPICS)]
    tags = ["TagA", "TagB", "TagC"]
    nfiles = -(-total // file_size)
    n = 0
    size = 0
    ts = 1_700_000_000_000
    prefix = "7F000001" + "1A2B" + "3C4D5E6F"
    # every record has the same size: stop before one would open file nfiles + 1
    while not (w.offset // file_size == nfiles - 1 and w.offset % file_size + size + 8 > file_size):
        q = n % (TOPICS * QUEUES)
        props = {"UNIQ_KEY": f"{prefix}{n:016X}", "WAIT": "true", "TAGS": tags[n % 3]}
        size = w.append(topics[q // QUEUES], q % QUEUES, body, props, store_timestamp=ts + n // 100).size
        n += 1
    w.close(blank=True)
    return n, nfiles * file_size, time.perf_counter() - t0


def run_cat(files: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run("cat " + " ".join(files) + " > /dev/null", shell=True, check=True)
    return time.perf_counter() - t0


def run_dd_direct(files: list[str]) -> float | None:
    """The files read past the page cache (O_DIRECT): the disk's own read rate."""
    t0 = time.perf_counter()
    for f in files:
        r = subprocess.run(["dd", f"if={f}", "of=/dev/null", "bs=4M", "iflag=direct"], capture_output=True)
        if r.returncode:
            return None  # a file system without O_DIRECT (tmpfs)
    return time.perf_counter() - t0


def run_dispatch_loop(files: list[str], levels: tuple[int, ...]) -> tuple[int, float]:
    """Record by record, as the broker's dispatch reads them (no CRC)."""
    t0 = time.perf_counter()
    n = 0
    cache: dict[str, int] = {}
    for path in files:
        with open(path, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        units: dict[tuple[str, int], list[tuple[int, int, int, int]]] = {}
        pos = 0
        end = len(mm)
        while pos + 8 <= end:
            size, req = check_message_and_return_size(mm, pos, False, levels, cache)
            if req is None:
                break
            units.setdefault((req.topic, req.queue_id), []).append(
                (req.consume_queue_offset, req.commit_log_offset, req.msg_size, req.tags_code)
            )
            n += 1
            pos += size
        mm.close()
    return n, time.perf_counter() - t0


def run_scan_one_process(store: str, levels: tuple[int, ...]) -> tuple[int, float]:
    files, size, _ = check_files(list_local(store), store, None)
    t0 = time.perf_counter()
    n = 0
    for s in make_splits(files, size, size, False, True):
        n += scan_local_split(s, ScanOptions(levels)).records
    return n, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=1.0, help="CommitLog GiB (default 1)")
    ap.add_argument("--file-size", default="256m", help="CommitLog file size (default 256m)")
    ap.add_argument("--split-size", default="128m", help="--split-size of the job")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--runs", type=int, default=3, help="Spark runs (default 3)")
    ap.add_argument("--dir", help="work directory (default: a temp dir, removed)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--json", action="store_true", help="one JSON object on the last line")
    a = ap.parse_args()
    load_before = os.getloadavg()[0]
    work = a.dir or tempfile.mkdtemp(prefix="rebuild-bench-")
    os.makedirs(work, exist_ok=True)
    store = os.path.join(work, "store")
    file_size = parse_size(a.file_size)
    try:
        if os.path.isdir(store):
            shutil.rmtree(store)
        records, nbytes, gen_s = generate(store, int(a.gib * (1 << 30)), file_size)
        files = sorted(os.path.join(store, "commitlog", n) for n in os.listdir(os.path.join(store, "commitlog")))
        print(
            f"generated {records:,} records, {nbytes / 2**30:.2f} GiB in {len(files)} files "
            f"in {gen_s:.1f} s ({nbytes / gen_s / 1e6:.0f} MB/s)",
            flush=True,
        )
        levels = tuple(MessageStoreConfig().delay_levels_ms)
        rows = []

        run_cat(files)
        cat_s = run_cat(files)
        rows.append(("cat > /dev/null (page cache warm)", cat_s, records))
        dd_s = run_dd_direct(files)
        if dd_s is not None:
            rows.append(("dd iflag=direct (the disk, no page cache)", dd_s, records))
        n, s = run_dispatch_loop(files, levels)
        assert n == records, (n, records)
        rows.append(("python, 1 process: broker dispatch loop", s, n))
        n, s = run_scan_one_process(store, levels)
        assert n == records, (n, records)
        rows.append(("python, 1 process: the job's scan", s, n))

        t0 = time.perf_counter()
        sc, _ = start_spark(a.master)
        startup = time.perf_counter() - t0
        cores = sc.defaultParallelism
        totals = []
        for run in range(1, a.runs + 1):
            out = os.path.join(work, f"out{run}")
            shutil.rmtree(out, ignore_errors=True)
            opts = Options(
                store,
                out,
                a.master,
                None,
                parse_size(a.split_size),
                None,
                False,
                False,
                None,
                False,
                True,
                MessageStoreConfig(),
                None,
            )
            rb = Rebuild(opts, out=open(os.devnull, "w"))
            t0 = time.perf_counter()
            code = rb.run()
            total = time.perf_counter() - t0
            rep = rb.report
            assert code == 0 and rep.records == records and rep.units == records, rep
            rows.append((f"spark {a.master} run {run}: scan", rep.scan_seconds, records))
            rows.append((f"spark {a.master} run {run}: scan + write CQs", total, records))
            totals.append(total)
            shutil.rmtree(out, ignore_errors=True)
        sc.stop()
    finally:
        if not a.keep and not a.dir:
            shutil.rmtree(work, ignore_errors=True)

    print(
        f"\nCommitLog: {nbytes / 1e6:,.0f} MB, {records:,} records of {nbytes // records} B; "
        f"{os.cpu_count()} CPUs (load average {load_before:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after); Spark start-up {startup:.1f} s ({cores} cores, "
        f"Python workers started; not counted)\n"
    )
    w = max(len(r[0]) for r in rows)
    print(f"{'run':<{w}}  {'seconds':>8}  {'MB/s':>8}  {'records/s':>11}  {'vs cat':>7}")
    for name, s, n in rows:
        print(f"{name:<{w}}  {s:>8.2f}  {nbytes / s / 1e6:>8.0f}  {n / s:>11,.0f}  {cat_s / s:>6.0%}")
    totals.sort()
    med = totals[len(totals) // 2]
    print(
        f"\nspark {a.master}, scan + write CQs over {len(totals)} runs: median "
        f"{nbytes / med / 1e6:.0f} MB/s, best {nbytes / totals[0] / 1e6:.0f} MB/s, worst "
        f"{nbytes / totals[-1] / 1e6:.0f} MB/s (goal: 250 MB/s)"
    )
    if a.json:
        print(
            json.dumps(
                {
                    "bytes": nbytes,
                    "records": records,
                    "startup_s": startup,
                    "rows": [
                        {"run": r[0], "seconds": r[1], "mb_s": nbytes / r[1] / 1e6, "records_s": r[2] / r[1]}
                        for r in rows
                    ],
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
