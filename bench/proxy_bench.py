"""The 5.x path through ``rmq proxy`` next to the 4.x path, against one broker in one run.

Run from the repository root (needs ``.venv-interop-py5``, made by scripts/install_test_deps.sh)::

    .venv/bin/python bench/proxy_bench.py              # the table (~3-4 min)
    .venv/bin/python bench/proxy_bench.py --quick      # smoke run (~1.5 min)
    .venv/bin/python bench/proxy_bench.py --json       # + one JSON object on the last line
    .venv/bin/python bench/proxy_bench.py --relay      # the proxy's TLS front only: disabled /
                                                       # permissive / enforcing, this checkout
    .venv/bin/python bench/proxy_bench.py --relay --baseline main   # ... and git ref ``main``'s proxy

One ``rmq namesrv`` + ``rmq broker`` (ASYNC_FLUSH, store in a temp directory) + ``rmq proxy``
(``tls.server.mode`` permissive, the default: every connection goes through the TLS front's
relay) as subprocesses. Rows, each ``--warmup`` s then ``--duration`` s measured:

* **gRPC ceiling**: a bare ``grpc.aio`` client in this process calling SendMessage (one
  pre-built request, a fresh message id each) with 1 and 16 calls in flight: what the proxy
  and broker do without any 5.x SDK work.
* **5.x send**: ``rocketmq-python-client`` 5.1.2 ``Producer.send`` in a loop (1 in flight) and
  ``send_async`` with 16 in flight, in a ``.venv-interop-py5`` subprocess (the SDK's generated
  modules must not share our process's protobuf pool); it measures itself and prints JSON.
* **5.x receive**: a backlog (sent with the 4.x lean sender) drained by a SimpleConsumer
  (``receive(32)`` then ``ack`` each message, as its users do) and by a PushConsumer (20
  consumption threads, the SDK's default), each in its own group.
* **4.x send / pull**: bench/e2e_bench.py's lean sender (SEND_MESSAGE_V2 straight to the broker,
  1 and 16 in flight, imported from there) and its PULL_MESSAGE command in one loop per queue
  (32 per pull) draining a backlog of ``--backlog`` messages, in this process; the pull rate is
  the backlog over the time to drain it (it drains faster than a warm-up lasts).

Columns: msgs/s; p50/p99 latency of one call where a call is one message (sends); the proxy's
CPU (utime+stime of all its threads, /proc/<pid>/stat) per message in the window; the broker's.

``--relay``: the TLS front's cost. Per ``tls.server.mode`` a proxy is started and the gRPC
ceiling measured sequentially and with 32 in flight, over plaintext (disabled, permissive) and
TLS (permissive, enforcing; certificate for "localhost" made for the run). ``--baseline REF``
runs the same points against the proxy of git ref REF (its ``rmq/`` extracted to a temp
directory) in the same run, interleaved point by point.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any

# ============================================================================ 5.x SDK child
# Runs under .venv-interop-py5/bin/python: the standard library and the SDK only.


def _pct(vals: list[float], q: float) -> float:
    if not vals:
        return float("nan")
    s = sorted(vals)
    return s[min(len(s) - 1, max(0, int(q * len(s) + 0.999999) - 1))]


def _py5_child(mode: str, spec: dict[str, Any]) -> dict[str, Any]:
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer  # type: ignore

    cfg = ClientConfiguration(spec["endpoints"], Credentials("", ""), request_timeout=10)
    topic, warmup, duration = spec["topic"], spec["warmup"], spec["duration"]
    body = b"x" * spec["size"]
    lock = threading.Lock()
    state: dict[str, Any] = {"measuring": False, "count": 0, "lat": [], "errors": 0, "first_error": None}

    def count(n: int, lat: float | None = None) -> None:
        with lock:
            if state["measuring"]:
                state["count"] += n
                if lat is not None:
                    state["lat"].append(lat)

    def failed(e: BaseException) -> None:
        with lock:
            state["errors"] += 1
            state["first_error"] = state["first_error"] or f"{type(e).__name__}: {e}"

    def window(stop: threading.Event) -> tuple[float, float]:
        time.sleep(warmup)
        with lock:
            state["measuring"], t0 = True, time.time()
        time.sleep(duration)
        with lock:
            state["measuring"], t1 = False, time.time()
        stop.set()
        return t0, t1

    def message() -> Message:
        m = Message()
        m.topic = topic
        m.body = body
        return m

    stop = threading.Event()
    if mode == "send":
        producer = Producer(cfg, (topic,))
        producer.startup()
        producer.send(message())
        inflight = spec["inflight"]

        def loop_sync() -> None:
            while not stop.is_set():
                t = time.perf_counter()
                try:
                    producer.send(message())
                except Exception as e:
                    failed(e)
                    continue
                count(1, time.perf_counter() - t)

        def loop_async() -> None:
            slots = threading.Semaphore(inflight)

            def done(t: float, f: Any) -> None:
                slots.release()
                if f.exception() is not None:
                    failed(f.exception())
                else:
                    count(1, time.perf_counter() - t)

            while not stop.is_set():
                if not slots.acquire(timeout=0.5):
                    continue
                t = time.perf_counter()
                try:
                    producer.send_async(message()).add_done_callback(lambda f, t=t: done(t, f))
                except Exception as e:
                    slots.release()
                    failed(e)
            for _ in range(inflight):  # the last answers
                slots.acquire(timeout=10)

        worker = threading.Thread(target=loop_sync if inflight == 1 else loop_async, daemon=True)
        worker.start()
        t0, t1 = window(stop)
        worker.join(30)
        producer.shutdown()
    elif mode == "simple":
        from rocketmq import SimpleConsumer

        consumer = SimpleConsumer(cfg, spec["group"], {topic: FilterExpression("*")}, await_duration=5)
        consumer.startup()

        def receive_loop() -> None:
            while not stop.is_set():
                try:
                    msgs = consumer.receive(spec["batch"], 30)
                except Exception as e:
                    failed(e)
                    continue
                for m in msgs:
                    try:
                        consumer.ack(m)
                    except Exception as e:
                        failed(e)
                        continue
                    count(1)

        worker = threading.Thread(target=receive_loop, daemon=True)
        worker.start()
        t0, t1 = window(stop)
        worker.join(30)
        consumer.shutdown()
    elif mode == "push":
        from rocketmq import ConsumeResult, MessageListener, PushConsumer

        class Listener(MessageListener):  # type: ignore[misc]
            def consume(self, message: Any) -> Any:
                count(1)
                return ConsumeResult.SUCCESS

        consumer = PushConsumer(cfg, spec["group"], Listener(), {topic: FilterExpression("*")})
        consumer.startup()
        t0, t1 = window(stop)
        consumer.shutdown()
    else:
        raise SystemExit(f"unknown mode {mode}")
    lat = state["lat"]
    return {
        "count": state["count"],
        "t0": t0,
        "t1": t1,
        "p50_ms": _pct(lat, 0.5) * 1000,
        "p99_ms": _pct(lat, 0.99) * 1000,
        "errors": state["errors"],
        "first_error": state["first_error"],
    }


# ============================================================================ orchestrator
# (imports below are the bench venv's: rmq, grpc, bench/ helpers)


def _orchestrate(args: argparse.Namespace) -> int:
    import asyncio
    import contextlib
    import math
    import shutil
    import subprocess
    import tarfile
    import tempfile
    from collections.abc import Awaitable, Callable, Iterator
    from io import BytesIO
    from pathlib import Path

    import grpc

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _cluster import ROOT, Cluster, CpuSampler, MachineSampler, Proc  # type: ignore[import-not-found]
    from e2e_bench import PRODUCER_GROUP, bench_client, pull_command, random_bodies, send_command, topic_route  # type: ignore[import-not-found]

    from rmq.child_process import ChildProcess
    from rmq.protocol.codes import ResponseCode
    from rmq.protocol.message import UniqueIdGenerator, decode_records
    from rmq.proxy import pb
    from rmq.remoting.tls import self_signed_pem

    py5_python = ROOT / ".venv-interop-py5" / "bin" / "python"
    md = (("x-mq-client-id", f"proxy-bench@{os.getpid()}@0@bench"), ("x-mq-language", "PYTHON"))
    warmup, duration = (1.0, 3.0) if args.quick else (args.warmup, args.duration)
    body = random_bodies(args.size, 1)[0]
    send_ok = {ResponseCode.SUCCESS}
    work = Path(tempfile.mkdtemp(prefix="proxy-bench-"))
    rows: list[dict[str, Any]] = []
    machine = MachineSampler().start()

    def out(*a: object) -> None:
        print(*a, flush=True)

    # ------------------------------------------------------------------ processes
    def start_proxy(namesrv: str, name: str, root: Path, *defines: str) -> ChildProcess:
        argv = [sys.executable, "-m", "rmq.cli", "proxy", "-n", namesrv, "-p", "0", "-D", "bindAddress=127.0.0.1"]
        for d in defines:
            argv += ["-D", d]
        if root == ROOT:
            p: ChildProcess = Proc(name, argv, work / name, r"rmq proxy listening on ([\d.]+:\d+)")
        else:
            env = {"PYTHONUNBUFFERED": "1", "PYTHONPATH": str(root)}
            p = ChildProcess(name, argv, work / name, r"rmq proxy listening on ([\d.]+:\d+)", env=env)
        p.start(60)
        return p

    @contextlib.contextmanager
    def proxy(namesrv: str, name: str, root: Path, *defines: str) -> Iterator[tuple[str, CpuSampler]]:
        p = start_proxy(namesrv, name, root, *defines)
        cpu = CpuSampler(p.pid).start()
        try:
            assert p.match is not None
            yield p.match.group(1), cpu
        finally:
            cpu.stop()
            p.stop()

    def baseline_root(ref: str) -> Path:
        """``rmq/`` of git ref ``ref`` in a temp directory (imports resolve there first)."""
        tar = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "rmq"], check=True, capture_output=True).stdout
        dest = work / f"baseline-{ref.replace('/', '_')}"
        dest.mkdir()
        with tarfile.open(fileobj=BytesIO(tar)) as t:
            t.extractall(dest, filter="data")
        return dest

    # ------------------------------------------------------------------ in-process load
    async def windowed(
        n_workers: int, one: Callable[[int], Awaitable[int]], lat: list[float] | None
    ) -> tuple[int, float, float, int]:
        """``n_workers`` loops of ``one(worker index)`` (messages done; 0 = none there, < 0 = failed);
        counts in the window."""
        stop = False
        measuring = False
        done = failed = 0

        async def worker(i: int) -> None:
            nonlocal done, failed
            while not stop:
                t = time.perf_counter()
                try:
                    n = await one(i)
                except (TimeoutError, grpc.aio.AioRpcError, OSError, RuntimeError):
                    n = -1
                if n <= 0:
                    failed += n < 0
                    await asyncio.sleep(0.05)
                    continue
                if measuring:
                    done += n
                    if lat is not None:
                        lat.append(time.perf_counter() - t)

        tasks = [asyncio.ensure_future(worker(i)) for i in range(n_workers)]
        await asyncio.sleep(warmup)
        measuring, t0 = True, time.time()
        await asyncio.sleep(duration)
        measuring, t1 = False, time.time()
        stop = True
        await asyncio.gather(*tasks)
        return done, t0, t1, failed

    def grpc_channel(addr: str, tls_root: bytes | None) -> grpc.aio.Channel:
        opts = [("grpc.use_local_subchannel_pool", 1)]
        if tls_root is None:
            return grpc.aio.insecure_channel(addr, options=opts)
        port = addr.rsplit(":", 1)[1]
        return grpc.aio.secure_channel(f"localhost:{port}", grpc.ssl_channel_credentials(tls_root), options=opts)

    async def create_topic(namesrv: str, broker: str, topic: str) -> None:
        """UPDATE_AND_CREATE_TOPIC on the broker (4 queues), then wait for its route."""
        from rmq.client.api import MQClientAPI
        from rmq.protocol.bodies import TopicConfig

        rc = bench_client()
        try:
            await MQClientAPI(rc, [namesrv]).create_topic(broker, TopicConfig(topic, 4, 4))
        finally:
            await rc.close()
        for _ in range(100):
            try:
                await topic_route(namesrv, topic)
                return
            except RuntimeError:
                await asyncio.sleep(0.1)
        raise RuntimeError(f"{topic}: no route 10 s after creating it")

    async def grpc_send(addr: str, topic: str, inflight: int, tls_root: bytes | None = None) -> dict[str, Any]:
        Req, Resp = pb.msg("SendMessageRequest"), pb.msg("SendMessageResponse")
        req = Req()
        m = req.messages.add()
        m.topic.name = topic
        m.body = body
        m.system_properties.message_type = pb.MessageType.NORMAL
        ids = UniqueIdGenerator()
        lat: list[float] = []
        async with grpc_channel(addr, tls_root) as ch:
            fn = ch.unary_unary(f"/{pb.SERVICE}/SendMessage", Req.SerializeToString, Resp.FromString)

            async def one(_: int) -> int:
                m.system_properties.message_id = ids.next_id(int(time.time() * 1000))
                resp = await fn(req, metadata=md, timeout=10)
                return 1 if resp.status.code == pb.Code.OK else -1

            assert await one(0) == 1, "SendMessage through the proxy failed"
            n, t0, t1, failed = await windowed(inflight, one, lat)
        return {"count": n, "t0": t0, "t1": t1, "lat": lat, "errors": failed}

    async def lean_send(namesrv: str, topic: str, inflight: int, total: int | None = None) -> dict[str, Any]:
        addr, nq, _ = await topic_route(namesrv, topic)
        client = bench_client()
        ids = UniqueIdGenerator()
        qctr = [0]

        async def one(_: int) -> int:
            qid = qctr[0] % nq
            qctr[0] += 1
            resp = await client.invoke(addr, send_command(PRODUCER_GROUP, topic, qid, body, ids), 3.0)
            return 1 if resp.code in send_ok else -1

        try:
            if total is not None:  # a backlog: as fast as it goes
                left = [total]

                async def filler() -> None:
                    while left[0] > 0:
                        left[0] -= 1
                        if await one(0) < 0:
                            raise RuntimeError("backlog send failed")

                await asyncio.gather(*(filler() for _ in range(inflight)))
                return {}
            lat: list[float] = []
            n, t0, t1, failed = await windowed(inflight, one, lat)
            return {"count": n, "t0": t0, "t1": t1, "lat": lat, "errors": failed}
        finally:
            await client.close()

    async def lean_pull(namesrv: str, topic: str, backlog: int) -> dict[str, Any]:
        """Drain ``backlog`` messages from offset 0, one pull loop per queue (32 per pull): the
        rate is backlog / time to drain (a window would start after the drain on this path)."""
        addr, _, nq = await topic_route(namesrv, topic)
        client = bench_client()
        got = [0]
        errors = [0]
        moved = {ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_OFFSET_MOVED}

        async def drain(q: int) -> None:
            offset = 0
            while got[0] < backlog:
                resp = await client.invoke(addr, pull_command("proxy_bench_pull", topic, q, offset, False), 5.0)
                if resp.code != ResponseCode.SUCCESS and resp.code not in moved:
                    errors[0] += 1
                    await asyncio.sleep(0.05)
                    continue
                offset = int((resp.ext_fields or {}).get("nextBeginOffset", offset))
                if resp.code == ResponseCode.SUCCESS and resp.body:
                    got[0] += len(decode_records(resp.body))
                else:
                    await asyncio.sleep(0.01)  # this queue is drained; the others are not yet

        t0 = time.time()
        try:
            await asyncio.wait_for(asyncio.gather(*(drain(q) for q in range(nq))), warmup + duration + 60)
        finally:
            await client.close()
        return {"count": got[0], "t0": t0, "t1": time.time(), "errors": errors[0], "drain": True}

    def py5(mode: str, spec: dict[str, Any]) -> dict[str, Any]:
        spec = {"warmup": warmup, "duration": duration, "size": args.size, **spec}
        r = subprocess.run(
            [str(py5_python), str(Path(__file__).resolve()), "py5-child", mode, json.dumps(spec)],
            capture_output=True,
            text=True,
            timeout=warmup + duration + 120,
            cwd=str(work),
        )
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
        if r.returncode != 0 or not lines:
            raise RuntimeError(f"5.x child {mode} failed ({r.returncode}): {r.stderr[-2000:]}")
        res: dict[str, Any] = json.loads(lines[-1])
        return res

    # ------------------------------------------------------------------ rows
    def row(name: str, res: dict[str, Any], proxy_cpu: CpuSampler | None, broker_cpu: CpuSampler) -> None:
        t0, t1, n = res["t0"], res["t1"], res["count"]
        span = max(t1 - t0, 1e-9)
        lat = sorted(res.get("lat") or [])
        p50 = res.get("p50_ms", _pct(lat, 0.5) * 1000 if lat else float("nan"))
        p99 = res.get("p99_ms", _pct(lat, 0.99) * 1000 if lat else float("nan"))
        per = lambda c: 1e6 * c.seconds(t0, t1) / n if n else float("nan")  # noqa: E731
        r = {
            "row": name,
            "msgs_s": n / span,
            "p50_ms": p50,
            "p99_ms": p99,
            "proxy_cpu_us_per_msg": per(proxy_cpu) if proxy_cpu is not None else float("nan"),
            "proxy_cpu_pct": proxy_cpu.percent(t0, t1) if proxy_cpu is not None else float("nan"),
            "broker_cpu_us_per_msg": per(broker_cpu),
            "machine_busy_pct": machine.busy_percent(t0, t1),
            "errors": res.get("errors", 0),
        }
        if res.get("first_error"):
            r["first_error"] = res["first_error"]
        rows.append(r)
        out(
            f"  {name:<40} {r['msgs_s']:>9.0f} {fmt(p50):>8} {fmt(p99):>8} {fmt(r['proxy_cpu_us_per_msg'], 0):>10} "
            f"{fmt(r['proxy_cpu_pct'], 0):>7} {fmt(r['broker_cpu_us_per_msg'], 0):>10} {r['machine_busy_pct']:>6.0f}"
            + (f"  errors {r['errors']}" if r["errors"] else "")
        )

    def fmt(v: float, digits: int = 1) -> str:
        return "-" if v is None or math.isnan(v) else f"{v:.{digits}f}"

    header = (
        f"  {'row':<40} {'msgs/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'proxy µs/m':>10} {'proxy%':>7} "
        f"{'broker µs/m':>10} {'busy%':>6}"
    )

    def main_table() -> None:
        with Cluster(work / "cluster", "ASYNC_FLUSH", conf={"autoCreateTopicEnable": "true"}) as c:
            assert c.cpu is not None
            with proxy(c.namesrv_addr, "proxy", ROOT) as (addr, pcpu):
                topic = "ProxyBench"
                asyncio.run(create_topic(c.namesrv_addr, c.broker_addr, topic))
                out(f"proxy {addr} (tls.server.mode=permissive: through the TLS front), broker {c.broker_addr}")
                out(header)
                for k in (1, 16):
                    row(f"gRPC ceiling SendMessage, {k} in flight", asyncio.run(grpc_send(addr, topic, k)), pcpu, c.cpu)
                for k in (1, 16):
                    res = py5("send", {"endpoints": addr, "topic": topic, "inflight": k})
                    how = "send()" if k == 1 else f"send_async, {k} in flight"
                    row(f"5.x Producer {how}", res, pcpu, c.cpu)
                for k in (1, 16):
                    row(f"4.x lean send, {k} in flight", asyncio.run(lean_send(c.namesrv_addr, topic, k)), None, c.cpu)
                # consumers: each drains a backlog of its own (more than it takes in the window)
                consumers = (
                    ("pull", "4.x lean pull 32/pull, backlog drain"),
                    ("simple", "5.x SimpleConsumer receive(32)+ack"),
                    ("push", "5.x PushConsumer"),
                )
                for mode, label in consumers:
                    rtopic = f"ProxyBench{mode.title()}"
                    asyncio.run(create_topic(c.namesrv_addr, c.broker_addr, rtopic))
                    backlog = args.backlog // (4 if args.quick else 1)
                    asyncio.run(lean_send(c.namesrv_addr, rtopic, 32, total=backlog))
                    if mode == "pull":
                        res = asyncio.run(lean_pull(c.namesrv_addr, rtopic, backlog))
                    else:
                        spec = {"endpoints": addr, "topic": rtopic, "group": f"bench_{mode}", "batch": 32}
                        res = py5(mode, spec)
                    if res["count"] >= backlog and not res.get("drain"):
                        label += " (backlog drained: a lower bound)"
                    row(label, res, pcpu if mode != "pull" else None, c.cpu)

    def relay_table() -> None:
        roots = [("this", ROOT)]
        if args.baseline:
            roots.insert(0, (args.baseline, baseline_root(args.baseline)))
        cert, key = self_signed_pem("localhost")
        (work / "cert.pem").write_bytes(cert)
        (work / "key.pem").write_bytes(key)
        tls = ["tls.test.mode.enable=false", f"tls.server.certPath={work / 'cert.pem'}",
               f"tls.server.keyPath={work / 'key.pem'}", f"tls.config.file={work / 'tls.properties'}"]  # fmt: skip
        (work / "tls.properties").write_text("")
        points = [("disabled", False), ("permissive", False), ("permissive", True), ("enforcing", True)]
        with Cluster(work / "cluster-relay", "ASYNC_FLUSH", conf={"autoCreateTopicEnable": "true"}) as c:
            assert c.cpu is not None
            asyncio.run(create_topic(c.namesrv_addr, c.broker_addr, "RelayBench"))
            out(header)
            for mode, use_tls in points:
                for label, root in roots:
                    with proxy(c.namesrv_addr, f"proxy-{label}-{mode}", root, f"tls.server.mode={mode}", *tls) as (
                        addr,
                        pcpu,
                    ):
                        for k in (1, 32):
                            res = asyncio.run(grpc_send(addr, "RelayBench", k, cert if use_tls else None))
                            name = f"{label}: {mode} {'TLS' if use_tls else 'plain'}, {k} in flight"
                            row(name, res, pcpu, c.cpu)

    try:
        if not args.relay and not py5_python.exists():
            out(f"{py5_python} is missing: run scripts/install_test_deps.sh")
            return 2
        started = time.time()
        load = os.getloadavg()
        out(f"proxy_bench: {os.cpu_count()} CPUs, load average {load[0]:.1f} at start; "
            f"window {warmup:g} s warm-up + {duration:g} s, {args.size} B bodies")  # fmt: skip
        if args.relay:
            relay_table()
        else:
            main_table()
        out(f"done in {time.time() - started:.0f} s; load average {os.getloadavg()[0]:.1f} at the end")
        if args.json:
            print(json.dumps({"rows": rows, "load_average_start": load[0], "quick": args.quick}))
        return 0
    finally:
        machine.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    if sys.argv[1:2] == ["py5-child"]:
        res = _py5_child(sys.argv[2], json.loads(sys.argv[3]))
        sys.stdout.write(json.dumps(res) + "\n")
        sys.stdout.flush()
        os._exit(0)  # the SDK's threads and channels do not all end by themselves
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="1 s warm-up + 3 s windows, smaller backlogs")
    p.add_argument("--json", action="store_true", help="one JSON object on the last line")
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--size", type=int, default=1024, help="body bytes")
    p.add_argument("--backlog", type=int, default=40000, help="messages put in front of each 5.x consumer")
    p.add_argument("--relay", action="store_true", help="only the TLS front table (tls.server.mode x TLS)")
    p.add_argument("--baseline", metavar="REF", help="with --relay: also the proxy of git ref REF")
    return _orchestrate(p.parse_args())


if __name__ == "__main__":
    sys.exit(main())
