"""Failover time of a SYNC_MASTER group in controller mode, and where it goes.

Each round: a controller NameServer (``--controller``, the given controllerMasterTimeout)
and two brokers of group broker-a in controller mode (brokerId 0 is adopted as master,
brokerId 1 follows), all real ``rmq`` processes; 4 producers send 256-byte messages
(each retries a failed send every 20 ms, as an application riding out a failover
would); after 2 s the master is SIGKILLed. Measured, wall clock (the logs' timestamps
and this process share the clock):

* kill -> elected: until the controller logs the new epoch (its log line says how long
  the master had been silent then: controllerMasterTimeout + up to one heartbeat
  interval + up to one scan interval);
* elected -> writable: until the promoted broker logs that it takes writes (it hears
  of the election on its next heartbeat, brokerHeartbeatInterval 1 s);
* kill -> first send: until a producer gets its first answer from the new master
  (the route refresh after a failed send is in there).

    python bench/failover_bench.py                    # timeouts 2000 and 10000 ms, 3 rounds each
    python bench/failover_bench.py --quick            # one round, 2000 ms
    python bench/failover_bench.py --timeouts 5000 --rounds 5 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._cluster import Proc
from rmq.client import Message, Producer
from rmq.client.errors import MQBrokerError, MQClientError
from rmq.remoting.errors import RemotingError

BOOT = r"The broker\[[^,]+, ([\d.]+:\d+)\] boot success"
STAMP = r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})"


def _ts(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _broker(wd: Path, name: str, ns: str, broker_id: int) -> Proc:
    d = wd / name
    d.mkdir(parents=True, exist_ok=True)
    props = {
        "brokerClusterName": "BenchCluster",
        "brokerName": "broker-a",
        "brokerId": broker_id,
        "brokerRole": "SYNC_MASTER",
        "enableControllerMode": "true",
        "listenPort": 0,
        "brokerIP1": "127.0.0.1",
        "storePathRootDir": str(d / "store"),
        "mappedFileSizeCommitLog": 64 << 20,
    }
    conf = d / "broker.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return Proc(name, [sys.executable, "-m", "rmq.cli", "broker", "-c", str(conf), "-n", ns], d, BOOT)


def _addr(p: Proc) -> str:
    assert p.match is not None
    return p.match.group(1)


def _store_host(offset_msg_id: str) -> str:
    ip = ".".join(str(int(offset_msg_id[i : i + 2], 16)) for i in range(0, 8, 2))
    return f"{ip}:{int(offset_msg_id[8:16], 16)}"


async def _round(wd: Path, timeout_ms: int) -> dict[str, float]:
    nd = wd / "namesrv"
    ns = Proc(
        "namesrv",
        [
            sys.executable,
            "-m",
            "rmq.cli",
            "namesrv",
            "-p",
            "0",
            "--host",
            "127.0.0.1",
            "--kv-path",
            str(nd / "kv.msgpack"),
            "--controller",
            "--controller-master-timeout-ms",
            str(timeout_ms),
        ],
        nd,
        r"NameServer listening on [\d.]+:(\d+)",
    )
    procs = [ns]
    try:
        ns.start()
        assert ns.match is not None
        ns_addr = f"127.0.0.1:{ns.match.group(1)}"
        a = _broker(wd, "a", ns_addr, 0)
        procs.append(a)
        a.start()
        b = _broker(wd, "b", ns_addr, 1)
        procs.append(b)
        b.start()
        new = _addr(b)
        first_on_b: list[float] = []
        stop = asyncio.Event()

        async def producer(k: int) -> None:
            async with Producer(f"fb_pg_{k}", ns_addr, instance_name=f"fb-{k}") as p:
                while not stop.is_set():
                    try:
                        r = await p.send(Message("FailoverBench", b"x" * 256))
                    except (MQBrokerError, MQClientError, RemotingError):
                        await asyncio.sleep(0.02)
                        continue
                    if _store_host(r.offset_msg_id) == new and not first_on_b:
                        first_on_b.append(time.time())
                        stop.set()
                    await asyncio.sleep(0.005)

        tasks = [asyncio.create_task(producer(k)) for k in range(4)]
        await asyncio.sleep(2.0)
        a.kill()
        killed = time.time()
        try:
            await asyncio.wait_for(stop.wait(), timeout_ms / 1000 + 30)
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
        elected = re.search(
            STAMP + r" WARNING rmq\.nameserver\.controller: controller: group "
            r"broker-a: epoch 2 from offset \d+, master \S+ \(master \S+ silent "
            r"for (\d+) ms\)",
            ns.log_text(),
        )
        writable = re.search(
            STAMP + r" WARNING rmq\.broker\.role controller: \S+ is master of "
            r"broker-a: epoch 2 .*writable after ([\d.]+) ms",
            b.log_text(),
        )
        assert elected and writable and first_on_b, "no failover seen in the logs"
        return {
            "elected": _ts(elected.group(1)) - killed,
            "silent_ms": int(elected.group(2)),
            "writable": _ts(writable.group(1)) - _ts(elected.group(1)),
            "takeover_ms": float(writable.group(2)),
            "first": first_on_b[0] - killed,
        }
    finally:
        for p in reversed(procs):
            p.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeouts", default="2000,10000", help="controllerMasterTimeout values in ms (comma-separated)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="one round at 2000 ms")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    logging.getLogger("rmq").setLevel(logging.ERROR)  # the failed sends are expected
    timeouts = [2000] if args.quick else [int(t) for t in args.timeouts.split(",")]
    rounds = 1 if args.quick else args.rounds
    rows = []
    for t in timeouts:
        for i in range(rounds):
            with tempfile.TemporaryDirectory(prefix="rmq-fb-") as d:
                r = asyncio.run(_round(Path(d), t))
            r.update(timeout_ms=t, round=i + 1)
            rows.append(r)
            print(
                f"  timeout {t} ms, round {i + 1}: first send on the new master {r['first']:.2f} s after SIGKILL",
                flush=True,
            )
    print()
    print(
        f"{'controllerMasterTimeout':>23} {'rounds':>6} {'kill->elected s':>15} "
        f"{'silent at election ms':>21} {'elected->writable s':>19} {'takeover ms':>11} "
        f"{'kill->first send s (min/med/max)':>32}"
    )
    for t in timeouts:
        rs = [r for r in rows if r["timeout_ms"] == t]
        med = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731
        firsts = [r["first"] for r in rs]
        print(
            f"{t:>23} {len(rs):>6} {med('elected'):>15.2f} {med('silent_ms'):>21.0f} "
            f"{med('writable'):>19.2f} {med('takeover_ms'):>11.1f} "
            f"{min(firsts):>12.2f} / {statistics.median(firsts):.2f} / {max(firsts):.2f}"
        )
    if args.json:
        print(json.dumps({"rounds": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
