"""Remoting round-trip benchmark: rmq.remoting vs a raw-socket echo, same message size.

Run: ``.venv/bin/python bench/remoting_bench.py [--duration 3] [--concurrency 1,16,64,256]
[--loops asyncio,uvloop] [--body 128] [--serialize json|rocketmq] [--coalesce-limit 16384]
[--json]``

One client (this process) keeps N requests in flight on one connection against a server in
a child process (so client and server each have a core and a GIL), for each loop type
(client and server use the same one):

* **rmq**: ``RemotingClient.invoke`` against ``RemotingServer`` with an echo processor
  (SEND_MESSAGE_V2-shaped request: a Java producer's ext fields and a ``--body`` byte body;
  the response carries the same ext fields and body, so it is the same size).
* **raw**: the same request frame bytes over a bare ``asyncio.Protocol`` pair; the server
  echoes every read back, the client splits replies on the length prefix and completes a
  FIFO of futures; writes issued in one loop iteration are coalesced like rmq's. This is
  the ceiling for "Python asyncio + framing" with no codec and no dispatch.

Per point: ``--warmup`` s discarded, ``--duration`` s measured; requests/s and p50/p99
latency (per request, from the call to its response) are printed with the rmq/raw ratio.
``--coalesce-limit`` sets rmq's write batch cap on both sides (``--coalesce-limit 16777216``
shows the one-batch-per-iteration behaviour the 16 KiB default replaced).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import sys
import time
from collections.abc import Awaitable, Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _cluster import RawClient

from rmq.protocol.codes import RequestCode, ResponseCode, SerializeType
from rmq.protocol.frame import RemotingCommand, encode
from rmq.remoting import RemotingClient, RemotingServer


def sample_request(body_size: int) -> RemotingCommand:
    """What a Java producer's SEND_MESSAGE_V2 looks like (V2 short keys)."""
    ext = {
        "a": "please_rename_unique_group_name",
        "b": "BenchmarkTest",
        "c": "TBW102",
        "d": "4",
        "e": "3",
        "f": "0",
        "g": "1700000000123",
        "h": "0",
        "i": "UNIQ_KEY\x017F0000010A2418B4AAC25C8F4D2A0000\x02WAIT\x01true\x02TAGS\x01TagA\x02",
        "j": "0",
        "k": "false",
        "m": "false",
    }
    return RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext_fields=ext, body=b"x" * body_size)


def _run(loop_name: str, main: Callable[[], Awaitable[object]]) -> object:
    if loop_name == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main())
    return asyncio.run(main())


# ---------------------------------------------------------------------- servers (child)
class _RawEcho(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)  # type: ignore[attr-defined]


def _serve(kind: str, loop_name: str, coalesce_limit: int, pipe) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        # the parent closes its end to stop us
        loop.add_reader(pipe.fileno(), lambda: done.done() or done.set_result(None))
        if kind == "rmq":
            server = RemotingServer(name="bench", coalesce_limit=coalesce_limit)
            server.register_processor(
                RequestCode.SEND_MESSAGE_V2,
                lambda conn, cmd: cmd.create_response(ResponseCode.SUCCESS, ext_fields=cmd.ext_fields, body=cmd.body),
            )
            await server.start()
            pipe.send(server.port)
            await done
            await server.stop()
        else:
            srv = await loop.create_server(_RawEcho, "127.0.0.1", 0)
            pipe.send(srv.sockets[0].getsockname()[1])
            await done
            srv.close()

    _run(loop_name, main)


# ---------------------------------------------------------------------- raw client
# ---------------------------------------------------------------------- measurement
async def _drive(
    call: Callable[[], Awaitable[object]], concurrency: int, warmup: float, duration: float
) -> tuple[float, float, float]:
    loop = asyncio.get_running_loop()
    perf = time.perf_counter
    lat: list[float] = []
    measuring = False
    stop = False

    async def worker() -> int:
        n = 0
        while not stop:
            t0 = perf()
            await call()
            if measuring:
                lat.append(perf() - t0)
                n += 1
        return n

    tasks = [loop.create_task(worker()) for _ in range(concurrency)]
    await asyncio.sleep(warmup)
    measuring = True
    t_start = perf()
    await asyncio.sleep(duration)
    measuring = False
    elapsed = perf() - t_start
    stop = True
    count = sum(await asyncio.gather(*tasks))
    lat.sort()
    p50 = lat[len(lat) // 2] if lat else float("nan")
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else float("nan")
    return count / elapsed, p50 * 1e6, p99 * 1e6


def _client_run(
    kind: str,
    loop_name: str,
    port: int,
    concurrencies: list[int],
    warmup: float,
    duration: float,
    body: int,
    st: int,
    coalesce_limit: int,
) -> list[tuple[float, float, float]]:
    async def main() -> list[tuple[float, float, float]]:
        results = []
        if kind == "rmq":
            client = RemotingClient(serialize_type=st, coalesce_limit=coalesce_limit)
            addr = f"127.0.0.1:{port}"
            req = sample_request(body)
            resp = await client.invoke(addr, req, 5)
            assert resp.code == ResponseCode.SUCCESS and resp.body == req.body

            def call() -> Awaitable[RemotingCommand]:
                # a fresh command per request: invoke assigns the opaque
                return client.invoke(addr, RemotingCommand(req.code, ext_fields=req.ext_fields, body=req.body), 10)

            for c in concurrencies:
                results.append(await _drive(call, c, warmup, duration))
            await client.close()
        else:
            frame = encode(sample_request(body), st)
            loop = asyncio.get_running_loop()
            transport, proto = await loop.create_connection(RawClient, "127.0.0.1", port)
            for c in concurrencies:
                results.append(await _drive(lambda: proto.send(frame), c, warmup, duration))
            transport.close()
        return results

    return _run(loop_name, main)  # type: ignore[return-value]


def _with_server(kind: str, loop_name: str, coalesce_limit: int, fn: Callable[[int], object]) -> object:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_serve, args=(kind, loop_name, coalesce_limit, child), daemon=True)
    proc.start()
    try:
        if not parent.poll(20):
            raise RuntimeError(f"{kind} server did not start")
        port = parent.recv()
        return fn(port)
    finally:
        parent.close()
        proc.join(5)
        if proc.is_alive():
            proc.terminate()
            proc.join()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--concurrency", default="1,16,64,256")
    ap.add_argument("--loops", default="asyncio,uvloop")
    ap.add_argument("--body", type=int, default=128)
    ap.add_argument("--serialize", choices=["json", "rocketmq"], default="json")
    ap.add_argument("--coalesce-limit", type=int, default=16 << 10)
    ap.add_argument("--json", action="store_true", help="also print one JSON line at the end")
    args = ap.parse_args()
    concs = [int(c) for c in args.concurrency.split(",")]
    st = SerializeType.JSON if args.serialize == "json" else SerializeType.ROCKETMQ
    frame_size = len(encode(sample_request(args.body), st))
    print(
        f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; "
        f"request frame {frame_size} B ({args.serialize} header, {args.body} B body), "
        f"echo response of the same size; {args.duration:g} s per point; "
        f"rmq coalesce limit {args.coalesce_limit} B"
    )
    print(
        f"{'loop':8} {'in-flight':>9} | {'rmq req/s':>10} {'p50 us':>8} {'p99 us':>8} | "
        f"{'raw req/s':>10} {'p50 us':>8} {'p99 us':>8} | {'rmq/raw':>7}"
    )
    rows = []
    for loop_name in args.loops.split(","):
        lim = args.coalesce_limit
        rmq = _with_server(
            "rmq",
            loop_name,
            lim,
            lambda port: _client_run("rmq", loop_name, port, concs, args.warmup, args.duration, args.body, st, lim),
        )
        raw = _with_server(
            "raw",
            loop_name,
            lim,
            lambda port: _client_run("raw", loop_name, port, concs, args.warmup, args.duration, args.body, st, lim),
        )
        for c, r, b in zip(concs, rmq, raw, strict=False):  # type: ignore[call-overload]
            print(
                f"{loop_name:8} {c:>9} | {r[0]:>10,.0f} {r[1]:>8.0f} {r[2]:>8.0f} | "
                f"{b[0]:>10,.0f} {b[1]:>8.0f} {b[2]:>8.0f} | {r[0] / b[0]:>7.2f}"
            )
            rows.append(
                {
                    "loop": loop_name,
                    "concurrency": c,
                    "rmq_rps": r[0],
                    "rmq_p50_us": r[1],
                    "rmq_p99_us": r[2],
                    "raw_rps": b[0],
                    "raw_p50_us": b[1],
                    "raw_p99_us": b[2],
                }
            )
    if args.json:
        print(json.dumps({"frame_size": frame_size, "rows": rows}))


if __name__ == "__main__":
    main()
