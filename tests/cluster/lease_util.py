"""Helpers for the master-lease tests: a TCP relay that can be frozen (one broker's
link to the controller, as if the controller were SIGSTOPped for that broker alone),
and a sender that keeps writing to one broker and records every answer with its time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

from rmq.protocol.codes import ResponseCode
from rmq.remoting.errors import RemotingError
from tests.integration.broker_util import BrokerApi


class FreezableRelay:
    """127.0.0.1:<port> -> target. ``freeze()``: bytes stop moving both ways and new
    connections are held (the TCP connections stay open, nothing is answered: what a
    broker sees of a SIGSTOPped peer); ``thaw()``: everything held goes on in order.
    ``last_up``: monotonic time bytes last went from a client to the target."""

    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.port = 0
        self.last_up = 0.0
        self._open = asyncio.Event()
        self._open.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> FreezableRelay:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def freeze(self) -> None:
        self._open.clear()

    def thaw(self) -> None:
        self._open.set()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        for w in self._writers:
            w.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self._writers.append(w)
        await self._open.wait()
        try:
            ur, uw = await asyncio.open_connection(*self.target)
        except OSError:
            w.close()
            return
        self._writers.append(uw)
        for src, dst, up in ((r, uw, True), (ur, w, False)):
            t = asyncio.get_running_loop().create_task(self._pump(src, dst, up))
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, up: bool) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while True:
                data = await src.read(65536)
                await self._open.wait()  # frozen: held here (and the kernel buffers fill)
                if not data:
                    break
                dst.write(data)
                await dst.drain()
                if up:
                    self.last_up = time.monotonic()
        dst.close()


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
