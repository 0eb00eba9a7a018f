"""Spark job: rebuild ConsumeQueues (and the index) from a store's CommitLog.

    spark-submit --py-files rmq.zip spark/rebuild_consume_queue.py --store DIR --out DIR
    rmq rebuild-cq --store DIR --out DIR [--master local[*]] [--topics T1,T2]
                   [--split-size 128m] [--broker-conf FILE] [--verify EXISTING_CQ_DIR] [--index]

Stages (the README's "Rebuilding ConsumeQueues with Spark" has the whole story):

1. scan: every CommitLog file is cut into byte ranges (--split-size); a task per range
   finds and proves its first record boundary and turns its records into ConsumeQueue
   units grouped by queue (spark/scan.py). Results stay cached on the executors; the
   driver collects their summaries and checks that the ranges join up record by record
   (spark/chain.py).
2. queues: the units are shuffled by (topic, queueId) into partitions balanced by unit
   count; each queue is laid out as the broker lays it out (spark/cq_files.py) and
   written, and/or compared with an existing consumequeue/ (--verify).
3. index (--index): keys are numbered in CommitLog order, which fixes the file each
   lands in; one task per index file (spark/index_files.py).

Files go to a temporary directory under --out and are renamed into place at the end,
so a failed run leaves no half-written consumequeue/. Local --store paths are read
through mmap; a Hadoop URI (hdfs://, s3a://, file://...) through Spark's
FixedLengthBinaryInputFormat. Exit codes: 0 done, 1 --verify found differences,
2 bad input, 3 the CommitLog has an invalid record (or ends) before its last file.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, TextIO

if __name__ == "__main__" and __package__ in (None, ""):
    # spark-submit runs this file as a script: make `spark` and `rmq` importable from
    # the checkout when they are not installed or shipped with --py-files.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

from rmq.common.properties import PropertiesError, apply_properties, parse_properties_text
from rmq.store.config import MessageStoreConfig
from spark.chain import Chain, assemble
from spark.commitlog_files import CommitLogFile, RebuildError, check_files, list_local, make_splits, parse_size
from spark.cq_files import QueueDiff, existing_queues, layout_queue, verify_queue, write_queue
from spark.index_files import BuiltIndexFile, KeyChunk, build_file, file_names, plan, route
from spark.progress import Progress, fmt_bytes, fmt_rate
from spark.scan import ScanOptions, ScanResult, Split, Stop, scan_buffer, scan_local_split

if TYPE_CHECKING:
    from pyspark import RDD, Accumulator, SparkContext

EXIT_OK, EXIT_DIFF, EXIT_USAGE, EXIT_CUT = 0, 1, 2, 3
FIXED_LENGTH_FORMAT = "org.apache.spark.input.FixedLengthBinaryInputFormat"
RECORD_LENGTH_KEY = "org.apache.spark.input.FixedLengthBinaryInputFormat.recordLength"
# Segment ids: a Hadoop split's is file << 32 | partition; driver-made ones start here.
EXTRA_SEG_BASE = 1 << 62
# Below this many bytes of CommitLog per Spark task, ranges are grouped into tasks.
MIN_TASK_BYTES = 16 << 20
# ConsumeQueue units per writing task (2M units: 40 MB of ConsumeQueue), at least one
# task per core.
UNITS_PER_TASK = 2_000_000
# Spark's own logging: errors only, on stderr (the job prints its progress itself).
LOG4J2_PROPERTIES = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
# pyspark sets these to WARN, saying so on stderr, unless configured
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
logger.pygw.name = org.apache.spark.api.python.PythonGatewayServer
logger.pygw.level = error
"""
# The JVM announces the incubator module Spark's launcher always adds; nothing else
# on its stderr is dropped.
_JVM_NOISE = (b"WARNING: Using incubator modules",)


# ----------------------------------------------------------------------------- options
@dataclass
class Options:
    store: str
    out: str | None
    master: str | None
    topics: frozenset[str] | None
    split_size: int
    verify: str | None
    index: bool
    crc_all: bool
    write_on: str | None  # "executors" | "driver" | None (by master)
    spark_ui: bool
    quiet: bool
    config: MessageStoreConfig
    commitlog_size: int | None  # mappedFileSizeCommitLog if the broker.conf sets it
    broker_conf: str | None = None

    @property
    def hadoop(self) -> bool:
        return "://" in self.store


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rmq rebuild-cq",
        description="Rebuild ConsumeQueue files (and the index) from a store's CommitLog "
        "with Spark, and/or compare them with existing ones.",
    )
    p.add_argument(
        "--store",
        required=True,
        help="store root holding commitlog/ (a local path, or a Hadoop URI such as hdfs://nn/rocketmq/store)",
    )
    p.add_argument(
        "--out",
        help="output root: writes OUT/consumequeue/<topic>/<queueId>/ "
        "(and OUT/index/ with --index); optional with --verify",
    )
    p.add_argument("--master", help="Spark master (default local[*]; under spark-submit, its --master)")
    p.add_argument("--topics", help="only these topics (comma-separated)")
    p.add_argument("--split-size", default="128m", help="bytes of CommitLog per task (default 128m; k/m/g suffixes)")
    p.add_argument(
        "--broker-conf",
        help="the broker.conf the store was written with "
        "(messageDelayLevel, mappedFileSizeConsumeQueue, "
        "mappedFileSizeCommitLog, maxHashSlotNum, "
        "maxIndexNum, checkCRCOnRecover)",
    )
    p.add_argument(
        "--verify",
        metavar="EXISTING_CQ_DIR",
        help="compare the rebuilt units with this consumequeue/ directory, unit by unit; exit code 1 on any difference",
    )
    p.add_argument("--index", action="store_true", help="rebuild the IndexFiles too")
    p.add_argument(
        "--check-crc",
        choices=("recovery", "all"),
        default="recovery",
        help="recovery (default): body CRC of the records in the last three "
        "files, as RocketMQ's recovery with checkCRCOnRecover; all: every "
        "record",
    )
    p.add_argument(
        "--write-on",
        choices=("executors", "driver"),
        help="who writes the files (default: executors for local masters, the driver otherwise)",
    )
    p.add_argument("--spark-ui", action="store_true", help="enable the Spark web UI")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def options_from_args(a: argparse.Namespace) -> Options:
    cfg = MessageStoreConfig()
    commitlog_size = None
    if a.broker_conf:
        try:
            with open(a.broker_conf, encoding="utf-8") as f:
                props = parse_properties_text(f.read())
            apply_properties(cfg, props)
            cfg.validate()
        except OSError as e:
            raise RebuildError(f"cannot read --broker-conf {a.broker_conf}: {e.strerror}") from None
        except PropertiesError as e:
            raise RebuildError(f"--broker-conf {a.broker_conf}: {e}") from None
        if "mappedFileSizeCommitLog" in props:
            commitlog_size = cfg.mappedFileSizeCommitLog
    if not a.out and not a.verify:
        raise RebuildError("nothing to do: give --out DIR, --verify EXISTING_CQ_DIR or both")
    topics = None
    if a.topics is not None:
        topics = frozenset(t.strip() for t in a.topics.split(",") if t.strip())
        if not topics:
            raise RebuildError("--topics names no topic")
    if a.index and not a.out:
        raise RebuildError("--index needs --out")
    if a.verify and not os.path.isdir(a.verify):
        raise RebuildError(f"--verify {a.verify}: not a directory")
    # Executors resolve paths from their own working directory: make them absolute.
    store = a.store if "://" in a.store else os.path.abspath(a.store)
    out = a.out if a.out is None or "://" in a.out else os.path.abspath(a.out)
    verify = os.path.abspath(a.verify) if a.verify else None
    return Options(
        store,
        out,
        a.master,
        topics,
        parse_size(a.split_size),
        verify,
        a.index,
        a.check_crc == "all",
        a.write_on,
        a.spark_ui,
        a.quiet,
        cfg,
        commitlog_size,
        a.broker_conf,
    )


# ----------------------------------------------------------------------------- spark
def _is_local(master: str | None) -> bool:
    return master is None or master == "local" or master.startswith("local[") or master.startswith("local-cluster")


def start_spark(master: str | None = None, spark_ui: bool = False) -> tuple[SparkContext, bool]:
    """(SparkContext, created): the active context if there is one (under spark-submit,
    or a caller's), else a new one on master (local[*] by default), quiet and without
    the web UI unless spark_ui."""
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    master = master or (None if submitted else "local[*]")
    if _is_local(master) and not submitted:
        # Python workers must import rmq: use this very interpreter (a venv need not be
        # activated), and keep a local run on the loopback interface.
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark import SparkConf, SparkContext

    active = SparkContext._active_spark_context
    if active is not None:
        return active, False
    conf = SparkConf().setAppName("rmq-rebuild-cq")
    if master:
        conf.setMaster(master)
    conf.set("spark.ui.enabled", "true" if spark_ui else "false")
    conf.set("spark.ui.showConsoleProgress", "false")
    if submitted:
        sc = SparkContext.getOrCreate(conf)
    else:
        fd, log_conf = tempfile.mkstemp(prefix="rmq-rebuild-log4j2-", suffix=".properties")
        with os.fdopen(fd, "w") as f:
            f.write(LOG4J2_PROPERTIES)
        conf.set("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log_conf}")
        if _is_local(master):
            conf.set("spark.driver.host", "127.0.0.1")
            conf.set("spark.driver.bindAddress", "127.0.0.1")
        from pyspark.java_gateway import launch_gateway

        try:
            gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})
            threading.Thread(
                target=_forward_jvm_stderr, args=(gateway.proc.stderr,), name="jvm-stderr", daemon=True
            ).start()
            sc = SparkContext(conf=conf, gateway=gateway)
        finally:
            os.unlink(log_conf)  # read once, at the JVM's start
    sc.setLogLevel("ERROR")
    if not _is_local(sc.master) and not submitted:
        sc.addPyFile(_package_zip())
    # Start the Python workers (and their imports) now: part of start-up, not of the scan.
    n = sc.defaultParallelism
    sc.parallelize(range(n), n).foreach(_warm_up)
    return sc, True


def _warm_up(_: int) -> None:
    import spark.scan  # noqa: F401


def _forward_jvm_stderr(stream: IO[bytes]) -> None:
    out = sys.stderr.buffer
    for line in iter(stream.readline, b""):
        if not line.startswith(_JVM_NOISE):
            out.write(line)
            out.flush()


def _package_zip() -> str:
    """rmq and spark as one zip for executors of a real cluster (they need numpy)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(tempfile.mkdtemp(prefix="rmq-rebuild-"), "rmq_spark.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for pkg in ("rmq", "spark"):
            for d, _dirs, files in os.walk(os.path.join(root, pkg)):
                for f in files:
                    if f.endswith(".py"):
                        full = os.path.join(d, f)
                        z.write(full, os.path.relpath(full, root))
    return path


# ----------------------------------------------------------------------------- hadoop input
class HadoopFiles:
    """CommitLog files behind a Hadoop URI, through the driver's JVM."""

    def __init__(self, sc: SparkContext) -> None:
        self.sc = sc
        self.jvm: Any = sc._jvm  # py4j JVMView, set once the context runs
        self.hconf = sc._jsc.hadoopConfiguration()

    def _fs(self, uri: str) -> tuple[Any, Any]:  # py4j: Hadoop Path, FileSystem
        p = self.jvm.org.apache.hadoop.fs.Path(uri)
        return p, p.getFileSystem(self.hconf)

    def list(self, store: str) -> list[tuple[str, str, int]]:
        root, fs = self._fs(store)
        if not fs.exists(root):
            raise RebuildError(f"store {store} does not exist")
        d, _ = self._fs(store.rstrip("/") + "/commitlog")
        if not fs.exists(d):
            raise RebuildError(f"{store} has no CommitLog: {d.toString()} does not exist")
        out = []
        for st in fs.listStatus(d):
            if st.isFile():
                out.append((st.getPath().getName(), st.getPath().toString(), st.getLen()))
        return sorted(out)

    def read(self, uri: str, pos: int, n: int) -> bytes:
        p, fs = self._fs(uri)
        stream = fs.open(p)
        try:
            stream.seek(pos)
            # a byte[] returned by a call crosses py4j as bytes (one passed in does not
            # come back filled)
            return bytes(stream.readNBytes(n))
        finally:
            stream.close()


def _chunk_length(file_len: int, split_size: int) -> int:
    """Record length for FixedLengthBinaryInputFormat: divides the file (a partial last
    record would fail the read) and the split size, at most 1 MiB."""
    g = math.gcd(file_len, split_size, 1 << 20)
    if g < 512:
        raise RebuildError(
            f"reading through Hadoop needs CommitLog files whose length and --split-size "
            f"share a factor of at least 512 bytes (file {file_len} bytes, split "
            f"{split_size}); copy the store to a local path instead"
        )
    return g


def _scan_hadoop_partition(
    f: CommitLogFile,
    fi: int,
    file_size: int,
    chunk: int,
    crc: bool,
    recovery: bool,
    opts: ScanOptions,
    index: int,
    it: Iterator[tuple[int, Any]],
) -> Iterator[ScanResult]:
    parts: list[Any] = []
    first_key = None
    for k, v in it:
        if first_key is None:
            first_key = k
        parts.append(v)
    if first_key is None:
        return
    buf = b"".join(parts)
    del parts
    lo = first_key * chunk
    hi = lo + len(buf)
    split = Split((fi << 32) | index, fi, f.path, f.start, f.length, file_size, lo, hi, crc, recovery)
    yield scan_buffer(buf, lo, split, opts, at_file_end=hi >= f.length)


class _BytesPerFile:
    """Accumulator of bytes scanned per CommitLog file (for "files done")."""

    def zero(self, value: dict[int, int]) -> dict[int, int]:
        return {}

    def addInPlace(self, a: dict[int, int], b: dict[int, int]) -> dict[int, int]:
        for k, v in b.items():
            a[k] = a.get(k, 0) + v
        return a


# ----------------------------------------------------------------------------- queue stage
@dataclass
class QueueOutcome:
    topic: str
    queue_id: int
    units: int
    min_offset: int
    max_offset: int
    files: int
    anomalies: int
    diff: QueueDiff | None


def finish_queues(
    items: Iterable[tuple[tuple[str, int], Iterable[np.ndarray]]],
    cq_root: str | None,
    verify_root: str | None,
    cq_file_size: int,
    commitlog_min: int,
) -> Iterator[QueueOutcome]:
    """Lay out, write and/or verify each queue of a partition."""
    for (topic, qid), chunks in items:
        rows = np.concatenate(list(chunks))
        rows = rows[np.argsort(rows["phy"], kind="stable")]
        layout = layout_queue(rows, cq_file_size)
        files = write_queue(cq_root, topic, qid, layout, cq_file_size) if cq_root else 0
        diff = verify_queue(verify_root, topic, qid, layout, cq_file_size, commitlog_min) if verify_root else None
        yield QueueOutcome(
            topic,
            qid,
            layout.units.shape[0] - layout.blanks,
            layout.min_offset,
            layout.max_offset,
            files,
            layout.anomalies,
            diff,
        )


def _balance(sizes: dict[tuple[str, int], int], parts: int) -> dict[tuple[str, int], int]:
    """Queues to partitions, biggest first onto the lightest partition."""
    load = [0] * parts
    out: dict[tuple[str, int], int] = {}
    for key, n in sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0])):
        i = min(range(parts), key=load.__getitem__)
        out[key] = i
        load[i] += n + 1
    return out


def _partition_of(assign: dict[tuple[str, int], int], key: tuple[str, int]) -> int:
    return assign[key]


def _index_chunks(starts: dict[int, int], per_file: int, r: ScanResult) -> Iterable[tuple[int, KeyChunk]]:
    if r.index is None or not r.keys:
        return iter(())
    h, phy, ts = r.index
    return route(starts[r.seg_id], h, phy, ts, per_file)


def _build_index(
    tmp: str, slots: int, num: int, items: Iterable[tuple[int, Iterable[KeyChunk]]]
) -> Iterator[BuiltIndexFile]:
    for file_no, chunks in items:
        built = build_file(os.path.join(tmp, f"index-{file_no:08d}"), file_no, chunks, slots, num)
        if built is not None:
            yield built


# ----------------------------------------------------------------------------- the job
@dataclass
class Report:
    files: int = 0
    bytes: int = 0
    records: int = 0
    units: int = 0
    queues: int = 0
    cq_files: int = 0
    index_files: int = 0
    keys: int = 0
    diffs: list[QueueDiff] = field(default_factory=list)
    verified_queues: int = 0
    exit_code: int = EXIT_OK
    startup_seconds: float = 0.0  # Spark start-up (0 when a context was running)
    scan_seconds: float = 0.0  # stage 1 (scan and the chain check)
    queue_seconds: float = 0.0  # stage 2 (shuffle, layout, write/verify)
    index_seconds: float = 0.0  # stage 3


class Rebuild:
    def __init__(self, opts: Options, out: TextIO | None = None) -> None:
        self.opts = opts
        self.out = out or sys.stdout
        self.progress = Progress(enabled=not opts.quiet)
        self.cfg = opts.config
        self.scan_opts = ScanOptions(tuple(self.cfg.delay_levels_ms), opts.topics, opts.index)
        self.report = Report()

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    # --- stage 0: inputs and outputs, before Spark starts where possible ---
    def check_outputs(self) -> str | None:
        out = self.opts.out
        if out is None:
            return None
        if "://" in out:
            raise RebuildError(f"--out {out}: must be a local (or mounted) directory")
        for sub in ("consumequeue",) + (("index",) if self.opts.index else ()):
            p = os.path.join(out, sub)
            if os.path.isdir(p) and os.listdir(p):
                raise RebuildError(
                    f"{p} exists and is not empty; remove it or choose another --out (nothing was written)"
                )
            if os.path.exists(p) and not os.path.isdir(p):
                raise RebuildError(f"{p} exists and is not a directory")
        try:
            os.makedirs(out, exist_ok=True)
            tmp = tempfile.mkdtemp(prefix=".rebuild-cq-", dir=out)
        except OSError as e:
            raise RebuildError(f"cannot create --out {out}: {e.strerror}") from None
        os.makedirs(os.path.join(tmp, "consumequeue"))
        if self.opts.index:
            os.makedirs(os.path.join(tmp, "index"))
        return tmp

    def run(self) -> int:
        opts = self.opts
        files = entries = None
        if not opts.hadoop:
            entries = list_local(opts.store)
            files, file_size, notes = check_files(entries, os.path.join(opts.store, "commitlog"), opts.commitlog_size)
        tmp = self.check_outputs()
        try:
            t0 = time.monotonic()
            sc, created = start_spark(opts.master, opts.spark_ui)
            self.report.startup_seconds = time.monotonic() - t0 if created else 0.0
            self.say(f"spark: {sc.master} ({sc.defaultParallelism} cores) started in {time.monotonic() - t0:.1f} s")
            hadoop = HadoopFiles(sc) if opts.hadoop else None
            if hadoop is not None:
                entries = hadoop.list(opts.store)
                files, file_size, notes = check_files(
                    entries, opts.store.rstrip("/") + "/commitlog", opts.commitlog_size
                )
            assert files is not None
            for n in notes:
                self.say(f"note: {n}")
            try:
                code = self._run(sc, hadoop, files, file_size, tmp)
            finally:
                if created:
                    sc.stop()
            if tmp is not None:
                self._install(tmp)
                tmp = None
            return code
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

    def _install(self, tmp: str) -> None:
        assert self.opts.out is not None
        for sub in ("consumequeue", "index"):
            src = os.path.join(tmp, sub)
            if not os.path.isdir(src):
                continue
            dst = os.path.join(self.opts.out, sub)
            if os.path.isdir(dst):
                os.rmdir(dst)  # empty: checked before the run
            os.rename(src, dst)
        os.rmdir(tmp)

    def _run(
        self, sc: SparkContext, hadoop: HadoopFiles | None, files: list[CommitLogFile], file_size: int, tmp: str | None
    ) -> int:
        from pyspark import StorageLevel

        opts = self.opts
        rep = self.report
        rep.files = len(files)
        total_bytes = sum(f.length for f in files)
        splits = make_splits(files, file_size, opts.split_size, opts.crc_all, self.cfg.checkCRCOnRecover)
        acc_bytes = sc.accumulator(0)
        acc_records = sc.accumulator(0)
        acc_tasks = sc.accumulator(0)
        acc_files: Accumulator[dict[int, int]] = sc.accumulator(
            {},
            _BytesPerFile(),  # type: ignore[arg-type]  # AccumulatorParam by duck typing: pyspark is imported lazily
        )
        scan_opts = self.scan_opts

        def counted(r: ScanResult) -> ScanResult:
            acc_bytes.add(r.hi - r.lo)
            acc_records.add(r.records)
            acc_tasks.add(1)
            acc_files.add({r.file_idx: r.hi - r.lo})
            return r

        if hadoop is None:
            scan = functools.partial(scan_local_split, opts=scan_opts)
            # A Spark task costs milliseconds of its own: tiny ranges share tasks.
            tasks = min(len(splits), max(sc.defaultParallelism * 4, total_bytes // MIN_TASK_BYTES))
            rdd = sc.parallelize(splits, tasks).map(lambda s: counted(scan(s)))
            ntasks = len(splits)
        else:
            rdds = []
            ntasks = 0
            by_file = {s.file_idx: s for s in splits}
            for fi, f in enumerate(files):
                if f.length == 0:
                    continue
                s0 = by_file[fi]
                chunk = _chunk_length(f.length, opts.split_size)
                conf = {
                    RECORD_LENGTH_KEY: str(chunk),
                    "mapreduce.input.fileinputformat.split.minsize": str(opts.split_size),
                    "mapreduce.input.fileinputformat.split.maxsize": str(opts.split_size),
                }
                raw: RDD[tuple[int, Any]] = sc.newAPIHadoopFile(
                    f.path,
                    FIXED_LENGTH_FORMAT,
                    "org.apache.hadoop.io.LongWritable",
                    "org.apache.hadoop.io.BytesWritable",
                    conf=conf,
                )
                fn = functools.partial(_scan_hadoop_partition, f, fi, file_size, chunk, s0.crc, s0.recovery, scan_opts)
                rdds.append(raw.mapPartitionsWithIndex(fn).map(counted))
                ntasks += raw.getNumPartitions()
            rdd = sc.union(rdds) if rdds else sc.parallelize([], 1)
        rdd = rdd.persist(StorageLevel.MEMORY_AND_DISK)

        t_scan = time.monotonic()

        def render() -> str:
            dt = time.monotonic() - t_scan
            per_file = acc_files.value
            done = sum(1 for i, f in enumerate(files) if per_file.get(i, -1) >= f.length)
            return (
                f"scan: {acc_tasks.value}/{ntasks} ranges, {done}/{len(files)} files, "
                f"{fmt_bytes(acc_bytes.value)} / {fmt_bytes(total_bytes)}, "
                f"{acc_records.value:,} records, {fmt_rate(acc_bytes.value, acc_records.value, dt)}"
            )

        self.progress.start(render)
        try:
            summaries = rdd.map(lambda r: r.summary()).collect()
        finally:
            self.progress.finish()
        scan_s = time.monotonic() - t_scan

        if hadoop is not None:
            splits = self._hadoop_splits(files, file_size, splits, summaries)
        chain = self._assemble(splits, summaries, hadoop)
        results = {r.seg_id: r for r in summaries}
        for r in chain.extra:
            results[r.seg_id] = r.summary()
        taken = [results[i] for i in chain.order]
        rep.records = sum(r.records for r in taken)
        rep.bytes = total_bytes
        rep.units = sum(r.units for r in taken)
        self.say(
            f"scan: {len(files)} files, {fmt_bytes(total_bytes)}, {rep.records:,} records, "
            f"{rep.units:,} units in {scan_s:.1f} s "
            f"({fmt_rate(total_bytes, rep.records, scan_s)}); {ntasks} ranges"
            + (f", {chain.rescans} rescanned" if chain.rescans else "")
            + (f", {chain.spills} records across Hadoop splits" if chain.spills else "")
        )
        self._report_chain(chain, files, taken)
        rep.scan_seconds = time.monotonic() - t_scan

        accepted = chain.accepted
        payload = rdd.filter(lambda r: r.seg_id in accepted)
        if chain.extra:
            payload = payload.union(sc.parallelize(chain.extra, max(1, min(len(chain.extra), 8))))
        self._queues(sc, payload, taken, files, tmp)
        if opts.index:
            self._index(sc, payload, chain, taken, tmp)
        rdd.unpersist()
        if rep.diffs:
            rep.exit_code = EXIT_DIFF
        elif chain.stop is not None and chain.stop.file_idx < len(files) - 1:
            rep.exit_code = EXIT_CUT
        return rep.exit_code

    def _hadoop_splits(
        self, files: list[CommitLogFile], file_size: int, splits: list[Split], summaries: list[ScanResult]
    ) -> list[Split]:
        """The ranges Hadoop actually made (its last split of a file may be up to 10 %
        longer than the others), plus an empty one for an empty file."""
        proto = {s.file_idx: s for s in splits}
        out = []
        seen = set()
        for r in summaries:
            p = proto[r.file_idx]
            out.append(
                Split(r.seg_id, r.file_idx, p.path, p.file_base, p.file_len, file_size, r.lo, r.hi, p.crc, p.recovery)
            )
            seen.add(r.file_idx)
        for fi in range(len(files)):
            if fi not in seen:
                p = proto[fi]
                out.append(
                    Split((fi << 32) | 0xFFFFFFFF, fi, p.path, p.file_base, 0, file_size, 0, 0, p.crc, p.recovery)
                )
                summaries.append(
                    ScanResult((fi << 32) | 0xFFFFFFFF, fi, 0, 0, first=0, stop=Stop("end", 0, "empty file"))
                )
        return out

    def _assemble(self, splits: list[Split], summaries: list[ScanResult], hadoop: HadoopFiles | None) -> Chain:
        opts = self.scan_opts

        if hadoop is None:

            def rescan(s: Split, start: int, seg: int) -> ScanResult:
                return scan_local_split(s, opts, seg_id=seg, forced_start=start)

            def spill(s: Split, pos: int, seg: int) -> ScanResult:
                raise AssertionError("a local file is read to its end: no spills")
        else:

            def rescan(s: Split, start: int, seg: int) -> ScanResult:
                buf = hadoop.read(s.path, start, s.hi - start)
                return scan_buffer(buf, start, s, opts, at_file_end=s.hi >= s.file_len, seg_id=seg, forced_start=start)

            def spill(s: Split, pos: int, seg: int) -> ScanResult:
                head = hadoop.read(s.path, pos, min(8, s.file_len - pos))
                total = int.from_bytes(head[:4], "big", signed=True) if len(head) >= 4 else 0
                n = min(max(total, len(head)), s.file_len - pos)
                buf = hadoop.read(s.path, pos, n) if n > len(head) else head
                one = Split(
                    seg, s.file_idx, s.path, s.file_base, s.file_len, s.file_size, pos, pos + 1, s.crc, s.recovery
                )
                return scan_buffer(buf, pos, one, opts, at_file_end=pos + n >= s.file_len, seg_id=seg, forced_start=pos)

        return assemble(splits, summaries, rescan, spill, EXTRA_SEG_BASE)

    def _report_chain(self, chain: Chain, files: list[CommitLogFile], taken: list[ScanResult]) -> None:
        skipped = [(files[r.file_idx].start + pos, size, why) for r in taken for pos, size, why in r.skipped]
        for at, size, why in skipped[:10]:
            self.say(
                f"warning: skipped the record of {size} bytes at offset {at}: {why} (as the broker's dispatch skips it)"
            )
        if len(skipped) > 10:
            self.say(f"warning: ... {len(skipped) - 10} more records skipped")
        st = chain.stop
        if st is None:
            last = chain.ends[-1] if chain.ends else None
            if last is not None and last.kind == "blank":
                self.say("commitlog: the last file ends with a BLANK record")
            return
        f = files[st.file_idx]
        at = f.start + st.pos
        later = len(files) - 1 - st.file_idx
        if later == 0 and st.kind == "end":
            self.say(f"commitlog: data ends at offset {at} ({st.reason})")
        elif later == 0:
            self.say(f"commitlog: torn tail at offset {at} in {f.name}: {st.reason}; everything before it is rebuilt")
        else:
            rest = sum(g.length for g in files[st.file_idx + 1 :])
            what = "data ends" if st.kind == "end" else "invalid record"
            self.say(
                f"error: {what} at offset {at} in {f.name} ({st.reason}), before the "
                f"last CommitLog file: the rebuild stops there, as RocketMQ's recovery "
                f"would cut the CommitLog; {later} later file(s), {fmt_bytes(rest)}, "
                f"not dispatched (exit code {EXIT_CUT})"
            )

    def _queues(
        self,
        sc: SparkContext,
        payload: RDD[ScanResult],
        taken: list[ScanResult],
        files: list[CommitLogFile],
        tmp: str | None,
    ) -> None:
        opts = self.opts
        rep = self.report
        sizes: dict[tuple[str, int], int] = {}
        for r in taken:
            for k, n in r.queue_units.items():
                sizes[k] = sizes.get(k, 0) + n
        cq_root = os.path.join(tmp, "consumequeue") if tmp else None
        cq_file_size = self.cfg.consume_queue_file_size
        commitlog_min = files[0].start
        outcomes: list[QueueOutcome] = []
        t0 = time.monotonic()
        if sizes:
            units = sum(sizes.values())
            parts = max(1, min(len(sizes), max(sc.defaultParallelism, units // UNITS_PER_TASK)))
            assign = _balance(sizes, parts)
            grouped = payload.flatMap(lambda r: list(r.queues.items())).groupByKey(
                parts, functools.partial(_partition_of, assign)
            )
            work = functools.partial(
                finish_queues,
                cq_root=cq_root,
                verify_root=opts.verify,
                cq_file_size=cq_file_size,
                commitlog_min=commitlog_min,
            )
            acc = sc.accumulator(0)

            def counted(it: Iterable[tuple[tuple[str, int], Iterable[np.ndarray]]]) -> Iterator[QueueOutcome]:
                for o in work(it):
                    acc.add(1)
                    yield o

            what = "writing" if cq_root else "verifying"
            self.progress.start(lambda: f"queues: {what} {acc.value + len(outcomes)}/{len(sizes)} queues")
            try:
                if self._write_on_driver(sc):
                    for kv in grouped.toLocalIterator():
                        outcomes.extend(work([kv]))
                else:
                    outcomes = grouped.mapPartitions(counted).collect()
            finally:
                self.progress.finish()
        rep.queues = len(outcomes)
        rep.cq_files = sum(o.files for o in outcomes)
        rep.diffs = sorted((o.diff for o in outcomes if o.diff is not None), key=lambda d: (d.topic, d.queue_id))
        anomalies = [o for o in outcomes if o.anomalies]
        for o in anomalies[:10]:
            self.say(
                f"warning: {o.topic} queue {o.queue_id}: {o.anomalies} unit(s) with "
                f"queue offsets out of sequence, laid out as the broker would"
            )
        dt = rep.queue_seconds = time.monotonic() - t0
        if cq_root:
            assert opts.out is not None  # cq_root is under --out
            self.say(
                f"consumequeue: {len(outcomes)} queues, {rep.units:,} units, "
                f"{rep.cq_files} files ({cq_file_size} bytes each) in {dt:.1f} s "
                f"-> {os.path.join(opts.out, 'consumequeue')}"
            )
        if opts.verify:
            self._verify_rest(opts.verify, outcomes, cq_file_size, commitlog_min)

    def _verify_rest(
        self, verify_root: str, outcomes: list[QueueOutcome], cq_file_size: int, commitlog_min: int
    ) -> None:
        """Queues in verify_root that the rebuild has no unit for."""
        opts = self.opts
        rep = self.report
        done = {(o.topic, o.queue_id) for o in outcomes}
        extra = [
            k for k in existing_queues(verify_root) if k not in done and (opts.topics is None or k[0] in opts.topics)
        ]
        for topic, qid in extra:
            d = verify_queue(verify_root, topic, qid, None, cq_file_size, commitlog_min)
            if d is not None:
                rep.diffs.append(d)
        rep.diffs.sort(key=lambda d: (d.topic, d.queue_id))
        rep.verified_queues = len(done) + len(extra)
        for d in rep.diffs:
            print(f"DIFF {d.describe()}", file=self.out, flush=True)
        units = sum(d.count for d in rep.diffs)
        self.say(f"verify: {len(rep.diffs)} of {rep.verified_queues} queues differ ({units} units) from {verify_root}")

    def _write_on_driver(self, sc: SparkContext) -> bool:
        if self.opts.write_on is not None:
            return self.opts.write_on == "driver"
        return not _is_local(sc.master)

    def _index(
        self, sc: SparkContext, payload: RDD[ScanResult], chain: Chain, taken: list[ScanResult], tmp: str | None
    ) -> None:
        assert tmp is not None and self.opts.out is not None  # --index needs --out
        rep = self.report
        cfg = self.cfg
        counts = {r.seg_id: r.keys for r in taken}
        p = plan(chain.order, counts, cfg.maxIndexNum)
        rep.keys = p.total
        t0 = time.monotonic()
        idx_tmp = os.path.join(tmp, "index")
        built: list[BuiltIndexFile] = []
        if p.total:
            nfiles = p.files
            chunks = payload.flatMap(functools.partial(_index_chunks, p.starts, p.per_file)).groupByKey(
                nfiles, lambda f: f
            )
            work = functools.partial(_build_index, idx_tmp, cfg.maxHashSlotNum, cfg.maxIndexNum)
            if self._write_on_driver(sc):
                built = [b for kv in chunks.toLocalIterator() for b in work([kv])]
            else:
                built = chunks.mapPartitions(work).collect()
        built.sort(key=lambda b: b.file_no)
        for b, name in zip(built, file_names([b.first_timestamp for b in built]), strict=True):
            os.rename(b.path, os.path.join(idx_tmp, name))
        rep.index_files = len(built)
        rep.index_seconds = time.monotonic() - t0
        self.say(
            f"index: {len(built)} files, {p.total:,} keys in {time.monotonic() - t0:.1f} s "
            f"-> {os.path.join(self.opts.out, 'index')}"
        )


def run(opts: Options, out: TextIO | None = None) -> int:
    return Rebuild(opts, out).run()


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """The command line; out receives the report (default stdout), errors go to stderr."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        opts = options_from_args(args)
        return run(opts, out)
    except RebuildError as e:
        print(f"rmq rebuild-cq: error: {e}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
