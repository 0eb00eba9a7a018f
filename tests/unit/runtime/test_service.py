"""ServiceLoop (RocketMQ's ServiceThread on the loop) and TaskSet."""

from __future__ import annotations

import asyncio
import logging

import pytest

from rmq.runtime.service import ServiceLoop, TaskSet


class Counting(ServiceLoop):
    def __init__(self, interval: float | None, fail_at: int = -1) -> None:
        super().__init__("Counting")
        self._interval = interval
        self.runs = 0
        self.fail_at = fail_at
        self.stopped_with = -1

    def interval(self) -> float | None:
        return self._interval

    async def run_once(self) -> None:
        self.runs += 1
        if self.runs == self.fail_at:
            raise RuntimeError("boom")

    async def on_stop(self) -> None:
        self.stopped_with = self.runs


async def test_wakeup_runs_an_iteration_and_stop_runs_on_stop() -> None:
    s = Counting(None)
    s.start()
    await asyncio.sleep(0.01)
    assert s.runs == 0  # no interval: waits for a wakeup
    s.wakeup()
    await asyncio.sleep(0.01)
    assert s.runs == 1
    await s.stop()
    assert s.stopped and not s.started
    assert s.stopped_with == 1
    await s.stop()  # twice is fine


async def test_a_wakeup_while_busy_is_not_lost() -> None:
    release = asyncio.Event()

    class Slow(Counting):
        async def run_once(self) -> None:
            self.runs += 1
            if self.runs == 1:
                await release.wait()

    s = Slow(None)
    s.start()
    s.wakeup()
    await asyncio.sleep(0.01)
    s.wakeup()  # arrives during iteration 1
    release.set()
    await asyncio.sleep(0.01)
    assert s.runs == 2
    await s.stop()


async def test_interval_runs_repeatedly_and_a_failure_is_logged_not_fatal(caplog: pytest.LogCaptureFixture) -> None:
    s = Counting(0.005, fail_at=2)
    with caplog.at_level(logging.ERROR, logger="rmq.service"):
        s.start()
        await asyncio.sleep(0.1)
        await s.stop()
    assert s.runs >= 4
    assert sum("Counting: an iteration failed" in r.getMessage() for r in caplog.records) == 1


async def test_stop_with_cancel_interrupts_a_blocked_iteration() -> None:
    class Blocked(Counting):
        async def run_once(self) -> None:
            self.runs += 1
            await asyncio.sleep(3600)

    s = Blocked(0)
    s.start()
    await asyncio.sleep(0.01)
    await asyncio.wait_for(s.stop(cancel=True), 1)
    assert s.runs == 1 and s.stopped_with == -1


async def test_stop_before_start_is_a_no_op() -> None:
    await Counting(None).stop()


async def test_taskset_keeps_logs_and_closes(caplog: pytest.LogCaptureFixture) -> None:
    ts = TaskSet()

    async def fail() -> None:
        raise ValueError("bad")

    with caplog.at_level(logging.ERROR, logger="rmq.service"):
        ts.spawn(fail(), name="failing-task")
        long = ts.spawn(asyncio.sleep(3600), name="long")
        await asyncio.sleep(0.01)
    assert any("failing-task" in r.getMessage() for r in caplog.records)
    assert len(ts) == 1
    await ts.close()
    assert long.cancelled() and len(ts) == 0


async def test_periodic_service_first_run_after_initial_then_every_period() -> None:
    from rmq.runtime.service import PeriodicService

    runs: list[float] = []
    loop = asyncio.get_running_loop()
    t0 = loop.time()

    async def tick() -> None:
        runs.append(loop.time() - t0)

    s = PeriodicService("tick", 0.05, tick, initial=0.0)
    s.start()
    await asyncio.sleep(0.18)
    await s.stop()
    assert len(runs) >= 3
    assert runs[0] < 0.03  # initial: at once
    assert all(b - a >= 0.045 for a, b in zip(runs, runs[1:], strict=False))  # then every period

    plain: list[int] = []
    p = PeriodicService("plain", 0.01, lambda: plain.append(1))  # a plain function is fine too
    p.start()
    await asyncio.sleep(0.05)
    await p.stop()
    assert plain
