"""Real rmq processes for integration tests: ephemeral ports, logs on disk, always reaped.

    with start_namesrv(tmp_path) as ns, start_broker(tmp_path, ns.addr, name="broker-a") as br:
        ...  # ns.addr, br.addr, br.store_dir, br.log_text()

Processes run `python -m rmq.cli ...` with the test's interpreter. Each one's stdout and
stderr go to a file under its directory; a process that does not report ready in time,
or dies, fails the test with the tail of its log.
"""
from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

READY_TIMEOUT = 30.0


class RmqProcess:
    def __init__(self, name: str, args: list[str], workdir: Path, ready: str,
                 env: dict[str, str] | None = None) -> None:
        self.name = name
        self.args = args
        self.workdir = workdir
        self.ready = re.compile(ready)
        self.log_path = workdir / f"{name}.log"
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.match: re.Match[str] | None = None
        # Run under another command (e.g. `unshare --mount sh -c '...; exec "$@"' sh`).
        self.prefix: list[str] = []

    def start(self, timeout: float = READY_TIMEOUT) -> "RmqProcess":
        self.workdir.mkdir(parents=True, exist_ok=True)
        # A restart under the same name must not find the previous run's ready line.
        if self.log_path.exists():
            n = 1
            while self.log_path.with_suffix(f".log.{n}").exists():
                n += 1
            self.log_path.rename(self.log_path.with_suffix(f".log.{n}"))
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        if self.env:
            env.update(self.env)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([*self.prefix, sys.executable, "-m", "rmq.cli", *self.args],
                                     stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     cwd=str(self.workdir), start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = self.ready.search(self.log_text())
            if m:
                self.match = m
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} before it was "
                                   f"ready:\n{self.tail()}")
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"{self.name} not ready within {timeout}s:\n{self.tail()}")

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM and wait (a clean shutdown); SIGKILL if it does not exit in time."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close_log()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL the process group (no cleanup runs: a crash)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        self._close_log()

    def _close_log(self) -> None:
        log = getattr(self, "_log", None)
        if log is not None and not log.closed:
            log.close()


class NameServerProcess(RmqProcess):
    @property
    def port(self) -> int:
        assert self.match is not None
        return int(self.match.group(1))

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"


class BrokerProcess(RmqProcess):
    def __init__(self, *a, store_dir: Path, conf_path: Path, **kw) -> None:
        super().__init__(*a, **kw)
        self.store_dir = store_dir
        self.conf_path = conf_path

    @property
    def addr(self) -> str:
        assert self.match is not None
        return self.match.group(1)

    @property
    def port(self) -> int:
        return int(self.addr.rsplit(":", 1)[1])


def namesrv_process(workdir: Path, *extra: str, name: str = "namesrv") -> NameServerProcess:
    d = workdir / name
    return NameServerProcess(name, ["namesrv", "-p", "0", "--host", "127.0.0.1",
                                    "--kv-path", str(d / "kvConfig.msgpack"), *extra],
                             d, r"NameServer listening on [\d.]+:(\d+)")


def broker_process(workdir: Path, namesrv: str | None, name: str = "broker-a",
                   conf: dict[str, object] | None = None) -> BrokerProcess:
    d = workdir / name
    store = d / "store"
    props: dict[str, object] = {
        "brokerClusterName": "TestCluster", "brokerName": name, "brokerId": 0,
        "listenPort": 0, "brokerIP1": "127.0.0.1", "storePathRootDir": str(store),
        "mappedFileSizeCommitLog": 4 * 1024 * 1024, "maxHashSlotNum": 10000,
        "maxIndexNum": 40000,
    }
    props.update(conf or {})
    d.mkdir(parents=True, exist_ok=True)
    conf_path = d / "broker.conf"
    conf_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    args = ["broker", "-c", str(conf_path)]
    if namesrv:
        args += ["-n", namesrv]
    return BrokerProcess(name, args, d, r"The broker\[[^,]+, ([\d.]+:\d+)\] boot success",
                         store_dir=store, conf_path=conf_path)


@contextlib.contextmanager
def start_namesrv(workdir: Path, *extra: str, name: str = "namesrv") -> Iterator[NameServerProcess]:
    p = namesrv_process(workdir, *extra, name=name)
    try:
        yield p.start()
    finally:
        p.stop()


@contextlib.contextmanager
def start_broker(workdir: Path, namesrv: str | None, name: str = "broker-a",
                 conf: dict[str, object] | None = None) -> Iterator[BrokerProcess]:
    p = broker_process(workdir, namesrv, name, conf)
    try:
        yield p.start()
    finally:
        p.stop()
