"""Dispatch: CommitLog records -> ConsumeQueue units and index entries (ReputMessageService).

Runs on the event loop in bounded steps (a few thousand records), yielding between
steps so puts keep flowing while dispatch catches up. It is woken by each commit of the
CommitLog's write buffer and dispatches committed records only. Records appended by
this process are not parsed back: the put path leaves their DispatchRequests in
CommitLog.dispatch_ready (tests/unit/store/test_dispatch_ready.py proves them equal to
what parsing gives).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from rmq.protocol.record import DispatchRequest, check_message_and_return_size
from rmq.runtime.service import ServiceLoop
from rmq.store.commitlog import CommitLog

__all__ = ["DispatchRequest", "ReputMessageService"]

log = logging.getLogger("rmq.store.dispatch")

Dispatcher = Callable[[list[DispatchRequest]], int]
"""Builds CQ units / index entries for requests; returns how many it handled."""


class ReputMessageService(ServiceLoop):
    """Follows the CommitLog's readable end from reput_from_offset and hands every
    record, decoded once, to the dispatcher (which builds CQ units and the index)."""

    def __init__(
        self, commitlog: CommitLog, delay_levels_ms: Sequence[int], dispatcher: Dispatcher, batch_limit: int = 2048
    ) -> None:
        super().__init__("ReputMessageService", log)
        self.commitlog = commitlog
        self.delay_levels_ms = list(delay_levels_ms)
        self.dispatcher = dispatcher
        self.batch_limit = batch_limit
        self.reput_from_offset = 0
        self.dispatched_records = 0
        self._tag_cache: dict[str, int] = {}
        self._idle: asyncio.Event | None = None
        self._stalled_at = -1
        # Pause between batches while something more urgent shares the loop (a slave
        # catching up appends first, dispatches after); 0 = only yield.
        self.throttle = 0.0
        # (offset, CommitLog end then) of a record dispatch waits to see complete (a
        # slave's CommitLog may end in the middle of one)
        self._incomplete = (-1, -1)
        # A master in controller mode dispatches (shows consumers) only what its
        # in-sync slaves acked, so a successor has everything a consumer may have
        # seen (RocketMQ 5's confirm offset); None = up to the CommitLog end.
        self.limit: int | None = None

    def start(self) -> None:
        self._idle = asyncio.Event()
        super().start()
        self.wakeup()  # dispatch what is there at once

    # --- settings (the store's recovery, truncation and role changes) ---
    def reset_offset(self, offset: int) -> None:
        """Dispatch continues from CommitLog offset (it must start a record)."""
        self.reput_from_offset = offset

    def set_limit(self, offset: int | None) -> None:
        """Dispatch stops at offset (None: at the CommitLog end); woken when it grows."""
        old = self.limit
        self.limit = offset
        if offset is None or old is None or offset > old:
            self.wakeup()

    def set_throttle(self, seconds: float) -> None:
        self.throttle = seconds

    def replay(self, start: int, end: int, dispatcher: Dispatcher) -> None:
        """Hand the records of [start, end) to dispatcher (not the store's), leaving
        the service's own position alone: the index rebuild at recovery."""
        saved, saved_dispatcher = self.reput_from_offset, self.dispatcher
        self.reput_from_offset = start
        self.dispatcher = dispatcher
        try:
            while self.reput_from_offset < end:
                if self.do_reput(4096) == 0:
                    break
        finally:
            self.dispatcher = saved_dispatcher
            self.reput_from_offset = saved

    @property
    def behind(self) -> int:
        """Bytes written to the CommitLog but not yet dispatched."""
        return max(self.commitlog.max_offset - self.reput_from_offset, 0)

    def is_caught_up(self) -> bool:
        """Everything readable is dispatched, but for an incomplete last record."""
        end = self.commitlog.max_offset
        return self.reput_from_offset >= end or self._incomplete == (self.reput_from_offset, end)

    async def wait_caught_up(self, timeout: float | None = None) -> bool:
        """Until dispatch has reached the CommitLog end (as of each check)."""

        async def _wait() -> None:
            while not self.is_caught_up():
                if self._stalled_at >= 0 and self._stalled_at == self.reput_from_offset:
                    return
                assert self._idle is not None
                self._idle.clear()
                self.wakeup()
                await self._idle.wait()

        try:
            await asyncio.wait_for(_wait(), timeout)
        except TimeoutError:
            return False
        return self.is_caught_up()

    async def run_once(self) -> None:
        assert self._idle is not None
        while not self.stopped and self.reput_from_offset < self._end():
            if self.do_reput(self.batch_limit) == 0:
                break
            await asyncio.sleep(self.throttle)
        self._idle.set()

    async def dispatch_all(self) -> None:
        """Dispatch every complete record now, yielding between batches (a slave's
        tail may end mid-record: wait_caught_up would wait for the rest)."""
        while self.do_reput(self.batch_limit):
            await asyncio.sleep(0)

    def _end(self) -> int:
        end = self.commitlog.max_offset
        return end if self.limit is None or self.limit >= end else self.limit

    def do_reput(self, limit: int) -> int:
        """Dispatch up to limit records from reput_from_offset; returns how many.

        Records this process appended come with their DispatchRequest ready
        (CommitLog.dispatch_ready, same as parsing them would give); everything else
        (replicated data, records written before a restart, a BLANK) is parsed from
        the file. Only committed bytes are dispatched.
        """
        cl = self.commitlog
        offset = start = self.reput_from_offset
        if offset < cl.min_offset:
            log.warning("reput offset %d is below the CommitLog minimum %d; skipping ahead", offset, cl.min_offset)
            offset = cl.min_offset
        reqs: list[DispatchRequest] = []
        append = reqs.append
        levels = self.delay_levels_ms
        cache = self._tag_cache
        max_offset = cl.max_offset
        if self.limit is not None and self.limit < max_offset:
            max_offset = self.limit
        ready = cl.dispatch_ready
        popleft = ready.popleft
        n = 0
        while n < limit and offset < max_offset:
            # fast path: the put path's requests, while they continue at offset
            while ready and n < limit:
                r = ready[0]
                o = r.commit_log_offset
                if o != offset:
                    if o < offset:
                        popleft()  # dispatched from the file already
                        continue
                    break
                nxt = o + r.msg_size
                if nxt > max_offset:
                    break
                popleft()
                append(r)
                n += 1
                offset = nxt
            if n >= limit or offset >= max_offset:
                break
            if ready and ready[0].commit_log_offset == offset:
                break  # the next record (complete) ends past the dispatch limit
            # slow path: parse from the file up to the next ready request (if any)
            stop_at = ready[0].commit_log_offset if ready else -1
            got = cl.get_data(offset)
            if got is None:
                break
            mf, pos, end = got
            base = mf.file_from_offset
            if base + end > max_offset:
                end = max_offset - base
            mm = mf.mm
            stop = False
            while pos < end and n < limit:
                if base + pos == stop_at:
                    break
                size, req = check_message_and_return_size(mm, pos, False, levels, cache)
                if size > 0 and pos + size > end:
                    stop = True  # not all of it is here yet (a slave mid-record)
                    self._incomplete = (base + pos, max_offset)
                    break
                if req is not None:
                    append(req)
                    n += 1
                    pos += size
                elif size == 0:
                    if end < mf.file_size:
                        # a BLANK is complete with its padding: a slave may have only
                        # part of it (or the dispatch limit cuts it); wait for the rest
                        stop = True
                        self._incomplete = (base + pos, max_offset)
                        break
                    pos = mf.file_size  # BLANK: the rest of this file is padding
                    break
                elif size > 0:
                    log.error("[BUG] record at %d: fields do not add up to TOTALSIZE %d; skipped", base + pos, size)
                    pos += size
                else:
                    at = base + pos
                    if self._stalled_at != at:
                        log.error("dispatch stopped at CommitLog offset %d: invalid record", at)
                        self._stalled_at = at
                    stop = True
                    break
            offset = base + pos
            if stop:
                break
        if reqs:
            done = self.dispatcher(reqs)
            if done < len(reqs):
                # a dispatcher failed (e.g. no disk for a new CQ file): retry from there
                offset = reqs[done].commit_log_offset
                reqs = reqs[:done]
        self.dispatched_records += len(reqs)
        self.reput_from_offset = offset
        return len(reqs) or (1 if offset > start else 0)

    async def stop(self, cancel: bool = False) -> None:
        """Finish dispatching what is written (cancel=False), then stop."""
        if self.started and not cancel:
            await self.wait_caught_up(timeout=30)
        await super().stop(cancel)
