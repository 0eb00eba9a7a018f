"""One remoting TCP connection, either side: frames in, frames out, opaque -> future.

``Connection`` is the ``asyncio.Protocol`` of the socket. Bytes go through the sans-IO
``FrameDecoder``; requests are handed to a dispatch callable (the server's processor
table or the client's handler), responses complete the future of the request with the
same opaque. Nothing here knows about codes or processors.

Two things shape the hot path:

* Writes are coalesced. Frames queued during one loop iteration go out with one
  ``transport.writelines`` scheduled by ``call_soon`` when the first frame is queued (or
  at the end of the read that produced them): a group-commit round answers hundreds of
  sends in one iteration, and one syscall per response would cap throughput. A batch is
  also written as soon as it holds ``coalesce_limit`` bytes (16 KiB: ~50 small
  responses per syscall): the peer starts on the first part while we produce the rest.
  With one batch of everything, a client and a server keeping 64 requests in flight
  degenerate into one batch bouncing between them, each side idle while the other
  works; capping the batch doubled requests/s in bench/remoting_bench.py.
* Flow control without unbounded buffers. A request counts as *in flight* from the
  moment it is decoded until its response is queued (two-way) or its processor is done
  (oneway). Above ``max_inflight`` the connection stops dispatching and pauses reading;
  it resumes below half. Server-side connections also stop reading while the transport's
  write buffer is above its high-water mark (the peer is not reading its responses).
  Frames already decoded when a pause starts wait in a backlog bounded by one read.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass

from rmq.protocol.codes import RemotingFlag, RequestCode
from rmq.protocol.errors import ProtocolError
from rmq.protocol.frame import MAX_FRAME_LENGTH, FrameDecoder, RemotingCommand, encode_parts
from rmq.remoting.errors import RemotingClosedError, RemotingSendRequestError, RemotingTimeoutError

__all__ = ["Connection", "RemotingStats", "format_address"]

logger = logging.getLogger("rmq.remoting")

_RESPONSE: int = RemotingFlag.RESPONSE
_ONEWAY: int = RemotingFlag.ONEWAY
_TYPE_BITS: int = RemotingFlag.RESPONSE | RemotingFlag.ONEWAY

# Why reading is paused; reading resumes when no reason is left.
_PAUSE_INFLIGHT = 1  # too many requests not yet answered
_PAUSE_WRITE = 2  # transport write buffer above its high-water mark
_PAUSE_CLOSING = 4  # close() was called: dispatch nothing more


@dataclass(slots=True)
class RemotingStats:
    """Counters of one server or one client (shared by all of its connections)."""

    connections_accepted: int = 0  # server: accepted; client: opened
    connections_closed: int = 0
    requests: int = 0  # requests received and dispatched
    protocol_errors: int = 0  # connections closed for bad input
    read_pauses: int = 0  # times a connection stopped reading (flow control)
    unmatched_responses: int = 0  # responses whose opaque had no pending request
    processor_errors: int = 0  # processors that raised (answered SYSTEM_ERROR)
    timeouts: int = 0  # requests of ours that timed out
    auth_refused: int = 0  # requests the auth hook refused (not processed)


def format_address(addr: object) -> str:
    """``"ip:port"`` for an IPv4 peername, ``"[ip]:port"`` for IPv6, ``"?"`` if unknown."""
    if isinstance(addr, tuple) and len(addr) >= 2:
        host = addr[0]
        return f"[{host}]:{addr[1]}" if ":" in host else f"{host}:{addr[1]}"
    return "?" if addr is None else str(addr)


Dispatch = Callable[["Connection", RemotingCommand], None]
ConnectionCallback = Callable[["Connection"], None]


class Connection(asyncio.Protocol):
    """One TCP connection. Created by ``RemotingServer`` / ``RemotingClient``, not by users.

    Public: ``remote_address``, ``local_address``, ``attrs`` (free for the owner, e.g. the
    broker's client id), ``closed``, ``request``, ``send_oneway``, ``send_response``,
    ``drain``, ``close``, ``wait_closed``.
    """

    def __init__(
        self,
        *,
        dispatch: Dispatch,
        stats: RemotingStats,
        name: str,
        max_inflight: int = 4096,
        max_frame_length: int = MAX_FRAME_LENGTH,
        pause_reading_on_write_pressure: bool = True,
        write_buffer_high: int | None = 1 << 20,
        coalesce_limit: int = 16 << 10,
        on_made: ConnectionCallback | None = None,
        on_lost: ConnectionCallback | None = None,
    ) -> None:
        if max_inflight < 1:
            raise ValueError("max_inflight must be at least 1")
        self.remote_address = "?"
        self.local_address = "?"
        self.attrs: dict[str, object] = {}
        self.closed = False
        self._loop = asyncio.get_running_loop()
        self._dispatch = dispatch
        self._stats = stats
        self._name = name
        self._decoder = FrameDecoder(max_frame_length)
        self._transport: asyncio.Transport | None = None
        self._on_made = on_made
        self._on_lost = on_lost
        self._closed_fut: asyncio.Future[None] = self._loop.create_future()
        # requests we sent, by opaque. Opaques are per connection: they only have to
        # be unique among one connection's pending requests.
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._opaques = itertools.count(1)
        # requests answered later through send_response whose answer someone observes
        # (rpc latency metrics): opaque -> callback(response code). Empty unless metrics are on.
        self._deferred: dict[int, Callable[[int], None]] = {}
        # write coalescing: buffers queued since the last write; whenever it turns
        # non-empty a flush is scheduled (it may find it already written)
        self._out: list = []
        self._out_size = 0
        self._coalesce_limit = coalesce_limit
        # flow control
        self._max_inflight = max_inflight
        self._resume_inflight = max_inflight // 2
        self._inflight = 0
        self._pause_mask = 0
        self._reading_paused = False
        self._resume_scheduled = False
        self._backlog: list[RemotingCommand] = []
        self._pause_on_write = pause_reading_on_write_pressure
        self._write_buffer_high = write_buffer_high
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<Connection {self._name} {self.local_address} <-> {self.remote_address} {state}>"

    # ------------------------------------------------------------------ public
    @property
    def inflight(self) -> int:
        """Requests received on this connection whose handling is not finished."""
        return self._inflight

    @property
    def pending_requests(self) -> int:
        """Requests we sent on this connection still waiting for their response."""
        return len(self._pending)

    @property
    def reading_paused(self) -> bool:
        return self._reading_paused

    @property
    def write_blocked(self) -> bool:
        """The transport's write buffer is above its high-water mark."""
        return self._write_paused

    async def request(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send ``cmd`` as a two-way request (fresh opaque) and await its response.

        Raises ``RemotingTimeoutError`` after ``timeout`` seconds (the pending entry is
        dropped; a late response is logged and discarded), ``RemotingClosedError`` if the
        connection is or becomes closed, ``RemotingSendRequestError`` if it does not encode.
        """
        if self.closed:
            raise RemotingClosedError(f"connection to {self.remote_address} is closed")
        loop = self._loop
        if self._write_paused:
            # Back-pressure for the sender: the peer is not reading; do not pile up
            # requests in the transport buffer.
            start = loop.time()
            await self.drain(timeout)
            timeout -= loop.time() - start
        opaque = next(self._opaques) & 0x7FFFFFFF
        cmd.opaque = opaque
        cmd.flag &= ~_TYPE_BITS
        try:
            prefix, body = encode_parts(cmd)
        except ProtocolError as e:
            raise RemotingSendRequestError(
                f"cannot encode request {RequestCode.name_of(cmd.code)} to {self.remote_address}: {e}"
            ) from e
        fut: asyncio.Future[RemotingCommand] = loop.create_future()
        self._pending[opaque] = fut
        self._queue(prefix, body)
        timer = loop.call_later(timeout, self._expire, opaque, cmd.code, timeout)
        try:
            return await fut
        finally:
            timer.cancel()
            # Already gone when answered; this drops it on timeout or cancellation.
            self._pending.pop(opaque, None)

    def send_oneway(self, cmd: RemotingCommand) -> None:
        """Send ``cmd`` with the ONEWAY flag and a fresh opaque; nothing comes back."""
        if self.closed:
            raise RemotingClosedError(f"connection to {self.remote_address} is closed")
        cmd.opaque = next(self._opaques) & 0x7FFFFFFF
        cmd.flag = (cmd.flag & ~_RESPONSE) | _ONEWAY
        try:
            prefix, body = encode_parts(cmd)
        except ProtocolError as e:
            raise RemotingSendRequestError(
                f"cannot encode oneway request {RequestCode.name_of(cmd.code)} to {self.remote_address}: {e}"
            ) from e
        self._queue(prefix, body)

    def send_response(self, resp: RemotingCommand) -> None:
        """Queue a response (RESPONSE flag set here; opaque and serialize type as given).

        For processors that answer later (long polling): build the response with
        ``request.create_response(...)`` so opaque and serialize type match. Dropped
        silently if the connection closed meanwhile. Raises ``ProtocolError`` if the
        response does not encode (nothing is sent then).
        """
        resp.flag |= _RESPONSE
        if self.closed:
            logger.debug("%s: response opaque=%d to closed %s dropped", self._name, resp.opaque, self.remote_address)
            return
        prefix, body = encode_parts(resp)
        self._queue(prefix, body)
        if self._deferred:
            observe = self._deferred.pop(resp.opaque, None)
            if observe is not None:
                observe(resp.code)
        if self._inflight:
            self._finish_request()

    def observe_deferred(self, opaque: int, observe: Callable[[int], None]) -> None:
        """Call observe(response code) when the response to request opaque is sent
        (a processor that answers later through send_response)."""
        self._deferred[opaque] = observe

    async def drain(self, timeout: float | None = None) -> None:
        """Wait until the transport's write buffer is below its low-water mark."""
        if not self._write_paused:
            return
        if self.closed:
            raise RemotingClosedError(f"connection to {self.remote_address} is closed")
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._drain_waiters.append(waiter)
        try:
            if timeout is None:
                await waiter
            else:
                await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            self._stats.timeouts += 1
            raise RemotingTimeoutError(
                f"{self.remote_address} not writable within {(timeout or 0) * 1000:.0f}ms"
            ) from None
        finally:
            try:
                self._drain_waiters.remove(waiter)
            except ValueError:
                pass
        if self.closed:
            raise RemotingClosedError(f"connection to {self.remote_address} closed")

    def close(self) -> None:
        """Flush what is queued and close gracefully; pending requests fail on close."""
        if self._transport is None or self.closed:
            return
        self._pause_mask |= _PAUSE_CLOSING
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        """Close at once, dropping unsent data."""
        if self._transport is None or self.closed:
            return
        self._pause_mask |= _PAUSE_CLOSING
        self._out = []
        self._out_size = 0
        self._transport.abort()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed_fut)

    # ------------------------------------------------------------------ protocol callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # no isinstance check: uvloop's transports are not asyncio.Transport subclasses
        tr: asyncio.Transport = transport  # type: ignore[assignment]  # uvloop: not a Transport subclass
        self._transport = tr
        self.remote_address = format_address(transport.get_extra_info("peername"))
        self.local_address = format_address(transport.get_extra_info("sockname"))
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                # asyncio and uvloop both set it already; being explicit costs nothing
                # and a delayed ACK + Nagle would add 40 ms to every small request.
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except (OSError, AttributeError):
                pass
        if self._write_buffer_high is not None:
            # A pull response can be hundreds of KiB: a 64 KiB default high-water mark
            # would stop reading on almost every big response.
            tr.set_write_buffer_limits(high=self._write_buffer_high)
        if self._on_made is not None:
            self._on_made(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._pause_mask |= _PAUSE_CLOSING
        self._out = []
        self._out_size = 0
        self._backlog = []
        pending = self._pending
        self._pending = {}
        if pending:
            why = f"connection to {self.remote_address} closed" + (f": {exc}" if exc else "")
            for fut in pending.values():
                if not fut.done():
                    # one instance each: a shared one would collect every awaiter's traceback
                    fut.set_exception(RemotingClosedError(why))
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        if not self._closed_fut.done():
            self._closed_fut.set_result(None)
        self._stats.connections_closed += 1
        if self._on_lost is not None:
            self._on_lost(self)

    def data_received(self, data: bytes) -> None:
        try:
            cmds = self._decoder.feed(data)
        except ProtocolError as e:
            self._protocol_error(e)
            return
        if cmds:
            if self._pause_mask or self._backlog:
                self._backlog.extend(cmds)
            else:
                self._process(cmds)
                if self._out:
                    # Answers produced synchronously for this read leave now, in one
                    # write, instead of one loop iteration later (the scheduled flush
                    # then finds nothing to do).
                    self._flush()

    def eof_received(self) -> bool | None:
        return None  # close our side too; the peer is gone

    def pause_writing(self) -> None:
        self._write_paused = True
        if self._pause_on_write:
            self._pause(_PAUSE_WRITE)

    def resume_writing(self) -> None:
        self._write_paused = False
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        if self._pause_mask & _PAUSE_WRITE:
            self._unpause(_PAUSE_WRITE)

    # ------------------------------------------------------------------ internals
    def _process(self, cmds: list[RemotingCommand]) -> None:
        dispatch = self._dispatch
        max_inflight = self._max_inflight
        n = len(cmds)
        i = 0
        while i < n:
            cmd = cmds[i]
            i += 1
            if cmd.flag & _RESPONSE:
                self._on_response(cmd)
            else:
                self._inflight += 1
                if self._inflight > max_inflight:
                    self._pause(_PAUSE_INFLIGHT)
                dispatch(self, cmd)
            if self._pause_mask and i < n:
                # Keep the rest of this read for later: with reading paused, this
                # backlog (at most one read's worth) is all that waits.
                self._backlog.extend(cmds[i:])
                return

    def _on_response(self, cmd: RemotingCommand) -> None:
        fut = self._pending.pop(cmd.opaque, None)
        if fut is None:
            self._stats.unmatched_responses += 1
            # Normal after a timeout or a cancelled long poll; the counter keeps the tally.
            logger.debug(
                "%s: response opaque=%d code=%d from %s matches no pending request (timed out?); dropped",
                self._name,
                cmd.opaque,
                cmd.code,
                self.remote_address,
            )
            return
        if not fut.done():
            fut.set_result(cmd)

    def _expire(self, opaque: int, code: int, timeout: float) -> None:
        fut = self._pending.pop(opaque, None)
        if fut is not None and not fut.done():
            self._stats.timeouts += 1
            fut.set_exception(
                RemotingTimeoutError(
                    f"wait response on {self.remote_address} timeout {timeout * 1000:.0f}ms, "
                    f"request {RequestCode.name_of(code)} opaque={opaque}"
                )
            )

    def _queue(self, prefix: bytes, body: object) -> None:
        out = self._out
        if not out:
            self._loop.call_soon(self._flush)
        out.append(prefix)
        if body is None:
            self._out_size += len(prefix)
        else:
            out.append(body)
            self._out_size += len(prefix) + len(body)  # type: ignore[arg-type]
        if self._out_size >= self._coalesce_limit:
            # Enough for one syscall; writing now also lets the transport's
            # pause_writing stop dispatch before big responses pile up here.
            self._flush()

    def flush(self) -> None:
        """Write the queued responses now (one writelines) rather than at the flush
        scheduled for the next loop iteration; for answers sent from a callback that
        ends a batch (a commit round)."""
        self._flush()

    def _flush(self) -> None:
        out = self._out
        if not out:
            return
        self._out = []
        self._out_size = 0
        transport = self._transport
        if self.closed or transport is None or transport.is_closing():
            return
        transport.writelines(out)

    def _finish_request(self) -> None:
        """One in-flight request is done (answered, or a oneway processor finished)."""
        n = self._inflight - 1
        if n < 0:
            return
        self._inflight = n
        if n <= self._resume_inflight and self._pause_mask & _PAUSE_INFLIGHT:
            self._unpause(_PAUSE_INFLIGHT)

    def _pause(self, reason: int) -> None:
        self._pause_mask |= reason
        if not self._reading_paused:
            self._reading_paused = True
            self._stats.read_pauses += 1
            logger.debug(
                "%s: pause reading %s (reason %d, in flight %d)",
                self._name,
                self.remote_address,
                reason,
                self._inflight,
            )
            transport = self._transport
            if transport is not None and not transport.is_closing():
                transport.pause_reading()

    def _unpause(self, reason: int) -> None:
        self._pause_mask &= ~reason
        if not self._pause_mask and self._reading_paused and not self._resume_scheduled:
            # Not inline: we may be deep inside a processor's send_response, and the
            # backlog's dispatch must not recurse into it.
            self._resume_scheduled = True
            self._loop.call_soon(self._resume)

    def _resume(self) -> None:
        self._resume_scheduled = False
        if self._pause_mask or self.closed:
            return
        if self._backlog:
            cmds = self._backlog
            self._backlog = []
            self._process(cmds)
            if self._pause_mask:
                return
        self._reading_paused = False
        logger.debug("%s: resume reading %s", self._name, self.remote_address)
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.resume_reading()

    def _protocol_error(self, e: ProtocolError) -> None:
        if self._pause_mask & _PAUSE_CLOSING:
            return  # already being closed; the decoder just repeats its first error
        self._stats.protocol_errors += 1
        logger.warning("%s: bad input from %s, closing the connection: %s", self._name, self.remote_address, e)
        self.abort()
