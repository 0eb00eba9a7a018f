"""A child process whose log says when it is ready: start, wait, stop, kill.

Shared by ``rmq dev``-style launchers, the integration-test harness and the benchmarks:
each starts real ``rmq`` processes in their own session (so a Ctrl-C or a SIGKILL of the
group reaches exactly them), logs to a file, and waits for a ready line in that log.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import IO

__all__ = ["ChildProcess"]


class ChildProcess:
    """``argv`` runs in ``workdir`` with stdout+stderr appended to ``<workdir>/<name>.log``.

    ``start()`` returns once ``ready`` (a regex) matches the log; ``match`` keeps the
    match (e.g. the port it bound). A restart under the same name first moves the
    previous log aside (``append_log``: keeps one log and looks for the ready line in
    what this run wrote), so it cannot find the previous run's ready line.
    """

    def __init__(
        self,
        name: str,
        argv: list[str],
        workdir: Path,
        ready: str,
        env: dict[str, str] | None = None,
        append_log: bool = False,
    ) -> None:
        self.name = name
        self.argv = argv
        self.workdir = workdir
        self.ready = re.compile(ready)
        self.log_path = workdir / f"{name}.log"
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.match: re.Match[str] | None = None
        self._log: IO[bytes] | None = None
        self._append_log = append_log
        self._log_start = 0

    def start(self, timeout: float = 30.0) -> ChildProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self._append_log:
            self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        elif self.log_path.exists():
            n = 1
            while self.log_path.with_suffix(f".log.{n}").exists():
                n += 1
            self.log_path.rename(self.log_path.with_suffix(f".log.{n}"))
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        if self.env:
            env.update(self.env)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            self.argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(self.workdir),
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = self.ready.search(self.log_text(self._log_start))
            if m:
                self.match = m
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode} before it was ready:\n{self.tail()}"
                )
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"{self.name} not ready within {timeout}s:\n{self.tail()}")

    def log_text(self, start: int = 0) -> str:
        """The log from byte ``start`` on."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(start)
                return f.read().decode(errors="replace")
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

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

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
        if self._log is not None and not self._log.closed:
            self._log.close()
