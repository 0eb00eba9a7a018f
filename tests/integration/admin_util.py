"""`rmq admin` run as a real subprocess, and checks on what it prints (shared by the
admin test modules)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def repo_env(**extra: str) -> dict[str, str]:
    """This environment with the checkout first on PYTHONPATH: a child Python started with
    cwd=REPO imports rmq (and tests) from here, not from whatever else is installed."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path, **extra)


@dataclass
class Run:
    rc: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


def admin(*args: str, env: dict[str, str] | None = None) -> Run:
    e = repo_env()
    e.pop("NAMESRV_ADDR", None)
    e.update(env or {})
    p = subprocess.run(
        [sys.executable, "-m", "rmq.cli", "admin", *args], capture_output=True, text=True, timeout=60, cwd=REPO, env=e
    )
    return Run(p.returncode, p.stdout, p.stderr)


def ok(*args: str, **kw) -> Run:
    r = admin(*args, **kw)
    assert r.rc == 0, (args, r)
    assert r.err == "", (args, r.err)
    return r


def failed(cmd: str, *args: str, rc: int = 1) -> str:
    """Runs a failing command; returns its one stderr line (without the prefix)."""
    r = admin(cmd, *args)
    assert r.rc == rc, (cmd, args, r)
    assert r.out == "", r.out
    lines = r.err.splitlines()
    assert len(lines) == 1, r.err
    prefix = f"rmq admin {cmd}: "
    assert lines[0].startswith(prefix), lines[0]
    return lines[0][len(prefix) :]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def header_cols(line: str) -> list[tuple[int, str]]:
    """(start column, title) of each `#Title` in a header line."""
    return [(m.start(), m.group()) for m in re.finditer(r"#\S+(?: [^#\s]\S*)*", line)]


def wait_route(ns: str, topic: str, timeout: float = 10.0) -> Run:
    deadline = time.monotonic() + timeout
    while True:
        r = admin("topicRoute", "-t", topic, "-n", ns)
        if r.rc == 0 or time.monotonic() > deadline:
            return r
        time.sleep(0.2)


def mqadmin_route_text(cluster: str, broker_addrs: str, filter_servers: str = "{}") -> str:
    """What mqadmin prints for the route of a topic on broker-a alone (4 queues, perm RW):
    fastjson's pretty form, tabs, bare broker-id keys; no final newline. ``broker_addrs``
    is the inside of the printed brokerAddrs map (``0:"host:port",...``),
    ``filter_servers`` the printed filterServerTable."""
    return (
        "{\n"
        '\t"brokerDatas":[\n'
        "\t\t{\n"
        f'\t\t\t"brokerAddrs":{{{broker_addrs}\n'
        "\t\t\t},\n"
        '\t\t\t"brokerName":"broker-a",\n'
        f'\t\t\t"cluster":"{cluster}"\n'
        "\t\t}\n"
        "\t],\n"
        f'\t"filterServerTable":{filter_servers},\n'
        '\t"queueDatas":[\n'
        "\t\t{\n"
        '\t\t\t"brokerName":"broker-a",\n'
        '\t\t\t"perm":6,\n'
        '\t\t\t"readQueueNums":4,\n'
        '\t\t\t"topicSysFlag":0,\n'
        '\t\t\t"writeQueueNums":4\n'
        "\t\t}\n"
        "\t]\n"
        "}"
    )


def admin_here(*args: str) -> Run:
    """``rmq admin ARGS`` run in this process (rmq.admin.main with its output captured):
    the same code as the command line without a Python start per call, for modules that
    run many commands."""
    from rmq.admin.main import main

    out, err = io.StringIO(), io.StringIO()
    rc = main(list(args), out, err)
    return Run(rc, out.getvalue(), err.getvalue())


class Clients:
    """rmq.client objects on an event loop of their own thread, alive for the module."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
