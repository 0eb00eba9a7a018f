"""End-to-end benchmark: producers -> a real broker -> consumers, RocketMQ benchmark style.

Run from the repository root::

    .venv/bin/python bench/e2e_bench.py                 # the full set (~9-10 min)
    .venv/bin/python bench/e2e_bench.py --quick         # smoke run (~1.5-2 min)
    .venv/bin/python bench/e2e_bench.py --json          # + one JSON object on the last line
    .venv/bin/python bench/e2e_bench.py --run producer --modes ASYNC_FLUSH --threads 64
    .venv/bin/python bench/e2e_bench.py --profile-broker --run producer --threads 64
    .venv/bin/python bench/e2e_bench.py --profile-consumer --run consumer --consumer client

Per flush mode (``--modes``) a fresh ``rmq namesrv`` + ``rmq broker`` pair is started as
subprocesses (ephemeral ports, broker on uvloop, default store configuration, store in a
temp directory removed afterwards unless ``--keep``). Load generators are child processes
(spawned), so the broker, each load generator and this orchestrator have their own GIL.
On that cluster, in this order:

* **raw** (the machine's limit, measured in the same run): a length-prefixed TCP
  request/response pair on uvloop in two child processes — request frames of exactly the
  size of the producer's SEND_MESSAGE_V2 frame, answers of exactly the size of the
  broker's send response, the same number of synchronous senders on one connection. No
  codec, no dispatch, no store: "Python asyncio + framing" on this machine now.
* **consumer** (the Java ``Consumer`` tool): a backlog of ``--backlog`` messages is put
  into ``--topic`` (``BenchmarkTest``: 1024 queues, as the broker pre-creates it) with
  SEND_BATCH_MESSAGE (32 per batch, for speed; every message is still its own 1 KiB
  record with UNIQ_KEY and WAIT), then drained from offset 0 by a consumer that
  long-polls every queue (32 messages per pull) and decodes every message; B2C / S2C as
  the tool reports them (now - born, now - store). Two consumers (``--consumer``):
  ``client`` = ``rmq.client.PushConsumer`` (rebalance, pull loop per queue, ProcessQueue,
  a coroutine listener with ``--consume-threads`` concurrency, offsets committed as Java
  does); ``lean`` = bare PULL_MESSAGE long-poll loops per queue through RemotingClient +
  ``decode_records`` (what the broker can deliver with the least client work). Also
  measured: the raw limit for pull-sized answers (same frame sizes, one request in
  flight per queue) and, in the consumer process, the decode rate of the same pull
  bodies without the network (the consumer's own ceiling).
* **e2e**: ``--e2e-threads`` synchronous senders and one consumer group at the same time
  on the same topic (the group's offsets are first set to the end of the topic, so the
  backlog is not re-read): send TPS, consume TPS, send latency, end-to-end latency
  (consume time - born timestamp; ms resolution, as the timestamps on the wire).
* **producer** (the Java ``Producer`` tool): per ``--threads`` count, N synchronous sender
  coroutines, each sending one message and waiting for its answer; binary ROCKETMQ
  headers, SEND_MESSAGE_V2, producer group ``benchmark_producer``, ``--size`` bytes of
  random alphanumerics, properties WAIT=true + UNIQ_KEY, queues round robin. After
  ``--warmup`` s, ``--duration`` s are measured. Java-tool style lines every
  ``--report-interval`` s. Senders (``--sender``): ``lean`` = the request stream of the
  Java tool made with the least Python work (SendMessageRequestHeader.to_v2_ext_fields +
  RemotingClient.invoke, a fresh UNIQ_KEY and born timestamp per message); ``client`` =
  ``rmq.client.Producer.send`` (route, queue selection, retries, SendResult).
  ``--procs auto``: when a one-process load generator is CPU-bound (>= 90 % of a core)
  and the broker is not, the point is measured again with the senders split over two
  processes; both rows are shown.

Every row shows the broker's CPU over its window (utime+stime of all its threads from
/proc, and of its event-loop thread alone), the broker's CPU per message, the load
generators' own CPU, machine-wide busy and steal %. The RocketMQ 4.9.8 figures printed
next to rmq's are the reference quoted in the issue (the Java broker under its own tool on
this kind of machine), not measured here.

Before the steps every empty queue of the topic gets one message (the first message of a
queue creates its ConsumeQueue file), so the windows measure the steady state. For SYNC_FLUSH
the disk's own limit is measured next to the store before and after the producer runs
(sequential pwrite of N CommitLog-sized records + fdatasync, N = each thread count).

Also per row: the broker's event-loop thread's run-queue wait (schedstat: runnable but kept
off the CPU by other processes), CPU used by processes that are not part of the benchmark,
the dispatch lag (GET_BROKER_RUNTIME_INFO ``dispatchBehindBytes`` polled every 0.1 s: bytes
written but not yet consumable), and for e2e the consumer process's event-loop stalls and
GC pauses.

``--broker-stats`` starts the broker through ``bench/_cluster.py`` (the same ``Broker`` on
uvloop) to add store flush counters per window (fdatasync/s, messages per group-commit
round, fdatasync round trip). ``--profile-broker`` also runs cProfile on the broker's
event-loop thread during each measured window and prints the top functions (all figures
of such a run are slowed by the profiler). ``--profile-consumer`` does the same for the
``client`` drain consumer: cProfile on the consumer process's event-loop thread from the
start of the drain to its target, top functions printed after the run. Every drain row
also gives the consumer's CPU per message (process utime+stime / messages) and its
cyclic-GC time (gc.callbacks), the figures to compare on a shared machine.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import contextlib
import io
import json
import math
import multiprocessing as mp
import os
import platform
import pstats
import random
import resource
import shutil
import string
import struct
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Self

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _cluster import Cluster, CpuSampler, MachineSampler, RawClient, all_processes_cpu, schedstat, top_consumers  # noqa: E402

from rmq.protocol.codes import PullSysFlag, RequestCode, ResponseCode, SerializeType  # noqa: E402
from rmq.protocol.frame import RemotingCommand, encode  # noqa: E402
from rmq.protocol.headers import PullMessageRequestHeader, SendMessageRequestHeader  # noqa: E402
from rmq.protocol.message import UniqueIdGenerator, decode_records, encode_batch, properties_to_string  # noqa: E402

MB = 1e6
PRODUCER_GROUP = "benchmark_producer"
CONSUMER_GROUP = "benchmark_consumer"
SEND_OK_CODES = frozenset(
    {
        ResponseCode.SUCCESS,
        ResponseCode.FLUSH_DISK_TIMEOUT,
        ResponseCode.FLUSH_SLAVE_TIMEOUT,
        ResponseCode.SLAVE_NOT_AVAILABLE,
    }
)
SNAP_PERIOD = 1.0  # the Java tools snapshot their counters every second

# From the issue: the real RocketMQ 4.9.8 broker on this kind of machine under its own
# benchmark tool (1 KiB bodies). Reference only, NOT measured by this script.
REF_SEND_TPS = {"ASYNC_FLUSH": {1: 3000, 16: 20000, 64: 25500}, "SYNC_FLUSH": {1: 1070, 16: 9300, 64: 20700}}
REF_DRAIN_MSGS_PER_S = 180000


def out(*a: object) -> None:
    print(*a, flush=True)


def pct(sorted_vals: Any, q: float) -> float:
    n = len(sorted_vals)
    if n == 0:
        return float("nan")
    return sorted_vals[min(n - 1, max(0, int(math.ceil(q * n)) - 1))]


def cpu_now() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def wait_now() -> float:
    """Seconds this (event-loop) thread was runnable but waiting for a CPU."""
    try:
        return schedstat()[1]
    except OSError:
        return 0.0


def random_bodies(size: int, n: int = 64) -> list[bytes]:
    """Random alphanumeric bodies (the Java tool's RandomStringUtils.randomAlphanumeric)."""
    alnum = (string.ascii_letters + string.digits).encode()
    rnd = random.Random(size)
    return [bytes(rnd.choice(alnum) for _ in range(size)) for _ in range(n)]


async def sleep_until(t: float) -> None:
    d = t - time.time()
    if d > 0:
        await asyncio.sleep(d)


# --------------------------------------------------------------------------- ACL / TLS
# The security variant of a run (--security) reaches the spawned load generators through
# their environment: every client they make signs with this account and/or speaks TLS.
ACL_ENV = "RMQ_BENCH_ACL"  # "accessKey:secretKey"
TLS_ENV = "RMQ_BENCH_TLS"  # "1"
BENCH_ACCESS_KEY, BENCH_SECRET_KEY = "benchUser", "benchSecret123"
SECURITY_VARIANTS = ("plain", "acl", "tls", "acl+tls")


def security_options() -> dict[str, Any]:
    """Producer / PushConsumer keyword arguments of this process's security variant."""
    opts: dict[str, Any] = {}
    ak, _, sk = os.environ.get(ACL_ENV, "").partition(":")
    if ak:
        opts.update(access_key=ak, secret_key=sk)
    if os.environ.get(TLS_ENV) == "1":
        opts["use_tls"] = True
    return opts


def bench_client() -> Any:
    """A RemotingClient (binary headers) signing and/or on TLS as this process's variant says."""
    from rmq.client.acl import AclClientRPCHook
    from rmq.remoting.client import RemotingClient
    from rmq.remoting.tls import TlsSettings, client_context

    opts = security_options()
    hook = AclClientRPCHook(opts["access_key"], opts["secret_key"]) if "access_key" in opts else None
    ssl = client_context(TlsSettings()) if opts.get("use_tls") else None
    return RemotingClient(serialize_type=SerializeType.ROCKETMQ, request_hook=hook, ssl=ssl)


@contextlib.contextmanager
def security_variant(variant: str, root: Path) -> Iterator[dict[str, str]]:
    """The broker.conf keys of a variant; its client settings in this process's environment
    (inherited by the spawned load generators) for the duration."""
    conf: dict[str, str] = {}
    env: dict[str, str] = {}
    if "acl" in variant:
        home = root / "acl-home"
        (home / "conf").mkdir(parents=True, exist_ok=True)
        # an ordinary account (not admin): every request goes through the permission check
        (home / "conf" / "plain_acl.yml").write_text(
            "accounts:\n"
            f"  - accessKey: {BENCH_ACCESS_KEY}\n"
            f"    secretKey: {BENCH_SECRET_KEY}\n"
            "    defaultTopicPerm: PUB|SUB\n"
            "    defaultGroupPerm: PUB|SUB\n"
        )
        conf.update(aclEnable="true", rocketmqHome=str(home))
        env[ACL_ENV] = f"{BENCH_ACCESS_KEY}:{BENCH_SECRET_KEY}"
    if "tls" in variant:
        env[TLS_ENV] = "1"  # the broker serves TLS and plaintext on one port (permissive, the default)
    saved = {k: os.environ.get(k) for k in (ACL_ENV, TLS_ENV)}
    for k in saved:
        os.environ.pop(k, None)
    os.environ.update(env)
    try:
        yield conf
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


async def topic_route(namesrv: str, topic: str):
    from rmq.client.api import MQClientAPI

    rc = bench_client()
    try:
        route = await MQClientAPI(rc, [namesrv]).get_topic_route_info(topic)
    finally:
        await rc.close()
    if route is None or not route.broker_datas or not route.queue_datas:
        raise RuntimeError(f"no route for {topic}")
    qd = route.queue_datas[0]
    return route.broker_datas[0].broker_addrs[0], qd.write_queue_nums, qd.read_queue_nums


def send_command(group: str, topic: str, qid: int, body: bytes, ids: UniqueIdGenerator) -> RemotingCommand:
    """One SEND_MESSAGE_V2 as the Java client builds it for the benchmark tool."""
    born = time.time_ns() // 1_000_000
    props = properties_to_string({"WAIT": "true", "UNIQ_KEY": ids.next_id(born)})
    h = SendMessageRequestHeader(group, topic, "TBW102", 4, qid, 0, born, 0, props, 0, False, False, None)
    return RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext_fields=h.to_v2_ext_fields(), body=body)


def pull_command(group: str, topic: str, qid: int, offset: int, suspend: bool, n: int = 32) -> RemotingCommand:
    flag = PullSysFlag.build(False, suspend, True)
    h = PullMessageRequestHeader(group, topic, qid, offset, n, flag, 0, 15000 if suspend else 0, 0, "*", "TAG")
    return RemotingCommand(RequestCode.PULL_MESSAGE, ext_fields=h.to_ext_fields())


# =================================================================================== children
# Every child: setup, ("ready", info) on its pipe, wait for ("go", t_begin), run, then
# ("result", dict). Snapshots (idx, role, k, counters) go to the shared queue at
# t_begin + k * SNAP_PERIOD.


def _child_entry(kind: str, p: dict, conn, q, idx: int) -> None:  # type: ignore[no-untyped-def]
    import logging

    logging.basicConfig(level=logging.ERROR)
    import uvloop

    try:
        res = uvloop.run(CHILDREN[kind](p, conn, q, idx))
        conn.send(("result", res))
    except BaseException:
        try:
            conn.send(("error", traceback.format_exc()))
        except Exception:
            pass
    finally:
        conn.close()


async def _handshake(conn, info: dict) -> float:  # type: ignore[no-untyped-def]
    conn.send(("ready", info))
    msg = await asyncio.get_running_loop().run_in_executor(None, conn.recv)
    assert msg[0] == "go", msg
    return float(msg[1])


async def _snapshots(
    q,
    idx: int,
    role: str,
    t_begin: float,
    fn: Callable[[], dict],  # type: ignore[no-untyped-def]
    done: asyncio.Event,
) -> None:
    k = 0
    while True:
        await sleep_until(t_begin + k * SNAP_PERIOD)
        q.put((idx, role, k, time.time(), fn()))
        if done.is_set():
            return
        k += 1


class LoopMonitor:
    """Event-loop stalls (a 5 ms timer firing late) and cyclic-GC pauses of this process."""

    def __init__(self) -> None:
        import gc

        self.max_stall = 0.0
        self.stalls_50ms = 0
        self.gc_max = 0.0
        self.gc_total = 0.0
        self._gc_t0 = 0.0
        self._task: asyncio.Task | None = None
        gc.callbacks.append(self._gc)

    def _gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_t0 = time.perf_counter()
        else:
            d = time.perf_counter() - self._gc_t0
            self.gc_total += d
            self.gc_max = max(self.gc_max, d)

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        perf = time.perf_counter
        while True:
            t = perf()
            await asyncio.sleep(0.005)
            late = perf() - t - 0.005
            if late > self.max_stall:
                self.max_stall = late
            if late > 0.05:
                self.stalls_50ms += 1

    def reset(self) -> None:
        self.max_stall = self.gc_max = self.gc_total = 0.0
        self.stalls_50ms = 0

    def result(self) -> dict:
        if self._task is not None:
            self._task.cancel()
        return {
            "loop_max_stall_ms": self.max_stall * 1000,
            "loop_stalls_50ms": self.stalls_50ms,
            "gc_max_ms": self.gc_max * 1000,
            "gc_total_ms": self.gc_total * 1000,
        }


class SendStats:
    __slots__ = (
        "ok",
        "send_failed",
        "resp_failed",
        "rt_total",
        "rt_max_iv",
        "win_ok",
        "win_sfail",
        "win_rfail",
        "lat",
        "measuring",
        "first_error",
    )

    def __init__(self) -> None:
        self.ok = self.send_failed = self.resp_failed = 0
        self.rt_total = 0.0
        self.rt_max_iv = 0.0
        self.win_ok = self.win_sfail = self.win_rfail = 0
        self.lat = array.array("d")
        self.measuring = False
        self.first_error: str | None = None

    def snap(self) -> dict:
        d = {
            "ok": self.ok,
            "sfail": self.send_failed,
            "rfail": self.resp_failed,
            "rt_total": self.rt_total,
            "rt_max": self.rt_max_iv,
        }
        self.rt_max_iv = 0.0
        return d


async def _send_child(p: dict, conn, q, idx: int) -> dict:  # type: ignore[no-untyped-def]
    """Synchronous senders (the Java Producer tool's threads) for one window."""
    topic, threads = p["topic"], p["threads"]
    bodies = random_bodies(p["size"])
    st = SendStats()
    perf = time.perf_counter
    closers: list[Callable[[], Any]] = []
    if p["sender"] == "client":
        from rmq.client import Message, MQBrokerError, Producer

        producer = Producer(
            PRODUCER_GROUP,
            p["namesrv"],
            serialize_type=SerializeType.ROCKETMQ,
            send_msg_timeout=3000,
            **security_options(),
        )
        await producer.start()
        closers.append(producer.shutdown)
        await producer.send(Message(topic, bodies[0]))

        async def send_one(body: bytes) -> bool:
            try:
                await producer.send(Message(topic, body))
                return True
            except MQBrokerError as e:
                if st.first_error is None:
                    st.first_error = repr(e)
                return False
    else:
        addr, nq, _ = await topic_route(p["namesrv"], topic)
        client = bench_client()
        closers.append(client.close)
        ids = UniqueIdGenerator()
        qctr = [random.randrange(nq)]
        # ha_bench counts only SUCCESS: a SLAVE_NOT_AVAILABLE answer is not a replicated put
        ok_codes = frozenset(p["ok_codes"]) if p.get("ok_codes") else SEND_OK_CODES

        async def send_one(body: bytes) -> bool:
            qid = qctr[0] % nq
            qctr[0] = qid + 1
            resp = await client.invoke(addr, send_command(PRODUCER_GROUP, topic, qid, body, ids), 3.0)
            if resp.code in ok_codes:
                return True
            if st.first_error is None:
                st.first_error = f"code {resp.code} {resp.remark}"
            return False

        assert await send_one(bodies[0])

    t_begin = await _handshake(conn, {"pid": os.getpid()})
    win_start = t_begin + p["warmup"]
    win_end = win_start + p["duration"]
    stop = [False]
    win: dict[str, float] = {}

    mon = LoopMonitor()
    mon.start()

    async def timer() -> None:
        await sleep_until(win_start)
        mon.reset()
        win["cpu0"], win["t0"], win["w0"] = cpu_now(), time.time(), wait_now()
        st.measuring = True
        await sleep_until(win_end)
        st.measuring = False
        win["cpu1"], win["t1"], win["w1"] = cpu_now(), time.time(), wait_now()
        stop[0] = True

    async def sender(i: int) -> None:
        k = i
        nb = len(bodies)
        lat_append = st.lat.append
        while not stop[0]:
            body = bodies[k % nb]
            k += 7
            t0 = perf()
            try:
                ok = await send_one(body)
            except Exception as e:  # RemotingError / MQClientError: "Send Failed"
                st.send_failed += 1
                if st.measuring:
                    st.win_sfail += 1
                if st.first_error is None:
                    st.first_error = repr(e)
                await asyncio.sleep(0.1)
                continue
            dt = perf() - t0
            if ok:
                st.ok += 1
                st.rt_total += dt
                if dt > st.rt_max_iv:
                    st.rt_max_iv = dt
                if st.measuring:
                    st.win_ok += 1
                    lat_append(dt)
            else:
                st.resp_failed += 1
                if st.measuring:
                    st.win_rfail += 1

    await sleep_until(t_begin)
    done = asyncio.Event()
    snaps = asyncio.ensure_future(_snapshots(q, idx, "send", t_begin, st.snap, done))
    tm = asyncio.ensure_future(timer())
    await asyncio.gather(*(sender(i) for i in range(threads)))
    await tm
    done.set()
    await snaps
    for c in closers:
        await c()
    return {
        "win_ok": st.win_ok,
        "win_sfail": st.win_sfail,
        "win_rfail": st.win_rfail,
        "lat": st.lat.tobytes(),
        "cpu": win["cpu1"] - win["cpu0"],
        "wait": win["w1"] - win["w0"],
        **mon.result(),
        "t0": win["t0"],
        "t1": win["t1"],
        "ok": st.ok,
        "first_error": st.first_error,
    }


class ConsumeStats:
    __slots__ = (
        "count",
        "fail",
        "b2c_sum",
        "s2c_sum",
        "b2c_max",
        "s2c_max",
        "bytes",
        "measuring",
        "win_count",
        "e2e",
        "t_first",
        "t_last",
        "cpu_first",
        "target",
        "done",
        "t_done",
        "count_done",
        "bytes_done",
        "b2c_done",
        "s2c_done",
    )

    def __init__(self) -> None:
        self.count = self.fail = self.bytes = self.win_count = 0
        self.b2c_sum = self.s2c_sum = 0.0
        self.b2c_max = self.s2c_max = 0.0
        self.measuring = False
        self.e2e = array.array("d")
        self.t_first = self.t_last = self.cpu_first = 0.0
        self.target = 0
        self.done: asyncio.Event | None = None
        self.t_done = 0.0
        self.count_done = self.bytes_done = 0
        self.b2c_done = self.s2c_done = 0.0

    def on_msgs(self, msgs: list) -> None:  # type: ignore[type-arg]
        now = time.time()
        now_ms = now * 1000.0
        if self.count == 0:
            self.t_first = now
            self.cpu_first = cpu_now()
        b2c_sum = s2c_sum = 0.0
        b2c_max, s2c_max = self.b2c_max, self.s2c_max
        nbytes = 0
        measuring = self.measuring
        e2e_append = self.e2e.append
        for m in msgs:
            b2c = now_ms - m.born_timestamp
            s2c = now_ms - m.store_timestamp
            b2c_sum += b2c
            s2c_sum += s2c
            if b2c > b2c_max:
                b2c_max = b2c
            if s2c > s2c_max:
                s2c_max = s2c
            nbytes += m.store_size
            if measuring:
                e2e_append(b2c)
        n = len(msgs)
        self.b2c_sum += b2c_sum
        self.s2c_sum += s2c_sum
        self.b2c_max, self.s2c_max = b2c_max, s2c_max
        self.bytes += nbytes
        self.count += n
        if measuring:
            self.win_count += n
        self.t_last = now
        if self.target and self.count >= self.target and self.done is not None and not self.done.is_set():
            self.t_done, self.count_done, self.bytes_done = now, self.count, self.bytes
            self.b2c_done, self.s2c_done = self.b2c_sum, self.s2c_sum
            self.done.set()

    def snap(self) -> dict:
        d = {
            "count": self.count,
            "fail": self.fail,
            "b2c_sum": self.b2c_sum,
            "s2c_sum": self.s2c_sum,
            "b2c_max": self.b2c_max,
            "s2c_max": self.s2c_max,
        }
        self.b2c_max = self.s2c_max = 0.0
        return d


async def _consume_child(p: dict, conn, q, idx: int) -> dict:  # type: ignore[no-untyped-def]
    """``purpose`` drain: consume ``target`` messages from offset 0 as fast as possible.
    ``purpose`` e2e: consume from the end of the topic during the senders' window."""

    topic, purpose, variant = p["topic"], p["purpose"], p["consumer"]
    st = ConsumeStats()
    st.target = p.get("target", 0)
    st.done = asyncio.Event()
    addr, _, nq = await topic_route(p["namesrv"], topic)
    group = p["group"]
    closers: list[Callable[[], Any]] = []
    tasks: list[asyncio.Task] = []
    running = [True]
    errors: list[str] = []

    if variant == "client":
        from rmq.client import ConsumeFromWhere, ConsumeResult, PushConsumer

        async def listener(msgs, ctx):  # type: ignore[no-untyped-def]
            st.on_msgs(msgs)
            return ConsumeResult.SUCCESS

        consumer = PushConsumer(
            group,
            p["namesrv"],
            listener=listener,
            consume_thread_max=p["consume_threads"],
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            serialize_type=SerializeType.ROCKETMQ,
            **security_options(),
        )
        consumer.subscribe(topic, "*")

        async def start() -> None:
            await consumer.start()
            closers.append(consumer.shutdown)

        def assigned() -> int:
            return sum(1 for mq in consumer.rebalance.process_queue_table if mq.topic == topic)
    else:
        client = bench_client()
        closers.append(client.close)
        offsets = [0] * nq
        if purpose == "e2e":
            from rmq.client.api import MQClientAPI

            api = MQClientAPI(client, [p["namesrv"]])
            offsets = list(await asyncio.gather(*(api.get_max_offset(addr, topic, i) for i in range(nq))))

        async def pull_loop(qid: int) -> None:
            off = offsets[qid]
            while running[0]:
                try:
                    resp = await client.invoke(addr, pull_command(group, topic, qid, off, True), 30.0)
                except Exception as e:
                    if running[0]:
                        errors.append(repr(e))
                        st.fail += 1
                        await asyncio.sleep(1)
                    continue
                code = resp.code
                if code == ResponseCode.SUCCESS:
                    st.on_msgs(decode_records(resp.body or b""))
                if code in (
                    ResponseCode.SUCCESS,
                    ResponseCode.PULL_NOT_FOUND,
                    ResponseCode.PULL_RETRY_IMMEDIATELY,
                    ResponseCode.PULL_OFFSET_MOVED,
                ):
                    off = int((resp.ext_fields or {}).get("nextBeginOffset", off))
                else:
                    errors.append(f"pull code {code} {resp.remark}")
                    st.fail += 1
                    await asyncio.sleep(1)

        async def start() -> None:
            for i in range(nq):
                tasks.append(asyncio.ensure_future(pull_loop(i)))

        def assigned() -> int:
            return nq

    if purpose == "e2e":
        await start()
        deadline = time.time() + 30
        while assigned() < nq and time.time() < deadline:
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # let every queue's first pull be parked on the broker
    t_begin = await _handshake(conn, {"pid": os.getpid(), "queues": assigned()})
    done = asyncio.Event()
    snaps = asyncio.ensure_future(_snapshots(q, idx, "consume", t_begin, st.snap, done))
    res: dict[str, Any] = {}
    if purpose == "e2e":
        win_start = t_begin + p["warmup"]
        win_end = win_start + p["duration"]
        mon = LoopMonitor()
        mon.start()
        await sleep_until(win_start)
        mon.reset()
        c0, w0 = cpu_now(), wait_now()
        st.measuring = True
        await sleep_until(win_end)
        st.measuring = False
        res["cpu"] = cpu_now() - c0
        res["wait"] = wait_now() - w0
        res.update(mon.result())
        await asyncio.sleep(0.5)
    else:
        gc_mon = LoopMonitor()  # GC pauses only; its stall timer is not started
        prof = None
        if p.get("profile") and variant == "client":
            import cProfile

            # enabled on the loop's thread: every coroutine step of the consumer is seen
            prof = cProfile.Profile(time.perf_counter if p.get("profile_clock") != "cpu" else time.thread_time)
        await sleep_until(t_begin)
        t_go = time.time()
        cpu_go = cpu_now()
        w_go = wait_now()
        gc_mon.reset()
        if prof is not None:
            prof.enable()
        await start()
        try:
            await asyncio.wait_for(st.done.wait(), p["timeout"])
            res["complete"] = True
        except TimeoutError:
            res["complete"] = False
            st.t_done, st.count_done, st.bytes_done = st.t_last, st.count, st.bytes
            st.b2c_done, st.s2c_done = st.b2c_sum, st.s2c_sum
        cpu_end = cpu_now()
        if prof is not None:
            prof.disable()
            fd, prof_path = tempfile.mkstemp(prefix="rmq-consumer-", suffix=".prof")
            os.close(fd)
            prof.dump_stats(prof_path)
            res["profile"] = prof_path
        res.update(gc_mon.result())
        running[0] = False  # stop pulling now: the figures are taken at the target
        if variant == "client":
            consumer.suspend()
        for t in tasks:
            t.cancel()
        res.update(t_go=t_go, cpu_go=cpu_go, cpu_first=st.cpu_first, cpu_end=cpu_end, wait=wait_now() - w_go)
    done.set()
    await snaps
    running[0] = False
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for c in closers:
        await c()
    if purpose == "drain":
        res.update(
            count=st.count_done,
            bytes=st.bytes_done,
            t_last=st.t_done,
            b2c_avg=st.b2c_done / max(st.count_done, 1),
            s2c_avg=st.s2c_done / max(st.count_done, 1),
            after_target=st.count,
        )
    else:
        res.update(
            count=st.count,
            bytes=st.bytes,
            t_last=st.t_last,
            b2c_avg=st.b2c_sum / max(st.count, 1),
            s2c_avg=st.s2c_sum / max(st.count, 1),
        )
    res.update(
        win_count=st.win_count, t_first=st.t_first, e2e=st.e2e.tobytes(), fail=st.fail, errors=errors[:3], queues=nq
    )
    if purpose == "drain" and p.get("decode_limit"):
        res["decode"] = await _decode_limit(addr, topic, nq, p["decode_seconds"])
    return res


async def _decode_limit(addr: str, topic: str, nq: int, seconds: float) -> dict:
    """The consumer's own ceiling: decode the same pull bodies in-process, no network."""

    client = bench_client()
    bodies = []
    try:
        for qid in range(min(nq, 64)):
            resp = await client.invoke(addr, pull_command("bench_decode", topic, qid, 0, False), 10)
            if resp.code == ResponseCode.SUCCESS and resp.body:
                bodies.append(bytes(resp.body))
    finally:
        await client.close()
    if not bodies:
        return {}
    per_round = sum(len(decode_records(b)) for b in bodies)
    out_d: dict[str, float] = {
        "bodies": len(bodies),
        "msgs_per_body": per_round / len(bodies),
        "body_bytes": sum(map(len, bodies)) / len(bodies),
    }
    # decode only
    perf = time.perf_counter
    n = 0
    t0 = perf()
    while perf() - t0 < seconds:
        for b in bodies:
            decode_records(b)
        n += per_round
    out_d["decode_msgs_per_s"] = n / (perf() - t0)
    # decode + the consumer's per-message bookkeeping (stats as above)
    st = ConsumeStats()
    n = 0
    t0 = perf()
    while perf() - t0 < seconds:
        for b in bodies:
            st.on_msgs(decode_records(b))
        n += per_round
    out_d["decode_stats_msgs_per_s"] = n / (perf() - t0)
    return out_d


class _RawServerProto(asyncio.Protocol):
    """Answers every frame with a frame of the size its bytes 4..8 ask for."""

    cache: dict[int, bytes] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.buf = bytearray()

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos, n = 0, len(buf)
        replies = []
        cache = self.cache
        while n - pos >= 8:
            length, want = struct.unpack_from(">ii", buf, pos)
            if n - pos - 4 < length:
                break
            pos += 4 + length
            r = cache.get(want)
            if r is None:
                r = cache[want] = struct.pack(">i", want - 4) + bytes(want - 4)
            replies.append(r)
        del buf[:pos]
        if replies:
            self.transport.writelines(replies)  # type: ignore[attr-defined]


async def _raw_server_child(p: dict, conn, q, idx: int) -> dict:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(_RawServerProto, "127.0.0.1", 0)
    conn.send(("ready", {"pid": os.getpid(), "port": srv.sockets[0].getsockname()[1]}))
    await loop.run_in_executor(None, conn.recv)  # "stop"
    srv.close()
    return {}


async def _raw_child(p: dict, conn, q, idx: int) -> dict:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    transport, proto = await loop.create_connection(RawClient, "127.0.0.1", p["port"])
    frame = struct.pack(">ii", p["req_size"] - 4, p["resp_size"]) + bytes(p["req_size"] - 8)
    await proto.send(frame)
    t_begin = await _handshake(conn, {"pid": os.getpid()})
    win_start = t_begin + p["warmup"]
    win_end = win_start + p["duration"]
    lat = array.array("d")
    state = {"measuring": False, "stop": False, "n": 0}
    win: dict[str, float] = {}
    perf = time.perf_counter

    async def timer() -> None:
        await sleep_until(win_start)
        win["cpu0"] = cpu_now()
        state["measuring"] = True
        await sleep_until(win_end)
        state["measuring"] = False
        win["cpu1"] = cpu_now()
        state["stop"] = True

    async def worker() -> None:
        while not state["stop"]:
            t0 = perf()
            await proto.send(frame)
            if state["measuring"]:
                lat.append(perf() - t0)

    await sleep_until(t_begin)
    tm = asyncio.ensure_future(timer())
    await asyncio.gather(*(worker() for _ in range(p["threads"])))
    await tm
    transport.close()
    return {"win_ok": len(lat), "lat": lat.tobytes(), "cpu": win["cpu1"] - win["cpu0"]}


CHILDREN: dict[str, Callable[..., Any]] = {
    "send": _send_child,
    "consume": _consume_child,
    "raw": _raw_child,
    "rawserver": _raw_server_child,
}


# =================================================================================== parent side
class Child:
    def __init__(self, ctx, kind: str, params: dict, q, idx: int) -> None:  # type: ignore[no-untyped-def]
        self.kind = kind
        self.idx = idx
        self.conn, child_conn = ctx.Pipe()
        self.proc = ctx.Process(
            target=_child_entry, args=(kind, params, child_conn, q, idx), daemon=True, name=f"bench-{kind}-{idx}"
        )
        self.proc.start()
        child_conn.close()
        self.info: dict = {}
        self.result: dict | None = None
        self.cpu: CpuSampler | None = None

    def wait_ready(self, timeout: float = 60.0) -> dict:
        if not self.conn.poll(timeout):
            raise RuntimeError(f"{self.kind} child {self.idx} not ready within {timeout}s")
        msg = self.conn.recv()
        if msg[0] == "error":
            raise RuntimeError(f"{self.kind} child {self.idx} failed:\n{msg[1]}")
        self.info = msg[1]
        return self.info

    def poll_result(self) -> bool:
        if self.result is not None:
            return True
        if self.conn.poll():
            try:
                msg = self.conn.recv()
            except EOFError:
                raise RuntimeError(f"{self.kind} child {self.idx} died (exit {self.proc.exitcode})") from None
            if msg[0] == "error":
                raise RuntimeError(f"{self.kind} child {self.idx} failed:\n{msg[1]}")
            self.result = msg[1]
            return True
        if not self.proc.is_alive():
            raise RuntimeError(f"{self.kind} child {self.idx} died (exit {self.proc.exitcode})")
        return False

    def finish(self) -> None:
        if self.cpu is not None:
            self.cpu.stop()
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()


class Reporter:
    """Java-tool style lines from the children's 1 s snapshots (summed over children)."""

    def __init__(self, role: str, idxs: list[int], boundaries: list[int] | None, every: int, label: str) -> None:
        self.role = role
        self.idxs = set(idxs)
        self.snaps: dict[int, dict[int, tuple[float, dict]]] = {}
        self.boundaries = boundaries  # None: every ``every`` snapshots from 0
        self.every = max(1, every)
        self.label = label
        self.last_k: int | None = None if boundaries is None else boundaries[0]
        self.printed: set[int] = set()

    def add(self, idx: int, role: str, k: int, t: float, d: dict) -> None:
        if role != self.role or idx not in self.idxs:
            return
        self.snaps.setdefault(k, {})[idx] = (t, d)

    def _complete(self, k: int) -> bool:
        return len(self.snaps.get(k, {})) == len(self.idxs)

    def pump(self) -> None:
        if self.boundaries is not None:
            ks = self.boundaries[1:]
        else:
            ks = [k for k in sorted(self.snaps) if k > 0 and k % self.every == 0]
            if self.last_k is None:
                self.last_k = 0
        for k in ks:
            if k in self.printed or not self._complete(k):
                continue
            assert self.last_k is not None
            if not self._complete(self.last_k):
                continue
            self._line(self.last_k, k)
            self.printed.add(k)
            self.last_k = k

    def _sum(self, k: int) -> tuple[float, dict]:
        entries = self.snaps[k]
        t = max(v[0] for v in entries.values())
        tot: dict[str, float] = {}
        for _, d in entries.values():
            for key, val in d.items():
                if key.endswith("_max") or key == "rt_max":
                    tot[key] = max(tot.get(key, 0.0), val)
                else:
                    tot[key] = tot.get(key, 0) + val
        return t, tot

    def _interval_max(self, k0: int, k1: int, key: str) -> float:
        m = 0.0
        for k in range(k0 + 1, k1 + 1):
            for _, d in self.snaps.get(k, {}).values():
                m = max(m, d.get(key, 0.0))
        return m

    def _line(self, k0: int, k1: int) -> None:
        t0, a = self._sum(k0)
        t1, b = self._sum(k1)
        dt = max((k1 - k0) * SNAP_PERIOD, 1e-9)
        now = int(t1 * 1000)
        if self.role == "send":
            n = b["ok"] - a["ok"]
            avg = (b["rt_total"] - a["rt_total"]) * 1000 / n if n else float("nan")
            mx = self._interval_max(k0, k1, "rt_max") * 1000
            out(
                f"  {self.label}Current Time: {now} | Send TPS: {n / dt:.0f} | Max RT(ms): "
                f"{mx:.0f} | Average RT(ms): {avg:7.3f} | Send Failed: {int(b['sfail'])} | "
                f"Response Failed: {int(b['rfail'])}"
            )
        else:
            n = b["count"] - a["count"]
            b2c = (b["b2c_sum"] - a["b2c_sum"]) / n if n else float("nan")
            s2c = (b["s2c_sum"] - a["s2c_sum"]) / n if n else float("nan")
            out(
                f"  {self.label}Current Time: {now} | Consume TPS: {n / dt:.0f} | AVG(B2C) RT(ms): "
                f"{b2c:7.3f} | AVG(S2C) RT(ms): {s2c:7.3f} | MAX(B2C) RT(ms): "
                f"{self._interval_max(k0, k1, 'b2c_max'):.0f} | MAX(S2C) RT(ms): "
                f"{self._interval_max(k0, k1, 's2c_max'):.0f} | Consume Fail: {int(b['fail'])}"
            )


class BrokerPoller:
    """Calls ``sample(rc)`` every ``period`` s from a thread with its own event loop, over one
    RemotingClient; a failed sample is skipped (a broker may be restarting or gone)."""

    def __init__(self, period: float, name: str) -> None:
        self.period = period
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: uvrun(self._poll()), name=name, daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    async def sample(self, rc: Any) -> None:
        raise NotImplementedError

    async def _poll(self) -> None:

        rc = bench_client()
        try:
            while not self._stop.is_set():
                try:
                    await self.sample(rc)
                except Exception:
                    pass
                await asyncio.sleep(self.period)
        finally:
            await rc.close()


class DispatchLagSampler(BrokerPoller):
    """Polls the broker's GET_BROKER_RUNTIME_INFO ``dispatchBehindBytes`` (CommitLog bytes
    not yet in a ConsumeQueue, so not visible to consumers) every ``period`` s from a
    thread with its own event loop."""

    def __init__(self, broker_addr: str, period: float = 0.1) -> None:
        super().__init__(period, "dispatch-lag")
        self.addr = broker_addr
        self.t: list[float] = []
        self.v: list[int] = []

    async def sample(self, rc: Any) -> None:
        from rmq.client.api import MQClientAPI

        info = await MQClientAPI(rc).get_broker_runtime_info(self.addr, timeout_ms=2000)
        self.t.append(time.time())
        self.v.append(int(info.get("dispatchBehindBytes", "0")))

    def window(self, t0: float, t1: float) -> tuple[float, float]:
        """(max, mean) bytes behind over [t0, t1]; NaN without samples."""
        vals = [v for t, v in zip(list(self.t), list(self.v), strict=False) if t0 <= t <= t1]
        if not vals:
            return float("nan"), float("nan")
        return float(max(vals)), sum(vals) / len(vals)


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.ctx = mp.get_context("spawn")
        self.q = self.ctx.Queue()
        self.machine = MachineSampler().start()
        self.cluster: Cluster | None = None
        self.lag: DispatchLagSampler | None = None
        self.record_bytes = 1200
        self.children: list[Child] = []
        self.profiles: list[tuple[str, str]] = []
        self.consumer_profiles: list[tuple[str, str]] = []  # --profile-consumer

    def close(self) -> None:
        for c in self.children:
            try:
                c.finish()
            except Exception:
                pass
        self.children = []
        self.machine.stop()

    # ------------------------------------------------------------------ running a step
    def _spawn(self, specs: list[tuple[str, dict]]) -> list[Child]:
        kids = []
        for i, (kind, params) in enumerate(specs):
            c = Child(self.ctx, kind, params, self.q, i)
            kids.append(c)
            self.children.append(c)
        return kids

    def run(
        self,
        specs: list[tuple[str, dict]],
        reporters: list[Reporter],
        window: tuple[float, float] | None,
        timeout: float,
        profile: bool = True,
    ) -> tuple[list[Child], float]:
        """Spawn, handshake, run to completion; returns the children and t_begin.

        ``window`` = (warmup, duration) relative to t_begin, for profiling; None = the
        whole run (drain)."""
        kids = self._spawn(specs)
        try:
            for c in kids:
                c.wait_ready()
            t_begin = time.time() + 0.3
            for c in kids:
                c.conn.send(("go", t_begin))
            prof_on = prof_off = None
            self.window_stats = None
            profiling = profile and self.cluster is not None and self.cluster.inproc
            if not profiling:
                pass
            elif window is not None:
                prof_on, prof_off = t_begin + window[0], t_begin + window[0] + window[1]
            else:
                prof_on = t_begin
            deadline = time.time() + timeout
            win_t0 = t_begin + (window[0] if window is not None else 0.0)
            win_t1 = win_t0 + window[1] if window is not None else None
            snap0 = snap1 = None
            pending = list(kids)
            while pending:
                now = time.time()
                if snap0 is None and now >= win_t0:
                    snap0 = (now, all_processes_cpu())
                if win_t1 is not None and snap1 is None and now >= win_t1:
                    snap1 = (now, all_processes_cpu())
                if prof_on is not None and now >= prof_on and self.cluster is not None:
                    self.cluster.window_begin()
                    prof_on = None
                if prof_off is not None and now >= prof_off and prof_on is None:
                    self._profile_end()
                    prof_off = None
                self._hand_reports(reporters, None)
                pending = [c for c in pending if not c.poll_result()]
                if self.cluster is not None:
                    self.cluster.check_alive()
                if now > deadline:
                    raise RuntimeError("step did not finish in time")
                time.sleep(0.02)
            if profiling and window is None:
                self._profile_end()
            if snap1 is None:
                snap1 = (time.time(), all_processes_cpu())
            self._others(snap0, snap1, kids)
            self._hand_reports(reporters, 0.1)
            return kids, t_begin
        finally:
            for c in kids:
                c.finish()
                if c in self.children:
                    self.children.remove(c)

    window_stats: dict | None = None

    def _profile_end(self) -> None:
        if self.cluster is None or not self.cluster.inproc:
            return
        path, self.window_stats = self.cluster.window_end()
        if path is not None:
            self.profiles.append((self.current_step, str(path)))

    def flush_figures(self) -> dict:
        """Store counters of the last window (in-process broker only)."""
        w = self.window_stats
        if not w or not w.get("seconds"):
            return {}
        secs = w["seconds"]
        r: dict[str, Any] = {}
        if "flush_fsyncs" in w:
            r["fsyncs_per_s"] = w["flush_fsyncs"] / secs
            rounds = w.get("flush_rounds") or w["flush_fsyncs"]
            if w.get("flush_waiters"):
                r["msgs_per_round"] = w["flush_waiters"] / rounds if rounds else float("nan")
            r["fsync_ms"] = (
                w.get("flush_fsync_seconds", 0.0) / w["flush_fsyncs"] * 1000 if w["flush_fsyncs"] else float("nan")
            )
            r["flush_busy_pct"] = w.get("flush_fsync_seconds", 0.0) / secs * 100
        return r

    def flush_text(self, r: dict) -> str:
        if "fsyncs_per_s" not in r:
            return ""
        return (
            f"\n    store: {r['fsyncs_per_s']:.0f} fdatasync/s, "
            f"{r.get('msgs_per_round', float('nan')):.1f} msgs per group-commit round, "
            f"fsync round trip {r['fsync_ms']:.2f} ms, flush busy {r['flush_busy_pct']:.0f} %"
        )

    current_step = ""
    others: tuple[float, list[tuple[int, str, float]]] = (float("nan"), [])

    def _hand_reports(self, reporters: list[Reporter], wait: float | None) -> None:
        """Give the children's queued reports to the reporters, then let them print; with
        `wait`, wait up to that long for each next report (the children are finishing)."""
        while True:
            try:
                item = self.q.get_nowait() if wait is None else self.q.get(timeout=wait)
            except Exception:
                break
            for r in reporters:
                r.add(*item)
        for r in reporters:
            r.pump()

    def _others(self, snap0: Any, snap1: Any, kids: list[Child]) -> None:
        """CPU used in the window by processes that are not part of this benchmark."""
        if snap0 is None or snap1 is None:
            self.others = (float("nan"), [])
            return
        own = {os.getpid()} | {k.proc.pid for k in kids} | {c.proc.pid for c in self.children}
        if self.cluster is not None:
            for p in (self.cluster.broker, self.cluster.namesrv, self.cluster.slave):
                if p is not None and p.proc is not None:
                    own.add(p.proc.pid)
        rows = [r for r in top_consumers(snap0[1], snap1[1], snap1[0] - snap0[0], 1000) if r[0] not in own and r[2] > 0]
        self.others = (sum(r[2] for r in rows), rows[:3])

    def others_text(self) -> str:
        tot, rows = self.others
        if not rows or tot < 5:
            return f"other processes {tot:.0f} %"
        return f"other processes {tot:.0f} % (" + ", ".join(f"{name}[{pid}] {p:.0f} %" for pid, name, p in rows) + ")"

    # ------------------------------------------------------------------ figures
    def broker_cpu(self, t0: float, t1: float) -> dict:
        c = self.cluster
        assert c is not None and c.cpu is not None
        lag_max, lag_mean = self.lag.window(t0, t1) if self.lag else (float("nan"),) * 2
        return {
            "dispatch_lag_max_msgs": lag_max / self.record_bytes,
            "dispatch_lag_mean_msgs": lag_mean / self.record_bytes,
            "broker_cpu_pct": c.cpu.percent(t0, t1),
            "broker_loop_cpu_pct": c.cpu.percent(t0, t1, main_only=True),
            "broker_loop_wait_pct": c.cpu.wait_percent(t0, t1),
            "broker_cpu_s": c.cpu.seconds(t0, t1),
            "machine_busy_pct": self.machine.busy_percent(t0, t1),
            "steal_pct": self.machine.steal_percent(t0, t1),
            "others_cpu_pct": self.others[0],
            "others_top": [f"{n}[{p}] {c:.0f}%" for p, n, c in self.others[1]],
        }


def lag_text(r: dict) -> str:
    mx, mean = r.get("dispatch_lag_max_msgs"), r.get("dispatch_lag_mean_msgs")
    if mx is None or mx != mx:
        return ""
    return (
        f"\n    dispatch lag (written, not yet in a ConsumeQueue = not yet consumable): "
        f"max {mx:,.0f} msgs, mean {mean:,.0f} msgs"
    )


def lat_stats(blobs: list[bytes], scale: float = 1000.0) -> dict:
    lat = array.array("d")
    for b in blobs:
        lat.frombytes(b)
    vals = sorted(lat)
    if not vals:
        return {"avg_ms": float("nan"), "p50_ms": float("nan"), "p99_ms": float("nan"), "max_ms": float("nan")}
    return {
        "avg_ms": sum(vals) / len(vals) * scale,
        "p50_ms": pct(vals, 0.50) * scale,
        "p99_ms": pct(vals, 0.99) * scale,
        "max_ms": vals[-1] * scale,
    }


# =================================================================================== steps
def raw_step(b: Bench, threads: int, procs: int, req: int, resp: int, warmup: float, duration: float) -> dict:
    """Length-prefixed TCP request/response: the limit for this frame size and concurrency."""
    srv = b._spawn([("rawserver", {})])[0]
    try:
        info = srv.wait_ready()
        scpu = CpuSampler(info["pid"]).start()
        per = split(threads, procs)
        specs = [
            (
                "raw",
                {
                    "port": info["port"],
                    "threads": n,
                    "req_size": req,
                    "resp_size": resp,
                    "warmup": warmup,
                    "duration": duration,
                },
            )
            for n in per
        ]
        kids, t_begin = b.run(specs, [], None, warmup + duration + 60, profile=False)
        t0, t1 = t_begin + warmup, t_begin + warmup + duration
        res = [k.result for k in kids]
        r = {
            "threads": threads,
            "procs": procs,
            "tps": sum(x["win_ok"] for x in res) / duration,  # type: ignore[index]
            "server_cpu_pct": scpu.percent(t0, t1),
            "client_cpu_pct": sum(x["cpu"] for x in res) / duration * 100,  # type: ignore[index]
            **lat_stats([x["lat"] for x in res]),
        }  # type: ignore[index]
        scpu.stop()
        return r
    finally:
        srv.conn.send("stop")
        srv.finish()
        if srv in b.children:
            b.children.remove(srv)


def split(n: int, procs: int) -> list[int]:
    procs = max(1, min(procs, n))
    return [n // procs + (1 if i < n % procs else 0) for i in range(procs)]


def report_bounds(report_interval: float, warmup: float, duration: float) -> tuple[int, list[int]]:
    """(snapshots per report line, the snapshot indexes a report line ends at): one every
    report_interval over the measured window, and one at its end."""
    every = max(1, round(report_interval / SNAP_PERIOD))
    k0 = round(warmup / SNAP_PERIOD)
    k1 = k0 + round(duration / SNAP_PERIOD)
    bounds = list(range(k0, k1 + 1, every))
    if bounds[-1] != k1:
        bounds.append(k1)
    return every, bounds


def send_step(
    b: Bench, sender: str, threads: int, procs: int, warmup: float, duration: float, ok_codes: list[int] | None = None
) -> dict:
    c = b.cluster
    assert c is not None
    a = b.args
    per = split(threads, procs)
    specs = [
        (
            "send",
            {
                "namesrv": c.namesrv_addr,
                "topic": a.topic,
                "threads": n,
                "size": a.size,
                "sender": sender,
                "warmup": warmup,
                "duration": duration,
                "ok_codes": ok_codes,
            },
        )
        for n in per
    ]
    every, bounds = report_bounds(a.report_interval, warmup, duration)
    rep = Reporter("send", list(range(len(specs))), bounds, every, "")
    b.current_step = f"{c.flush} producer {sender} {threads} threads x{procs} procs"
    kids, t_begin = b.run(specs, [rep], (warmup, duration), warmup + duration + 120)
    t0, t1 = t_begin + warmup, t_begin + warmup + duration
    res = [k.result for k in kids]
    ok = sum(x["win_ok"] for x in res)  # type: ignore[index]
    r = {
        "threads": threads,
        "procs": procs,
        "sender": sender,
        "tps": ok / duration,
        "send_failed": sum(x["win_sfail"] for x in res),  # type: ignore[index]
        "response_failed": sum(x["win_rfail"] for x in res),  # type: ignore[index]
        "loadgen_cpu_pct": sum(x["cpu"] for x in res) / duration * 100,  # type: ignore[index]
        "loadgen_cpu_pct_max_proc": max(x["cpu"] for x in res) / duration * 100,  # type: ignore[index]
        "loadgen_wait_pct": max(x["wait"] for x in res) / duration * 100,  # type: ignore[index]
        "first_error": next((x["first_error"] for x in res if x["first_error"]), None),  # type: ignore[index]
        **lat_stats([x["lat"] for x in res]),  # type: ignore[index]
        **b.broker_cpu(t0, t1),
    }
    r["broker_us_per_msg"] = r["broker_cpu_s"] / ok * 1e6 if ok else float("nan")
    r.update(b.flush_figures())
    out(
        f"  [Complete] Send Total: {ok} | Send TPS: {r['tps']:.0f} | Max RT(ms): "
        f"{r['max_ms']:.0f} | Average RT(ms): {r['avg_ms']:7.3f} | Send Failed: "
        f"{r['send_failed']} | Response Failed: {r['response_failed']}"
    )
    out(
        f"    p50 {r['p50_ms']:.3f} ms, p99 {r['p99_ms']:.3f} ms; broker CPU "
        f"{r['broker_cpu_pct']:.0f} % (loop thread {r['broker_loop_cpu_pct']:.0f} % + waiting for a "
        f"CPU {r['broker_loop_wait_pct']:.0f} %), {r['broker_us_per_msg']:.0f} us/msg; load "
        f"generator CPU {r['loadgen_cpu_pct']:.0f} % (+ waiting {r['loadgen_wait_pct']:.0f} %, "
        f"{procs} proc); machine busy {r['machine_busy_pct']:.0f} %, steal "
        f"{r['steal_pct']:.1f} %, {b.others_text()}"
        + (f"; first error: {r['first_error']}" if r["first_error"] else "")
        + b.flush_text(r)
        + lag_text(r)
    )
    return r


async def _admin(namesrv: str, topic: str, fn: Callable[..., Any]) -> Any:
    from rmq.client.api import MQClientAPI

    addr, nqw, nqr = await topic_route(namesrv, topic)
    rc = bench_client()
    try:
        return await fn(MQClientAPI(rc, [namesrv]), rc, addr, nqw, nqr)
    finally:
        await rc.close()


def uvrun(coro: Any) -> Any:
    import uvloop

    return uvloop.run(coro)


def max_offsets(namesrv: str, topic: str) -> list[int]:
    async def fn(api, rc, addr, nqw, nqr):  # type: ignore[no-untyped-def]
        return list(await asyncio.gather(*(api.get_max_offset(addr, topic, i) for i in range(nqr))))

    return uvrun(_admin(namesrv, topic, fn))


def commit_offsets(namesrv: str, topic: str, group: str, offsets: list[int]) -> None:
    async def fn(api, rc, addr, nqw, nqr):  # type: ignore[no-untyped-def]
        sem = asyncio.Semaphore(64)

        async def one(i: int, off: int) -> None:
            async with sem:
                await api.update_consumer_offset(addr, group, topic, i, off)

        await asyncio.gather(*(one(i, o) for i, o in enumerate(offsets)))

    uvrun(_admin(namesrv, topic, fn))


def fill_backlog(namesrv: str, topic: str, n: int, size: int, batch: int = 32, conc: int = 16) -> tuple[int, float]:
    """Put ``n`` messages with SEND_BATCH_MESSAGE, queues round robin."""

    async def fn(api, rc, addr, nq, nqr):  # type: ignore[no-untyped-def]
        bodies = random_bodies(size)
        ids = UniqueIdGenerator()
        state = {"left": n, "q": 0, "done": 0}

        async def worker() -> None:
            k = 0
            while state["left"] > 0:
                m = min(batch, state["left"])
                state["left"] -= m
                qid = state["q"] % nq
                state["q"] += 1
                items = []
                for _ in range(m):
                    props = properties_to_string({"WAIT": "true", "UNIQ_KEY": ids.next_id()})
                    items.append((0, bodies[k % len(bodies)], props))
                    k += 1
                h = SendMessageRequestHeader(
                    PRODUCER_GROUP,
                    topic,
                    "TBW102",
                    4,
                    qid,
                    0,
                    time.time_ns() // 1_000_000,
                    0,
                    properties_to_string({"WAIT": "true"}),
                    0,
                    False,
                    True,
                    None,
                )
                cmd = RemotingCommand(
                    RequestCode.SEND_BATCH_MESSAGE, ext_fields=h.to_v2_ext_fields(), body=encode_batch(items)
                )
                resp = await rc.invoke(addr, cmd, 30)
                if resp.code not in SEND_OK_CODES:
                    raise RuntimeError(f"backlog batch refused: {resp.code} {resp.remark}")
                state["done"] += m

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(conc)))
        return state["done"], time.perf_counter() - t0

    return uvrun(_admin(namesrv, topic, fn))


def probe_sizes(namesrv: str, topic: str, size: int) -> dict:
    """Frame sizes of one real SEND_MESSAGE_V2 / its answer, and of a 32-message pull."""

    async def fn(api, rc, addr, nq, nqr):  # type: ignore[no-untyped-def]
        ids = UniqueIdGenerator()
        cmd = send_command(PRODUCER_GROUP, topic, 0, random_bodies(size, 1)[0], ids)
        req = len(encode(cmd, SerializeType.ROCKETMQ))
        resp = await rc.invoke(addr, cmd, 5)
        resp_size = len(encode(resp, SerializeType.ROCKETMQ))
        qoff = int((resp.ext_fields or {}).get("queueOffset", 0))
        pr = await rc.invoke(addr, pull_command(CONSUMER_GROUP + "_probe", topic, 0, qoff, False, 1), 5)
        msgs = decode_records(pr.body or b"")
        return {"send_req": req, "send_resp": resp_size, "record": msgs[0].store_size if msgs else 1200}

    return uvrun(_admin(namesrv, topic, fn))


def prime_queues(namesrv: str, topic: str, size: int) -> tuple[int, float]:
    """One message into every empty queue of the topic (its ConsumeQueue file is created
    by the first message), so that the measured windows run in the steady state."""

    async def fn(api, rc, addr, nq, nqr):  # type: ignore[no-untyped-def]
        offs = await asyncio.gather(*(api.get_max_offset(addr, topic, i) for i in range(nqr)))
        empty = [i for i, o in enumerate(offs) if o == 0 and i < nq]
        ids = UniqueIdGenerator()
        body = random_bodies(size, 1)[0]
        sem = asyncio.Semaphore(16)

        async def one(qid: int) -> None:
            async with sem:
                resp = await rc.invoke(addr, send_command(PRODUCER_GROUP, topic, qid, body, ids), 30)
                if resp.code not in SEND_OK_CODES:
                    raise RuntimeError(f"priming send refused: {resp.code} {resp.remark}")

        t0 = time.perf_counter()
        await asyncio.gather(*(one(q) for q in empty))
        return len(empty), time.perf_counter() - t0

    return uvrun(_admin(namesrv, topic, fn))


def disk_limit(dir_: Path, record: int, batch: int, seconds: float) -> dict:
    """What SYNC_FLUSH can do at best on this filesystem: sequential pwrite of ``batch``
    records + fdatasync, into a file reserved with posix_fallocate as CommitLog files are
    (so first writes convert unwritten extents, as in the store)."""
    path = dir_ / f"disk-limit-{batch}.tmp"
    size = 256 << 20
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    perf = time.perf_counter
    lat: list[float] = []
    try:
        os.posix_fallocate(fd, 0, size)
        os.fsync(fd)
        buf = b"\x5a" * (record * batch)
        off = 0
        t0 = perf()
        while perf() - t0 < seconds and off + len(buf) <= size:
            t = perf()
            os.pwrite(fd, buf, off)
            os.fdatasync(fd)
            lat.append(perf() - t)
            off += len(buf)
        el = perf() - t0
    finally:
        os.close(fd)
        os.unlink(path)
    lat.sort()
    return {
        "batch": batch,
        "record_bytes": record,
        "syncs_per_s": len(lat) / el,
        "msgs_per_s": len(lat) * batch / el,
        "p50_ms": pct(lat, 0.5) * 1000,
        "p99_ms": pct(lat, 0.99) * 1000,
    }


def probe_pull_size(namesrv: str, topic: str) -> dict:
    async def fn(api, rc, addr, nq, nqr):  # type: ignore[no-untyped-def]
        cmd = pull_command(CONSUMER_GROUP + "_probe", topic, 1, 0, False)
        resp = await rc.invoke(addr, cmd, 5)
        n = len(decode_records(resp.body or b""))
        return {
            "pull_req": len(encode(cmd, SerializeType.ROCKETMQ)),
            "pull_resp": len(encode(resp, SerializeType.ROCKETMQ)),
            "pull_msgs": n,
        }

    return uvrun(_admin(namesrv, topic, fn))


def drain_step(b: Bench, consumer: str, total: int, group: str, decode_limit: bool) -> dict:
    c = b.cluster
    assert c is not None
    a = b.args
    timeout = 60 + total / 4000
    every = max(1, round(a.report_interval / SNAP_PERIOD))
    specs = [
        (
            "consume",
            {
                "namesrv": c.namesrv_addr,
                "topic": a.topic,
                "purpose": "drain",
                "consumer": consumer,
                "group": group,
                "target": total,
                "consume_threads": a.consume_threads,
                "timeout": timeout,
                "decode_limit": decode_limit,
                "decode_seconds": a.decode_seconds,
                "profile": a.profile_consumer,
                "profile_clock": a.profile_clock,
            },
        )
    ]
    rep = Reporter("consume", [0], None, every, "")
    b.current_step = f"{c.flush} consumer drain {consumer}"
    kids, t_begin = b.run(specs, [rep], None, timeout + 120)
    x = kids[0].result
    assert x is not None
    n = x["count"]
    if x.get("profile"):
        b.consumer_profiles.append((b.current_step, x["profile"]))
    span = max(x["t_last"] - x["t_first"], 1e-9)
    span_go = max(x["t_last"] - x["t_go"], 1e-9)
    r = {
        "consumer": consumer,
        "msgs": n,
        "complete": x["complete"],
        "target": total,
        "msgs_per_s": n / span,
        "msgs_per_s_from_start": n / span_go,
        "mb_per_s": x["bytes"] / span / MB,
        "b2c_avg_ms": x["b2c_avg"],
        "s2c_avg_ms": x["s2c_avg"],
        "startup_s": x["t_first"] - x["t_go"],
        "consumer_cpu_pct": (x["cpu_end"] - x["cpu_first"]) / span * 100,
        # from the go (pulls start) to the target: all the CPU the drain cost the consumer
        "consumer_us_per_msg": (x["cpu_end"] - x["cpu_go"]) / max(n, 1) * 1e6,
        "consumer_gc_ms": x["gc_total_ms"],
        "consumer_gc_max_ms": x["gc_max_ms"],
        "consumer_wait_pct": x["wait"] / max(x["t_last"] - x["t_go"], 1e-9) * 100,
        "fail": x["fail"],
        "errors": x["errors"],
        "queues": x["queues"],
        **b.broker_cpu(x["t_first"], x["t_last"]),
    }
    r["broker_us_per_msg"] = r["broker_cpu_s"] / n * 1e6 if n else float("nan")
    if "decode" in x:
        r["decode"] = x["decode"]
    out(
        f"  [Complete] Consumed: {n}/{total}{'' if x['complete'] else ' (TIMED OUT)'} in "
        f"{span:.2f} s (first to last message; {r['startup_s']:.2f} s from start to the first) | "
        f"Consume TPS: {r['msgs_per_s']:.0f} | {r['mb_per_s']:.1f} MB/s | AVG(B2C) RT(ms): "
        f"{r['b2c_avg_ms']:.1f} | AVG(S2C) RT(ms): {r['s2c_avg_ms']:.1f} | Consume Fail: {r['fail']}"
    )
    out(
        f"    broker CPU {r['broker_cpu_pct']:.0f} % (loop {r['broker_loop_cpu_pct']:.0f} % + waiting "
        f"{r['broker_loop_wait_pct']:.0f} %), {r['broker_us_per_msg']:.1f} us/msg; consumer CPU "
        f"{r['consumer_cpu_pct']:.0f} % (+ waiting for a CPU {r['consumer_wait_pct']:.0f} %); machine "
        f"busy {r['machine_busy_pct']:.0f} %, steal {r['steal_pct']:.1f} %, {b.others_text()}"
        + (f"; errors: {x['errors']}" if x["errors"] else "")
    )
    out(
        f"    consumer CPU {r['consumer_us_per_msg']:.2f} us/msg (process, start to target); cyclic GC "
        f"{r['consumer_gc_ms']:.0f} ms = {r['consumer_gc_ms'] * 1e3 / max(n, 1):.2f} us/msg "
        f"(longest pause {r['consumer_gc_max_ms']:.1f} ms)"
        + ("; CONSUMER UNDER cProfile (slowed)" if a.profile_consumer and consumer == "client" else "")
    )
    if "decode" in x and x["decode"]:
        d = x["decode"]
        out(
            f"    consumer's own limit (same pull bodies, in-process, no network): decode "
            f"{d['decode_msgs_per_s']:,.0f} msgs/s; decode + per-message stats "
            f"{d['decode_stats_msgs_per_s']:,.0f} msgs/s ({d['msgs_per_body']:.0f} msgs, "
            f"{d['body_bytes'] / 1024:.0f} KiB per pull body)"
        )
    return r


def e2e_step(b: Bench, threads: int, sender: str, consumer: str, warmup: float, duration: float) -> dict:
    c = b.cluster
    assert c is not None
    a = b.args
    group = f"{CONSUMER_GROUP}_e2e_{consumer}"
    if consumer == "client":
        commit_offsets(c.namesrv_addr, a.topic, group, max_offsets(c.namesrv_addr, a.topic))
    every, bounds = report_bounds(a.report_interval, warmup, duration)
    specs = [
        (
            "consume",
            {
                "namesrv": c.namesrv_addr,
                "topic": a.topic,
                "purpose": "e2e",
                "consumer": consumer,
                "group": group,
                "consume_threads": a.consume_threads,
                "warmup": warmup,
                "duration": duration,
            },
        ),
        (
            "send",
            {
                "namesrv": c.namesrv_addr,
                "topic": a.topic,
                "threads": threads,
                "size": a.size,
                "sender": sender,
                "warmup": warmup,
                "duration": duration,
            },
        ),
    ]
    reps = [Reporter("send", [1], bounds, every, "[send]    "), Reporter("consume", [0], bounds, every, "[consume] ")]
    b.current_step = f"{c.flush} e2e {threads} {sender} senders + {consumer} consumer"
    kids, t_begin = b.run(specs, reps, (warmup, duration), warmup + duration + 120)
    t0, t1 = t_begin + warmup, t_begin + warmup + duration
    cx, sx = kids[0].result, kids[1].result
    assert cx is not None and sx is not None
    s_lat = lat_stats([sx["lat"]])
    e_lat = lat_stats([cx["e2e"]], scale=1.0)
    r = {
        "threads": threads,
        "sender": sender,
        "consumer": consumer,
        "send_tps": sx["win_ok"] / duration,
        "consume_tps": cx["win_count"] / duration,
        "send_p50_ms": s_lat["p50_ms"],
        "send_p99_ms": s_lat["p99_ms"],
        "send_avg_ms": s_lat["avg_ms"],
        "e2e_p50_ms": e_lat["p50_ms"],
        "e2e_p99_ms": e_lat["p99_ms"],
        "e2e_avg_ms": e_lat["avg_ms"],
        "e2e_max_ms": e_lat["max_ms"],
        "sender_cpu_pct": sx["cpu"] / duration * 100,
        "consumer_cpu_pct": cx["cpu"] / duration * 100,
        "sender_wait_pct": sx["wait"] / duration * 100,
        "consumer_wait_pct": cx["wait"] / duration * 100,
        "send_failed": sx["win_sfail"] + sx["win_rfail"],
        "consume_fail": cx["fail"],
        "consumer_loop_max_stall_ms": cx["loop_max_stall_ms"],
        "consumer_loop_stalls_50ms": cx["loop_stalls_50ms"],
        "consumer_gc_max_ms": cx["gc_max_ms"],
        "sender_loop_max_stall_ms": sx["loop_max_stall_ms"],
        **b.broker_cpu(t0, t1),
        **b.flush_figures(),
    }
    out(
        f"  [Complete] Send TPS: {r['send_tps']:.0f} | Consume TPS: {r['consume_tps']:.0f} | "
        f"send p50/p99 {r['send_p50_ms']:.2f}/{r['send_p99_ms']:.2f} ms | end-to-end p50/p99 "
        f"{r['e2e_p50_ms']:.1f}/{r['e2e_p99_ms']:.1f} ms (max {r['e2e_max_ms']:.0f})"
    )
    out(
        f"    broker CPU {r['broker_cpu_pct']:.0f} % (loop {r['broker_loop_cpu_pct']:.0f} % + waiting "
        f"{r['broker_loop_wait_pct']:.0f} %); sender CPU {r['sender_cpu_pct']:.0f} % (+ waiting "
        f"{r['sender_wait_pct']:.0f} %), consumer CPU {r['consumer_cpu_pct']:.0f} % (+ waiting "
        f"{r['consumer_wait_pct']:.0f} %); consumer event loop: longest stall "
        f"{r['consumer_loop_max_stall_ms']:.0f} ms ({r['consumer_loop_stalls_50ms']} over 50 ms), "
        f"longest GC pause {r['consumer_gc_max_ms']:.0f} ms; sender loop longest stall "
        f"{r['sender_loop_max_stall_ms']:.0f} ms; machine busy "
        f"{r['machine_busy_pct']:.0f} %, steal {r['steal_pct']:.1f} %, {b.others_text()}"
        + b.flush_text(r)
        + lag_text(r)
    )
    return r


# =================================================================================== a flush mode
def mode_label(flush: str, variant: str) -> str:
    return flush if variant == "plain" else f"{flush}+{variant}"


def run_mode(b: Bench, flush: str, root: Path, variant: str = "plain") -> dict:
    a = b.args
    res: dict[str, Any] = {"raw": {}, "producer": {}, "consumer": {}, "e2e": None}
    label = mode_label(flush, variant)
    workdir = root / label.lower().replace("+", "-")
    out(f"\n=== {label}: starting rmq namesrv + broker (store under {workdir})")
    with (
        security_variant(variant, workdir) as security_conf,
        Cluster(
            workdir,
            flush,
            profile=a.profile_broker,
            stats=a.broker_stats,
            profile_clock=a.profile_clock,
            switch_interval=a.broker_switch_interval,
            conf={**a.broker_conf, **security_conf},
        ) as c,
    ):
        b.cluster = c
        try:
            out(f"    namesrv {c.namesrv_addr}, broker {c.broker_addr} (pid {c.broker_pid})")
            sizes = probe_sizes(c.namesrv_addr, a.topic, a.size)
            res["frames"] = sizes
            b.record_bytes = sizes["record"]
            b.lag = DispatchLagSampler(c.broker_addr).start()
            out(
                f"    SEND_MESSAGE_V2 frame {sizes['send_req']} B (binary header, {a.size} B body),"
                f" answer {sizes['send_resp']} B"
            )

            t_p = time.time()
            n_primed, secs = prime_queues(c.namesrv_addr, a.topic, a.size)
            res["primed_queues"] = n_primed
            if n_primed:
                out(
                    f"    primed {n_primed} empty queues with one message each (creates their "
                    f"ConsumeQueue files): {secs:.2f} s, broker CPU "
                    f"{c.cpu.seconds(t_p, time.time()):.2f} s"
                )  # type: ignore[union-attr]

            # ---------------------------------------------------------- machine limit
            if "producer" in a.run or "e2e" in a.run:
                out(
                    f"\n--- raw TCP request/response ({sizes['send_req']} B -> "
                    f"{sizes['send_resp']} B, child processes, 1 connection): the limit"
                )
                for n in a.threads:
                    r = raw_step(b, n, 1, sizes["send_req"], sizes["send_resp"], a.raw_warmup, a.raw_duration)
                    res["raw"][f"{n}x1"] = r
                    out(
                        f"  {n:>3} senders: {r['tps']:>9,.0f} req/s  p50 {r['p50_ms']:.3f} ms  "
                        f"p99 {r['p99_ms']:.3f} ms  server CPU {r['server_cpu_pct']:.0f} %  "
                        f"client CPU {r['client_cpu_pct']:.0f} %"
                    )

            # ---------------------------------------------------------- consumer
            if "consumer" in a.run:
                out(f"\n--- consumer: backlog of {a.backlog:,} x {a.size} B messages in {a.topic}")
                before = sum(max_offsets(c.namesrv_addr, a.topic))
                need = max(0, a.backlog - before)
                if need:
                    t_fill0 = time.time()
                    put, secs = fill_backlog(c.namesrv_addr, a.topic, need, a.size)
                    out(
                        f"    put {put:,} messages with SEND_BATCH_MESSAGE (32 per batch, 16 in "
                        f"flight) in {secs:.1f} s = {put / secs:,.0f} msgs/s (broker CPU "
                        f"{c.cpu.percent(t_fill0, time.time()):.0f} %)"
                    )  # type: ignore[union-attr]
                expected = before + need
                t_w = time.time()
                offs = max_offsets(c.namesrv_addr, a.topic)
                while sum(offs) < expected and time.time() - t_w < 300:
                    time.sleep(0.1)
                    offs = max_offsets(c.namesrv_addr, a.topic)
                if need:
                    lag_max, _ = b.lag.window(t_fill0, time.time()) if b.lag else (float("nan"),) * 2
                    out(
                        f"    dispatch caught up {time.time() - t_w:.2f} s after the last put was "
                        f"answered (max dispatch lag during the fill "
                        f"{lag_max / b.record_bytes:,.0f} msgs)"
                    )
                    res["consumer"]["fill_dispatch_catchup_s"] = time.time() - t_w
                total = sum(offs)
                res["consumer"]["backlog"] = total
                res["consumer"]["queues"] = len(offs)
                out(f"    backlog: {total:,} messages over {len(offs)} queues")
                ps = probe_pull_size(c.namesrv_addr, a.topic)
                res["frames"].update(ps)
                nraw = min(len(offs), a.raw_pull_inflight)
                rr = raw_step(b, nraw, 1, ps["pull_req"], ps["pull_resp"], a.raw_warmup, a.raw_duration)
                rr["msgs_per_s"] = rr["tps"] * ps["pull_msgs"]
                rr["mb_per_s"] = rr["tps"] * ps["pull_resp"] / MB
                res["consumer"]["raw"] = rr
                out(
                    f"    raw limit for pull-sized answers ({ps['pull_req']} B -> {ps['pull_resp']} B"
                    f" = {ps['pull_msgs']} msgs, {nraw} in flight): {rr['tps']:,.0f} answers/s = "
                    f"{rr['msgs_per_s']:,.0f} msgs/s, {rr['mb_per_s']:.0f} MB/s (server CPU "
                    f"{rr['server_cpu_pct']:.0f} %, client CPU {rr['client_cpu_pct']:.0f} %)"
                )
                for i, cons in enumerate(a.consumer):
                    out(
                        f"\n  drain with the {cons} consumer (group {CONSUMER_GROUP}_{cons}, from "
                        f"offset 0, {a.consume_threads} consume concurrency)"
                    )
                    res["consumer"][cons] = drain_step(
                        b, cons, total, f"{CONSUMER_GROUP}_{cons}", decode_limit=(i == 0)
                    )
                if a.consumer and "decode" in res["consumer"][a.consumer[0]]:
                    res["consumer"]["decode"] = res["consumer"][a.consumer[0]].pop("decode")

            # ---------------------------------------------------------- e2e
            if "e2e" in a.run:
                out(
                    f"\n--- e2e: {a.e2e_threads} {a.e2e_sender} senders + one {a.e2e_consumer} "
                    f"consumer group on {a.topic}, {a.e2e_duration:g} s after {a.warmup:g} s warm-up"
                )
                res["e2e"] = e2e_step(b, a.e2e_threads, a.e2e_sender, a.e2e_consumer, a.warmup, a.e2e_duration)

            def disk(key: str, label: str) -> None:
                if flush != "SYNC_FLUSH" or "producer" not in a.run:
                    return
                out(
                    f"\n--- disk limit ({label}): {sizes['record']} B CommitLog records, sequential "
                    f"pwrite + fdatasync of N records (a fallocated file next to the store)"
                )
                res[key] = {}
                for n in a.threads:
                    d = disk_limit(workdir / "broker" / "store", sizes["record"], n, a.disk_seconds)
                    res[key][str(n)] = d
                    out(
                        f"  {n:>3} records per fdatasync: {d['syncs_per_s']:>7,.0f} fdatasync/s  "
                        f"p50 {d['p50_ms']:.2f} ms  p99 {d['p99_ms']:.2f} ms  = "
                        f"{d['msgs_per_s']:>9,.0f} msgs/s"
                    )

            # ---------------------------------------------------------- producer
            disk("disk", "before the producer runs")
            if "producer" in a.run:
                for sender in a.sender:
                    res["producer"][sender] = {}
                    for n in a.threads:
                        procs_list = [1] if a.procs == "auto" else [int(a.procs)]
                        for procs in procs_list:
                            out(
                                f"\n--- producer: {sender} sender, {n} threads, {procs} process(es),"
                                f" {a.warmup:g} s warm-up + {a.duration:g} s"
                            )
                            r = send_step(b, sender, n, procs, a.warmup, a.duration)
                            res["producer"][sender][f"{n}x{procs}"] = r
                        gen = r["loadgen_cpu_pct"] + r["loadgen_wait_pct"]
                        brk = r["broker_loop_cpu_pct"] + r["broker_loop_wait_pct"]
                        if a.procs == "auto" and n >= 2 and gen >= 90 and brk < 90:
                            out(
                                f"    the load generator is CPU-bound (CPU + waiting for a CPU "
                                f"{gen:.0f} %) and the broker's loop is not ({brk:.0f} %): again "
                                f"with the senders split over 2 processes"
                            )
                            r2 = send_step(b, sender, n, 2, a.warmup, a.duration)
                            res["producer"][sender][f"{n}x2"] = r2
                            if f"{n}x2" not in res["raw"]:
                                rr = raw_step(
                                    b, n, 2, sizes["send_req"], sizes["send_resp"], a.raw_warmup, a.raw_duration
                                )
                                res["raw"][f"{n}x2"] = rr
                                out(f"    raw with 2 client processes, {n} senders: {rr['tps']:,.0f} req/s")
            disk("disk_after", "after the producer runs")
        finally:
            b.cluster = None
            if b.lag is not None:
                b.lag.stop()
                b.lag = None
    return res


# =================================================================================== report
def fmt(v: Any, spec: str = ",.0f") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, spec)


def cap(us_per_msg: float) -> float:
    return 1e6 / us_per_msg if us_per_msg and us_per_msg == us_per_msg else float("nan")


def table(header: list[str], rows: list[list[str]]) -> None:
    w = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    out("  " + "  ".join(h.rjust(w[i]) for i, h in enumerate(header)))
    for r in rows:
        out("  " + "  ".join(x.rjust(w[i]) for i, x in enumerate(r)))


# A report column: its header, the row's key (or a function of the row) and how ``fmt``
# formats the value (None: the value is the cell's text). A row is a result dict with
# the table's context on top: flush, label, thr, n_procs, ref, raw, disk, dec.
Column = tuple[str, str | Callable[[dict], Any], str | None]


def part(name: str, key: str) -> Callable[[dict], Any]:
    """``key`` of the row's ``name`` result (None when the row has none)."""
    return lambda r: r[name][key] if r[name] else None


def over(num: str, name: str, key: str) -> Callable[[dict], Any]:
    """The row's ``num`` over ``key`` of its ``name`` result (None when it has none)."""
    return lambda r: r[num] / r[name][key] if r[name] else None


def per_core(r: dict) -> float:
    return cap(r["broker_us_per_msg"])


PRODUCER_COLUMNS: list[Column] = [
    ("mode", "flush", None),
    ("sender", "label", None),
    ("thr", "thr", None),
    ("procs", "n_procs", None),
    ("send TPS", "tps", ",.0f"),
    ("ref 4.9.8", "ref", ",.0f"),
    ("rmq/ref", lambda r: r["tps"] / r["ref"] if r["ref"] else None, ".2f"),
    ("raw TPS", part("raw", "tps"), ",.0f"),
    ("rmq/raw", over("tps", "raw", "tps"), ".2f"),
    ("disk TPS", part("disk", "msgs_per_s"), ",.0f"),
    ("rmq/disk", over("tps", "disk", "msgs_per_s"), ".2f"),
    ("avg RT", "avg_ms", ".2f"),
    ("p50", "p50_ms", ".2f"),
    ("p99", "p99_ms", ".2f"),
    ("max", "max_ms", ".0f"),
    ("fail", lambda r: str(r["send_failed"] + r["response_failed"]), None),
    ("brk CPU%", "broker_cpu_pct", ",.0f"),
    ("loop%", "broker_loop_cpu_pct", ",.0f"),
    ("loop wait%", "broker_loop_wait_pct", ",.0f"),
    ("brk us/msg", "broker_us_per_msg", ",.0f"),
    ("cap/core", per_core, ",.0f"),
    ("gen CPU%", "loadgen_cpu_pct", ",.0f"),
    ("gen wait%", "loadgen_wait_pct", ",.0f"),
    ("lag max", "dispatch_lag_max_msgs", ",.0f"),
    ("busy%", "machine_busy_pct", ",.0f"),
    ("others%", "others_cpu_pct", ",.0f"),
    ("steal%", "steal_pct", ".1f"),
]
RAW_COLUMNS: list[Column] = [
    ("mode", "flush", None),
    ("thr", "thr", None),
    ("procs", "n_procs", None),
    ("req/s", "tps", ",.0f"),
    ("p50 ms", "p50_ms", ".3f"),
    ("p99 ms", "p99_ms", ".3f"),
    ("server CPU%", "server_cpu_pct", ",.0f"),
    ("client CPU%", "client_cpu_pct", ",.0f"),
]
CONSUMER_COLUMNS: list[Column] = [
    ("mode", "flush", None),
    ("consumer", "label", None),
    ("msgs", "msgs", ",.0f"),
    ("done", lambda r: "yes" if r["complete"] else "NO", None),
    ("msgs/s", "msgs_per_s", ",.0f"),
    ("MB/s", "mb_per_s", ".1f"),
    ("ref 4.9.8", lambda r: REF_DRAIN_MSGS_PER_S, ",.0f"),
    ("rmq/ref", lambda r: r["msgs_per_s"] / REF_DRAIN_MSGS_PER_S, ".2f"),
    ("raw msgs/s", part("raw", "msgs_per_s"), ",.0f"),
    ("rmq/raw", over("msgs_per_s", "raw", "msgs_per_s"), ".2f"),
    ("decode msgs/s", lambda r: r["dec"].get("decode_msgs_per_s"), ",.0f"),
    ("B2C ms", "b2c_avg_ms", ",.0f"),
    ("S2C ms", "s2c_avg_ms", ",.0f"),
    ("brk CPU%", "broker_cpu_pct", ",.0f"),
    ("loop%", "broker_loop_cpu_pct", ",.0f"),
    ("brk us/msg", "broker_us_per_msg", ".1f"),
    ("cap/core", per_core, ",.0f"),
    ("cons CPU%", "consumer_cpu_pct", ",.0f"),
    ("cons wait%", "consumer_wait_pct", ",.0f"),
    ("busy%", "machine_busy_pct", ",.0f"),
    ("others%", "others_cpu_pct", ",.0f"),
]
E2E_COLUMNS: list[Column] = [
    ("mode", "flush", None),
    ("thr", lambda r: str(r["threads"]), None),
    ("send/cons", lambda r: f"{r['sender']}/{r['consumer']}", None),
    ("send TPS", "send_tps", ",.0f"),
    ("cons TPS", "consume_tps", ",.0f"),
    ("send p50", "send_p50_ms", ".2f"),
    ("send p99", "send_p99_ms", ".2f"),
    ("e2e p50", "e2e_p50_ms", ".1f"),
    ("e2e p99", "e2e_p99_ms", ".1f"),
    ("brk CPU%", "broker_cpu_pct", ",.0f"),
    ("loop%", "broker_loop_cpu_pct", ",.0f"),
    ("loop wait%", "broker_loop_wait_pct", ",.0f"),
    ("send CPU%", "sender_cpu_pct", ",.0f"),
    ("cons CPU%", "consumer_cpu_pct", ",.0f"),
    ("cons wait%", "consumer_wait_pct", ",.0f"),
    ("lag max", "dispatch_lag_max_msgs", ",.0f"),
    ("busy%", "machine_busy_pct", ",.0f"),
    ("others%", "others_cpu_pct", ",.0f"),
]


def column_table(rows: list[dict], columns: list[Column]) -> None:
    cells = []
    for row in rows:
        values = ((what(row) if callable(what) else row[what], spec) for _, what, spec in columns)
        cells.append([v if spec is None else fmt(v, spec) for v, spec in values])
    table([header for header, _, _ in columns], cells)


def report(results: dict[str, dict], args: argparse.Namespace) -> None:
    out("\n================================ summary ================================")
    out(
        "ref 4.9.8 = the real RocketMQ 4.9.8 broker under its own Java tool on this kind of "
        "machine,\nquoted from the issue (NOT measured here). raw = length-prefixed TCP "
        "request/response of the same frame sizes and concurrency, measured in this run."
    )
    rows = []
    for flush, res in results.items():
        for sender, pts in res["producer"].items():
            for key, r in pts.items():
                n, procs = (int(x) for x in key.split("x"))
                raw = res["raw"].get(key) or res["raw"].get(f"{n}x1")
                ref = REF_SEND_TPS.get(flush, {}).get(n)
                disk = (res.get("disk") or {}).get(str(n))
                ctx = {"flush": flush, "label": sender, "thr": str(n), "n_procs": str(procs)}
                rows.append({**r, **ctx, "ref": ref, "raw": raw, "disk": disk})
    if rows:
        out("\nproducer (Java Producer tool equivalent; synchronous senders, 1 KiB, SEND_MESSAGE_V2, binary headers)")
        column_table(rows, PRODUCER_COLUMNS)
        out(
            "  (RT in ms; brk = broker process, loop = its event-loop thread; loop wait = share of "
            "the window that\n   thread was runnable but waiting for a CPU (taken by other "
            "processes): loop% + loop wait% near 100\n   = the broker is CPU-bound; us/msg = "
            "broker CPU per message;\n   cap/core = 1e6 / us/msg, the broker's msgs/s if it had one CPU to "
            "itself at that cost; gen = load\n   generator processes summed; busy = whole machine, "
            "100 % = both CPUs; others = CPU of processes\n   that are not part of this benchmark, "
            "in % of one CPU; disk = SYNC_FLUSH only: N records per fdatasync, N = threads;\n   lag max = "
            "the most messages written but not yet in a ConsumeQueue, polled every 0.1 s)"
        )
    rows = []
    for flush, res in results.items():
        for key, r in res["raw"].items():
            rows.append({**r, "flush": flush, "thr": key.split("x")[0], "n_procs": key.split("x")[1]})
    if rows:
        out("\nraw TCP request/response limit (send-sized frames)")
        column_table(rows, RAW_COLUMNS)
    rows = []
    for flush, res in results.items():
        cons = res["consumer"]
        raw = cons.get("raw")
        dec = cons.get("decode") or {}
        for name in args.consumer:
            r = cons.get(name)
            if not r:
                continue
            rows.append({**r, "flush": flush, "label": name, "raw": raw, "dec": dec})
    if rows:
        out(f"\nconsumer drain (Java Consumer tool equivalent; {args.topic}, from offset 0)")
        column_table(rows, CONSUMER_COLUMNS)
        out(
            "  (msgs/s from the first to the last message consumed; MB = 10^6 B of records; "
            "decode = the consumer's in-process decode rate of the same pull bodies)"
        )
    rows = []
    for flush, res in results.items():
        r = res.get("e2e")
        if not r:
            continue
        rows.append({**r, "flush": flush})
    if rows:
        out("\ne2e (senders and one consumer group at once)")
        column_table(rows, E2E_COLUMNS)
        out(
            "  (latencies in ms; end-to-end = consume time - born timestamp, ms resolution; lag max ="
            " the most\n   messages written but not yet dispatched to a ConsumeQueue, polled "
            "every 0.1 s)"
        )


def security_report(results: dict[str, dict], args: argparse.Namespace) -> None:
    """Per flush mode and sender count: each variant's TPS and broker CPU per message
    against plain's in the same run."""
    out("\nACL / TLS cost (same run, fresh cluster per variant; ratio = variant / plain)")
    header = ["mode", "variant", "sender", "thr", "TPS", "TPS ratio", "brk us/msg", "us/msg ratio", "p99 ms"]
    rows = []
    for flush in args.modes:
        base = results.get(flush, {}).get("producer", {})
        for variant in args.security:
            res = results.get(mode_label(flush, variant), {}).get("producer", {})
            for sender, pts in res.items():
                for key, r in pts.items():
                    b0 = base.get(sender, {}).get(key)
                    rows.append(
                        [
                            flush,
                            variant,
                            sender,
                            key,
                            f"{r['tps']:,.0f}",
                            f"{r['tps'] / b0['tps']:.3f}" if b0 and b0["tps"] else "-",
                            f"{r['broker_us_per_msg']:.1f}",
                            f"{r['broker_us_per_msg'] / b0['broker_us_per_msg']:.3f}" if b0 else "-",
                            f"{r['p99_ms']:.2f}",
                        ]
                    )
    table(header, rows)


def print_profiles(profiles: list[tuple[str, str]], top: int, what: str = "broker") -> None:
    for step, path in profiles:
        s = io.StringIO()
        st = pstats.Stats(path, stream=s)
        st.sort_stats("tottime").print_stats(top)
        out(f"\n--- {what} cProfile (event-loop thread), {step}: top {top} by tottime")
        text = s.getvalue()
        lines = text.splitlines()
        # drop pstats' preamble up to the column header
        for i, line in enumerate(lines):
            if "ncalls" in line:
                lines = lines[i - 2 :]
                break
        out("\n".join(lines))


def _clean(v: Any) -> Any:
    if isinstance(v, float):
        return None if math.isnan(v) or math.isinf(v) else round(v, 4)
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


# =================================================================================== main
def add_run_args(ap: argparse.ArgumentParser) -> None:
    """The options Bench and bench_session read, shared with ha_bench.py."""
    ap.add_argument("--topic", default="BenchmarkTest")
    ap.add_argument("--size", type=int, default=1024, help="body bytes (default 1024)")
    ap.add_argument("--duration", type=float, default=20.0, help="measured seconds per point")
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument(
        "--report-interval",
        type=float,
        default=10.0,
        help="Java-style report line period, s (the tool's -ri, default 10)",
    )
    ap.add_argument(
        "--profile-broker",
        action="store_true",
        help="the broker (ha_bench.py: the master) under cProfile during each measured window "
        "(slowed); prints the top functions",
    )
    ap.add_argument(
        "--profile-clock",
        choices=["cpu", "wall"],
        default="wall",
        help="cProfile timer: wall (default; perf_counter, cheap; time the loop "
        "is preempted is charged to the function running, i.e. roughly in "
        "proportion; blocking shows) or cpu (time.thread_time: exact CPU but "
        "a syscall per event, which slows the broker several times)",
    )
    ap.add_argument("--workdir", default=None, help="parent directory for the temp store")
    ap.add_argument("--keep", action="store_true", help="keep the store / logs directory")
    ap.add_argument("--json", action="store_true", help="one JSON object as the last line")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--modes", default="ASYNC_FLUSH,SYNC_FLUSH", help="broker flush modes, one fresh cluster each (default both)"
    )
    ap.add_argument("--run", default="producer,consumer,e2e", help="which benchmarks (default producer,consumer,e2e)")
    ap.add_argument("--threads", default="1,16,64", help="sender counts (default 1,16,64)")
    ap.add_argument(
        "--sender",
        default="lean,client",
        help="producer-mode senders: lean (Java tool's requests, least client work), "
        "client (rmq.client.Producer); default both",
    )
    ap.add_argument(
        "--consumer", default="lean,client", help="drain consumers: lean (bare long-poll loops), client (PushConsumer)"
    )
    ap.add_argument(
        "--procs", default="auto", help="sender processes: 1, 2 or auto (default: 2 more when 1 is CPU-bound)"
    )
    add_run_args(ap)
    ap.add_argument(
        "--security",
        default="plain",
        help=f"comma list of {', '.join(SECURITY_VARIANTS)}: each on its own fresh cluster, compared with "
        "plain (acl: aclEnable with an ordinary account every client signs with; tls: every client on TLS)",
    )
    ap.add_argument("--backlog", type=int, default=500_000)
    ap.add_argument("--consume-threads", type=int, default=20)
    ap.add_argument("--e2e-threads", type=int, default=16)
    ap.add_argument("--e2e-duration", type=float, default=20.0)
    ap.add_argument("--e2e-sender", default="client", choices=["lean", "client"])
    ap.add_argument("--e2e-consumer", default="client", choices=["lean", "client"])
    ap.add_argument("--raw-duration", type=float, default=4.0)
    ap.add_argument("--raw-warmup", type=float, default=1.0)
    ap.add_argument("--raw-pull-inflight", type=int, default=1024)
    ap.add_argument("--decode-seconds", type=float, default=1.0)
    ap.add_argument("--disk-seconds", type=float, default=2.0, help="seconds per disk-limit point (SYNC_FLUSH)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 3 s points, 1 s warm-up, 50k backlog, 5 s e2e")
    ap.add_argument("--profile-top", type=int, default=25)
    ap.add_argument(
        "--profile-consumer",
        action="store_true",
        help="the client drain consumer under cProfile (its event-loop thread, start to target; "
        "slowed); prints the top --profile-top functions by tottime",
    )
    ap.add_argument(
        "--broker-stats",
        action="store_true",
        help="start the broker through bench/_cluster.py (same Broker object) to "
        "report store flush counters per window (fdatasync/s, msgs per round)",
    )
    ap.add_argument(
        "--broker-switch-interval",
        type=float,
        default=None,
        metavar="SECONDS",
        help="experiment: sys.setswitchinterval in the broker (implies the "
        "in-process launcher); Python's default is 0.005",
    )
    ap.add_argument(
        "--broker-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra broker.conf line (repeatable), e.g. messageIndexEnable=false",
    )
    a = ap.parse_args(argv)
    if a.quick:  # shorter defaults; values given on the command line win
        quick = {
            "duration": 3.0,
            "warmup": 1.0,
            "report_interval": 1.0,
            "backlog": 50_000,
            "e2e_duration": 5.0,
            "raw_duration": 2.0,
            "raw_warmup": 0.5,
            "decode_seconds": 0.5,
            "disk_seconds": 1.0,
        }
        for k, v in quick.items():
            if getattr(a, k) == ap.get_default(k):
                setattr(a, k, v)
    a.modes = [m.strip().upper() for m in a.modes.split(",") if m.strip()]
    for m in a.modes:
        if m not in ("ASYNC_FLUSH", "SYNC_FLUSH"):
            ap.error(f"unknown flush mode {m}")
    a.run = [x.strip() for x in a.run.split(",") if x.strip()]
    for x in a.run:
        if x not in ("producer", "consumer", "e2e"):
            ap.error(f"unknown benchmark {x}")
    a.threads = [int(x) for x in a.threads.split(",")]
    a.security = [x.strip() for x in a.security.split(",") if x.strip()]
    for x in a.security:
        if x not in SECURITY_VARIANTS:
            ap.error(f"--security: unknown variant {x} (one of {', '.join(SECURITY_VARIANTS)})")
    if a.security != ["plain"] and "plain" not in a.security:
        a.security.insert(0, "plain")  # the baseline every variant is compared with
    a.sender = [x.strip() for x in a.sender.split(",") if x.strip()]
    a.consumer = [x.strip() for x in a.consumer.split(",") if x.strip()]
    conf = {}
    for kv in a.broker_conf:
        k, sep, v = kv.partition("=")
        if not sep:
            ap.error(f"--broker-conf {kv!r}: expected KEY=VALUE")
        conf[k.strip()] = v.strip()
    a.broker_conf = conf
    if a.procs not in ("auto", "1", "2"):
        ap.error("--procs: 1, 2 or auto")
    return a


@contextlib.contextmanager
def bench_session(a: argparse.Namespace, prefix: str) -> Iterator[tuple[Bench, Path]]:
    """A Bench and a scratch directory for one run: however the run ends, the bench is
    closed and the directory removed (kept with --keep); the run's total time is printed."""
    root = Path(tempfile.mkdtemp(prefix=prefix, dir=a.workdir))
    b = Bench(a)
    t_start = time.time()
    try:
        yield b, root
    finally:
        b.close()
        if a.keep:
            out(f"\nkept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    out(f"\ntotal time {time.time() - t_start:.0f} s")


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    out(
        f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; "
        f"modes {','.join(a.modes)}; run {','.join(a.run)}; threads {a.threads}; body {a.size} B; "
        f"{a.warmup:g} s warm-up + {a.duration:g} s per point"
        + ("; QUICK" if a.quick else "")
        + (f"; broker.conf extra {a.broker_conf}" if a.broker_conf else "")
        + (f"; broker switch interval {a.broker_switch_interval:g} s" if a.broker_switch_interval is not None else "")
        + ("; BROKER UNDER cProfile (slowed)" if a.profile_broker else "")
        + ("; CONSUMER UNDER cProfile (slowed)" if a.profile_consumer else "")
    )
    results: dict[str, dict] = {}
    with bench_session(a, "rmq-e2e-bench-") as (b, root):
        for flush in a.modes:
            for variant in a.security:
                results[mode_label(flush, variant)] = run_mode(b, flush, root, variant)
        report(results, a)
        if a.security != ["plain"]:
            security_report(results, a)
        if b.profiles:
            print_profiles(b.profiles, a.profile_top)
        for _, path in b.consumer_profiles:
            print_profiles([(_, path)], a.profile_top, "rmq.client consumer")
            os.unlink(path)
    if a.json:
        j = {
            "config": {k: v for k, v in vars(a).items()},
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "reference_rocketmq_4_9_8": {
                "send_tps": {m: {str(k): v for k, v in d.items()} for m, d in REF_SEND_TPS.items()},
                "drain_msgs_per_s": REF_DRAIN_MSGS_PER_S,
                "note": "quoted from the issue, not measured",
            },
            "modes": results,
        }
        sys.stdout.write(json.dumps(_clean(j), separators=(",", ":"), default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
