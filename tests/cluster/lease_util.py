"""Helpers for the master-lease tests: a TCP proxy that can hold every byte (one
broker's link to the controller, as if the controller were SIGSTOPped for that broker
alone) and says when bytes last went through, and a sender that keeps writing to one
broker and records every answer with its time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

from rmq.protocol.codes import ResponseCode
from rmq.remoting.errors import RemotingError
from tests.cluster.etcd_util import TcpProxy
from tests.integration.broker_util import BrokerApi


class TimedProxy(TcpProxy):
    """etcd_util's TcpProxy (``blackhole()``: every byte held both ways, connections left
    open, as a SIGSTOPped peer looks to its clients) that also keeps ``last_up``: the
    monotonic time bytes last went on to the target."""

    def __init__(self, target: str) -> None:
        super().__init__(target)
        self.last_up = 0.0
        self._target_port = int(target.rsplit(":", 1)[1])

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if writer.get_extra_info("peername")[1] == self._target_port:
            writer = _Stamped(writer, self)  # type: ignore[assignment]
        await super()._pump(reader, writer)


class _Stamped:
    def __init__(self, inner: asyncio.StreamWriter, proxy: TimedProxy) -> None:
        self._inner = inner
        self._proxy = proxy

    def write(self, data: bytes) -> None:
        self._proxy.last_up = time.monotonic()
        self._inner.write(data)

    async def drain(self) -> None:
        await self._inner.drain()

    def close(self) -> None:
        self._inner.close()


@dataclass
class Answer:
    sent: float  # monotonic
    got: float
    code: int
    remark: str


@dataclass
class Writer:
    """Sends one message at a time to ``addr`` (SEND_MESSAGE_V2, straight to that broker,
    no client retry) every ``pace`` seconds and keeps every answer."""

    addr: str
    topic: str
    pace: float = 0.02
    answers: list[Answer] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    def start(self) -> Writer:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        async with BrokerApi(self.addr) as api:
            while True:
                t0 = time.monotonic()
                try:
                    r = await api.send(self.topic, b"lease", timeout=2.0)
                    code, remark = r.code, r.remark or ""
                except (RemotingError, OSError) as e:
                    code, remark = -1, str(e)
                self.answers.append(Answer(t0, time.monotonic(), code, remark))
                await asyncio.sleep(self.pace)

    def first(self, code: int, after: float = 0.0) -> Answer | None:
        return next((a for a in self.answers if a.code == code and a.sent >= after), None)

    def last(self, code: int, before: float) -> Answer | None:
        return next((a for a in reversed(self.answers) if a.code == code and a.got <= before), None)

    def codes_between(self, t0: float, t1: float) -> set[int]:
        return {a.code for a in self.answers if t0 <= a.sent and a.got <= t1}

    def outages(self, t0: float, t1: float) -> list[tuple[Answer, Answer]]:
        """Runs of answers other than SUCCESS between t0 and t1: (first, last) of each."""
        runs: list[tuple[Answer, Answer]] = []
        first: Answer | None = None
        last: Answer | None = None
        for a in self.answers:
            if not (t0 <= a.sent and a.got <= t1):
                continue
            if a.code != OK:
                first, last = first or a, a
            elif first is not None and last is not None:
                runs.append((first, last))
                first = last = None
        if first is not None and last is not None:
            runs.append((first, last))
        return runs

    async def wait_for(self, code: int, after: float, timeout: float) -> Answer:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            a = self.first(code, after)
            if a is not None:
                return a
            await asyncio.sleep(0.01)
        seen = sorted({a.code for a in self.answers if a.sent >= after})
        raise AssertionError(f"{self.addr} never answered code {code} in {timeout} s (answers since: {seen})")


OK = ResponseCode.SUCCESS
FENCED = ResponseCode.SERVICE_NOT_AVAILABLE
