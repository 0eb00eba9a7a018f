"""RocketMQ 4.9.8's own benchmark tools for the benchmarks, and parsers of their output.

    with ProducerTool(workdir) as tool:      # one JVM, kept warm across points
        text = tool.run(["-n", ns, "-t", topic, "-w", "16", "-s", "1024", "-q", "100000"])
        parse_producer(text)                  # the [Complete] line: tps, avg/max RT, failures
    consumer_process(workdir, ns, topic, group).start()   # the benchmark Consumer, a ChildProcess

The benchmark Producer (``org.apache.rocketmq.example.benchmark.Producer``, what
``bin/rocketmq producer`` runs) prints ``Current Time: ... Send TPS: N Max RT(ms): M
Average RT(ms): A Send Failed: F Response Failed: R`` every 10 s over its last 10 one-second
snapshots, and with ``-q N`` (N messages, then it ends) a ``[Complete] Send Total: T Send TPS:
...`` line over the snapshots it has (from 1 s after it started to the last second before it
ended, at most the last 9 s). A fresh JVM sends at ~2/3 of its steady rate for its first
seconds (JIT), so ``ProducerTool`` runs ``Producer.main`` again and again in one JVM (a loop
class compiled here against the tool's classpath, reading one argument line per run from
stdin): every point after the first measures a warm client. Max RT is the maximum over the
whole run (the tool never resets it); TPS and average RT are over the snapshot window.

The benchmark Consumer prints ``Current Time: <ms> TPS: N FAIL: F AVG(B2C) RT(ms): ...``
every 10 s over its last 10 snapshots; it never ends by itself.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from _cluster import ROCKETMQ_BIN, Proc

TOOL_HEAP = "512m"

PRODUCER_LINE = re.compile(
    r"(?:Current Time: .+?|\[Complete\] Send Total: (?P<total>\d+)) Send TPS: (?P<tps>\d+) "
    r"Max RT\(ms\): (?P<max_rt_ms>\d+) Average RT\(ms\):\s*(?P<avg_rt_ms>[-\d.]+|NaN|Infinity) "
    r"Send Failed: (?P<send_failed>\d+) Response Failed: (?P<response_failed>\d+)"
)
CONSUMER_LINE = re.compile(
    r"Current Time: \d+ TPS: (?P<tps>\d+) FAIL: (?P<fail>\d+) "
    r"AVG\(B2C\) RT\(ms\):\s*(?P<avg_b2c_ms>[-\d.]+|NaN|Infinity) AVG\(S2C\) RT\(ms\):\s*(?P<avg_s2c_ms>[-\d.]+|NaN|Infinity) "
    r"MAX\(B2C\) RT\(ms\): (?P<max_b2c_ms>-?\d+) MAX\(S2C\) RT\(ms\): (?P<max_s2c_ms>-?\d+)"
)


@dataclass
class ProducerLine:
    tps: int
    max_rt_ms: int
    avg_rt_ms: float
    send_failed: int
    response_failed: int
    total: int | None = None  # [Complete] lines: sent + send-failed over the whole run

    @property
    def complete(self) -> bool:
        return self.total is not None


@dataclass
class ConsumerLine:
    tps: int
    fail: int
    avg_b2c_ms: float
    avg_s2c_ms: float
    max_b2c_ms: int
    max_s2c_ms: int


def _numbers(m: re.Match[str]) -> dict[str, Any]:
    """A report line's named numbers: ``%d`` fields as int, ``%7.3f`` ones (or NaN) as float."""
    out: dict[str, Any] = {}
    for k, v in m.groupdict().items():
        if v is None:
            continue
        if re.fullmatch(r"-?\d+", v):
            out[k] = int(v)
        else:
            out[k] = math.nan if v in ("NaN", "Infinity", "-Infinity") else float(v)
    return out


def producer_lines(text: str) -> list[ProducerLine]:
    """Every periodic or [Complete] report line of the benchmark Producer in ``text``."""
    return [ProducerLine(**_numbers(m)) for m in PRODUCER_LINE.finditer(text)]


def parse_producer(text: str) -> ProducerLine | None:
    """The [Complete] line of a ``-q`` run (None when the run was too short to print TPS:
    fewer than two snapshots)."""
    done = [x for x in producer_lines(text) if x.complete]
    return done[-1] if done else None


def consumer_lines(text: str) -> list[ConsumerLine]:
    """Every report line of the benchmark Consumer in ``text``."""
    return [ConsumerLine(**_numbers(m)) for m in CONSUMER_LINE.finditer(text)]


# ------------------------------------------------------------------------------- processes
def java_env(home: Path, heap: str = TOOL_HEAP) -> dict[str, str]:
    """A RocketMQ JVM's environment: logs and client state under ``home``."""
    return {"ROCKETMQ_USER_HOME": str(home), "JAVA_HEAP": heap}


LOOP_CLASS = "VsProducerLoop"
LOOP_SOURCE = """
import java.io.BufferedReader;
import java.io.InputStreamReader;

/** Runs RocketMQ's benchmark Producer once per line of stdin (its arguments), in this JVM. */
public class VsProducerLoop {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        System.out.println("VS-LOOP-READY");
        System.out.flush();
        String line;
        while ((line = in.readLine()) != null) {
            line = line.trim();
            if (line.isEmpty()) {
                continue;
            }
            try {
                org.apache.rocketmq.example.benchmark.Producer.main(line.split(" +"));
            } catch (Throwable t) {
                t.printStackTrace(System.out);
            }
            System.out.println("VS-LOOP-DONE");
            System.out.flush();
        }
        System.exit(0);
    }
}
"""


class ProducerTool:
    """RocketMQ's benchmark Producer in one long-lived JVM (see the module docstring)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.log_path = self.workdir / "producer-tool.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def _compile(self) -> Path:
        classes = self.workdir / "classes"
        classes.mkdir(parents=True, exist_ok=True)
        src = self.workdir / f"{LOOP_CLASS}.java"
        src.write_text(LOOP_SOURCE)
        cp = subprocess.run([str(ROCKETMQ_BIN), "classpath"], capture_output=True, text=True, check=True).stdout.strip()
        subprocess.run(["javac", "-nowarn", "-cp", cp, "-d", str(classes), str(src)], check=True, capture_output=True)
        return classes

    def start(self, timeout: float = 60.0) -> ProducerTool:
        classes = self._compile()
        self._log = open(self.log_path, "ab")
        env = {**os.environ, **java_env(self.workdir), "EXTRA_CP": str(classes)}
        self.proc = subprocess.Popen(
            [str(ROCKETMQ_BIN), "java", LOOP_CLASS],
            stdin=subprocess.PIPE,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(self.workdir),
            start_new_session=True,
        )
        self._wait_for("VS-LOOP-READY", 0, timeout)
        return self

    def _text(self, start: int) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(start)
            return f.read().decode(errors="replace")

    def _wait_for(self, marker: str, start: int, timeout: float) -> str:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self._text(start)
            if marker in text:
                return text
            if self.proc.poll() is not None:
                raise RuntimeError(f"the producer tool JVM exited ({self.proc.returncode}):\n{text[-3000:]}")
            time.sleep(0.05)
        raise TimeoutError(
            f"the producer tool did not print {marker} within {timeout:.0f} s:\n{self._text(start)[-3000:]}"
        )

    def run(self, args: list[str], timeout: float) -> str:
        """One ``Producer.main(args)`` (give it ``-q``, or it never ends); its output. On a
        timeout the JVM is killed (``start()`` again to go on)."""
        assert self.proc is not None and self.proc.stdin is not None
        start = self.log_path.stat().st_size
        self.proc.stdin.write((" ".join(args) + "\n").encode())
        self.proc.stdin.flush()
        try:
            return self._wait_for("VS-LOOP-DONE", start, timeout)
        except TimeoutError:
            self.close()
            raise

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        if self._log is not None and not self._log.closed:
            self._log.close()

    def __enter__(self) -> ProducerTool:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def consumer_process(workdir: Path, namesrv: str, topic: str, group: str, threads: int = 20) -> Proc:
    """RocketMQ's benchmark Consumer (``bin/rocketmq consumer``), not yet started; ready when
    it prints ``Consumer Started.``."""
    argv = [str(ROCKETMQ_BIN), "consumer", "-n", namesrv, "-t", topic, "-g", group, "-w", str(threads)]
    return Proc(f"consumer-{group}", argv, Path(workdir), r"Consumer Started\.", java_env(Path(workdir)))
