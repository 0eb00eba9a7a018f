#!/usr/bin/env python3
"""Regenerate tests/interop/captures/ by pointing every driver at capture_server.py.

    .venv/bin/python tests/interop/make_captures.py [--clients cpp2,cpp1,node]

Per client two captures are written:

* ``<client>.jsonl``: the capture server as a NameServer that knows no topic
  (TOPIC_NOT_EXIST / SYSTEM_ERROR answers): the producer tries one send, the
  push consumer runs a few seconds and is SIGTERMed, the pull consumer (C++
  only) runs a few seconds. This is the client's start-up traffic.
* ``<client>-fake-broker.jsonl``: the capture server also plays an in-memory
  broker; the producer sends 3 messages (tags, keys, user properties) and the
  push consumer receives them. ``<client>-fake-broker.drivers.jsonl`` holds what
  the drivers printed (a reference of the driver output format).

Needs scripts/install_test_deps.sh to have run (the interop venvs, node_modules).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CAPTURES = os.path.join(HERE, "captures")
DRIVERS = os.path.join(HERE, "drivers")
NODE = os.path.join(HERE, "node")


def client_cmds(client: str) -> dict[str, list[str]]:
    if client in ("cpp1", "cpp2"):
        py = os.path.join(ROOT, f".venv-interop-{client}", "bin", "python")
        return {
            role: [py, os.path.join(DRIVERS, f"{client}_{role}.py")]
            for role in ("producer", "push_consumer", "pull_consumer")
        }
    return {
        "producer": ["node", os.path.join(NODE, "producer.js")],
        "push_consumer": ["node", os.path.join(NODE, "consumer.js")],
    }


class Capture:
    def __init__(self, out: str, fake: bool) -> None:
        self.tmp = tempfile.mkdtemp(prefix="rmq-capture-")
        port_file = os.path.join(self.tmp, "port")
        cmd = [
            sys.executable,
            os.path.join(HERE, "capture_server.py"),
            "--port",
            "0",
            "--port-file",
            port_file,
            "--out",
            out,
        ]
        if fake:
            cmd.append("--fake-broker")
        self.proc = subprocess.Popen(cmd)
        deadline = time.time() + 10
        while not os.path.exists(port_file):
            if time.time() > deadline or self.proc.poll() is not None:
                raise SystemExit("capture server did not start")
            time.sleep(0.05)
        self.addr = f"127.0.0.1:{open(port_file).read().strip()}"

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(10)


def run(cmd: list[str], seconds: float, sig=signal.SIGTERM, cwd=None) -> tuple[int, str]:
    """Run cmd, SIGTERM it after `seconds` if still running; (exit status, stdout)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=cwd, text=True)
    try:
        out, _ = p.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        p.send_signal(sig)
        try:
            out, _ = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
    return p.returncode, out


def capture_startup(client: str) -> None:
    cmds = client_cmds(client)
    out = os.path.join(CAPTURES, f"{client}.jsonl")
    cap = Capture(out, fake=False)
    try:
        base = ["--namesrv", cap.addr, "--topic", "CaptureTopic"]
        rc, _ = run(
            cmds["producer"] + base + ["--group", f"PG_{client}", "-n", "1", "--tags", "TagA", "--keys-prefix", "key-"],
            20,
        )
        print(f"{client}: producer exit {rc} (no route: a failure is expected)")
        rc, _ = run(cmds["push_consumer"] + base + ["--group", f"CG_{client}"], 6)
        print(f"{client}: push consumer exit {rc} after SIGTERM")
        if "pull_consumer" in cmds:
            rc, _ = run(cmds["pull_consumer"] + base + ["--group", f"CGP_{client}", "--timeout", "4"], 15)
            print(f"{client}: pull consumer exit {rc}")
        time.sleep(0.5)
    finally:
        cap.stop()


def capture_fake_broker(client: str) -> None:
    cmds = client_cmds(client)
    out = os.path.join(CAPTURES, f"{client}-fake-broker.jsonl")
    drivers_out = os.path.join(CAPTURES, f"{client}-fake-broker.drivers.jsonl")
    cap = Capture(out, fake=True)
    lines = []
    try:
        base = ["--namesrv", cap.addr, "--topic", "CaptureTopic"]
        rc, o = run(
            cmds["producer"]
            + base
            + [
                "--group",
                f"PG_{client}",
                "-n",
                "3",
                "--tags",
                "TagA,TagB",
                "--keys-prefix",
                "key-",
                "--props",
                "color=red,size=2",
                "--body-prefix",
                f"hello from {client} #",
            ],
            20,
        )
        lines += o.splitlines()
        print(f"{client}: fake-broker producer exit {rc}")
        extra = ["--from-first"] if client == "node" else ["--property-keys", "color,size"]
        rc, o = run(cmds["push_consumer"] + base + ["--group", f"CG_{client}", "--max-messages", "3"] + extra, 20)
        lines += o.splitlines()
        print(f"{client}: fake-broker push consumer exit {rc}")
        time.sleep(0.5)
    finally:
        cap.stop()
    with open(drivers_out, "w") as f:
        for line in lines:
            f.write(line + "\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", default="cpp2,cpp1,node")
    a = p.parse_args()
    os.makedirs(CAPTURES, exist_ok=True)
    for client in a.clients.split(","):
        capture_startup(client)
        capture_fake_broker(client)
    # Report decode errors loudly: they are rmq bugs (or quirks rmq must accept).
    bad = 0
    for name in sorted(os.listdir(CAPTURES)):
        if not name.endswith(".jsonl") or name.endswith(".drivers.jsonl"):
            continue
        for line in open(os.path.join(CAPTURES, name)):
            rec = json.loads(line)
            if rec.get("event") == "decode_error":
                bad += 1
                print(f"DECODE ERROR in {name}: {rec['error']}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
