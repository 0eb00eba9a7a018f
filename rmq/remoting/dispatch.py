"""Request dispatch: code -> processor, and the generic answers of spec 1.5.

Shared by ``RemotingServer`` (requests from clients) and ``RemotingClient`` (requests the
server initiates, e.g. NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE).

A processor is ``fn(conn, cmd) -> RemotingCommand | None | Awaitable[RemotingCommand | None]``:

* a command is answered at once, in the same call (no task per request: this is the hot
  path); its opaque is set to the request's, the RESPONSE flag set, and its serialize
  type forced to the request's (4.9.8 answers in the request's header encoding);
* ``None`` means no response now. For a oneway request that is the end of it; for a
  two-way request the processor has taken the request over and answers later with
  ``conn.send_response`` (long polling). Until then it counts as in flight on the
  connection (flow control);
* a Future gets a done-callback, a coroutine gets a task; their result follows the same
  rules.

Unknown code -> REQUEST_CODE_NOT_SUPPORTED. A processor that raises -> SYSTEM_ERROR with the
exception text, logged once per (code, exception type) at ERROR with the traceback, then at
DEBUG. A request header field that is missing or malformed (``HeaderFieldError`` from
``rmq.protocol.headers``, raised by any processor) is the client's error, not ours: SYSTEM_ERROR
with RocketMQ's remark (``the custom field <topic> is null``), logged as one WARNING line
without traceback at most once per peer address, then at DEBUG. A oneway request is never
answered, not even with an error.

``rpc_observer`` (optional, metrics): called as ``(request code, response code, seconds)``
for every two-way request the dispatcher answers, with the time from dispatch to the
response being queued. A processor that returns ``ANSWER_LATER`` answers through
``conn.send_response`` from a callback (a flush or replication round) and is seen when that
response leaves; requests a processor takes over by returning None (long-polling pulls) are
not seen. Unset, it costs one attribute load per request.

``auth_hook`` (optional, access control): called as ``(peer address, request)`` before the
processor; None lets the request through, a command refuses it. The refusal is sent as it
is (only its opaque set: 4.9.8 answers ACL failures in JSON whatever the request used); a
refused oneway request gets no answer. Either way the processor never sees it. The hook
must not raise (a raise is answered SYSTEM_ERROR like a processor's). Unset, it costs one
attribute load per request: the broker's per-message CPU is measured.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import Any

from rmq.protocol.codes import RemotingFlag, RequestCode, ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import HeaderFieldError
from rmq.remoting.connection import Connection, RemotingStats

__all__ = ["ANSWER_LATER", "AnswerLater", "AuthHook", "Processor", "RequestDispatcher", "RpcObserver", "exception_text"]

logger = logging.getLogger("rmq.remoting")


class AnswerLater:
    """The type of ANSWER_LATER (one instance)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ANSWER_LATER"


#: A processor's result: "I answer this request through conn.send_response soon, from a
#: callback; it is an rpc like any other" (unlike None: taken over, e.g. a held pull).
ANSWER_LATER = AnswerLater()

ProcessorResult = RemotingCommand | None | AnswerLater | Awaitable[RemotingCommand | None]
Processor = Callable[[Connection, RemotingCommand], ProcessorResult]
RpcObserver = Callable[[int, int, float], None]
#: ``(peer "host:port", request) -> None`` (allowed) or the refusal to send.
AuthHook = Callable[[str, RemotingCommand], RemotingCommand | None]

_ONEWAY: int = RemotingFlag.ONEWAY

# Bound on the "already logged" memory: a default processor can see any of 2^32 codes.
# Past it, new (code, exception type) pairs are logged at DEBUG only. The same bound holds
# for the peers already warned about a bad request header.
_MAX_LOGGED_KEYS = 4096


def exception_text(exc: BaseException) -> str:
    """The remark of a SYSTEM_ERROR answer: like Java's ``Throwable.toString()``."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class RequestDispatcher:
    """The processor table of one server or client; ``dispatch`` is called per request."""

    def __init__(self, name: str, stats: RemotingStats) -> None:
        self.name = name
        self.stats = stats
        self._processors: dict[int, Processor] = {}
        self._default: Processor | None = None
        self._logged: set[tuple[int, type]] = set()
        self._warned_peers: set[str] = set()
        # Strong references to processor tasks (the loop only keeps weak ones).
        self._tasks: set[asyncio.Future] = set()
        self.rpc_observer: RpcObserver | None = None
        self.auth_hook: AuthHook | None = None

    def register(self, code: int, fn: Processor) -> None:
        self._processors[int(code)] = fn

    def register_default(self, fn: Processor | None) -> None:
        self._default = fn

    def cancel_tasks(self) -> None:
        """Cancel processor tasks still running (server stop / client close)."""
        for task in list(self._tasks):
            task.cancel()

    # ------------------------------------------------------------------ hot path
    def dispatch(self, conn: Connection, cmd: RemotingCommand) -> None:
        """Run the processor for ``cmd`` (already counted in flight by ``conn``)."""
        self.stats.requests += 1
        if self.auth_hook is not None and self._refused(conn, cmd, self.auth_hook):
            return
        fn = self._processors.get(cmd.code)
        if fn is None:
            fn = self._default
        if fn is None:
            self._unsupported(conn, cmd)
            return
        t0 = perf_counter() if self.rpc_observer is not None else None
        try:
            result = fn(conn, cmd)
        except Exception as e:
            self._failed(conn, cmd, e)
            if t0 is not None:
                self._observe(cmd, ResponseCode.SYSTEM_ERROR, t0)
            return
        if type(result) is RemotingCommand:
            self._answer(conn, cmd, result)
            if t0 is not None:
                self._observe(cmd, result.code, t0)
        elif result is None:
            if cmd.flag & _ONEWAY:
                conn._finish_request()
            # two-way: the processor took the request over (long polling) and answers
            # through conn.send_response when it likes; not an rpc latency
        elif result is ANSWER_LATER:
            if cmd.flag & _ONEWAY:
                conn._finish_request()
            elif t0 is not None:
                # answered through conn.send_response from a flush / replication round's
                # callback (no task per request): observed when that response leaves
                conn.observe_deferred(cmd.opaque, functools.partial(self._observe_code, cmd.code, t0))
        else:
            self._attach(conn, cmd, result, t0)

    def _refused(self, conn: Connection, cmd: RemotingCommand, hook: AuthHook) -> bool:
        """Ask the auth hook; True when it refused ``cmd`` (answered unless oneway)."""
        try:
            refusal = hook(conn.remote_address, cmd)
        except Exception as e:
            self._failed(conn, cmd, e)
            return True  # an auth check that fails open would be worse than an error
        if refusal is None:
            return False
        self.stats.auth_refused += 1
        if cmd.flag & _ONEWAY:
            conn._finish_request()  # dropped unprocessed, as 4.9.8 does
            return True
        refusal.opaque = cmd.opaque
        try:
            conn.send_response(refusal)
        except Exception as e:  # e.g. an AccessKey with a lone surrogate in the remark
            self._failed(conn, cmd, e)
        return True

    def _observe(self, req: RemotingCommand, response_code: int, t0: float) -> None:
        observer = self.rpc_observer
        if observer is not None and not req.flag & _ONEWAY:
            observer(req.code, response_code, perf_counter() - t0)

    def _observe_code(self, request_code: int, t0: float, response_code: int) -> None:
        observer = self.rpc_observer
        if observer is not None:
            observer(request_code, response_code, perf_counter() - t0)

    def _answer(self, conn: Connection, req: RemotingCommand, resp: RemotingCommand) -> None:
        if req.flag & _ONEWAY:
            conn._finish_request()  # never answer a oneway request
            return
        resp.opaque = req.opaque
        resp.serialize_type = req.serialize_type
        try:
            conn.send_response(resp)
        except Exception as e:  # the processor's response does not encode
            self._failed(conn, req, e)

    # ------------------------------------------------------------------ async results
    def _attach(self, conn: Connection, req: RemotingCommand, result: object, t0: float | None = None) -> None:
        if isinstance(result, RemotingCommand):  # a subclass
            self._answer(conn, req, result)
            if t0 is not None:
                self._observe(req, result.code, t0)
            return
        if asyncio.isfuture(result):
            fut = result
        elif asyncio.iscoroutine(result):
            fut = conn._loop.create_task(result)
            self._tasks.add(fut)
            fut.add_done_callback(self._tasks.discard)
        elif inspect.isawaitable(result):
            fut = asyncio.ensure_future(result)
            self._tasks.add(fut)
            fut.add_done_callback(self._tasks.discard)
        else:
            self._failed(
                conn,
                req,
                TypeError(f"processor returned {type(result).__name__}, not a RemotingCommand, None or an awaitable"),
            )
            return
        done: Callable[[asyncio.Future[Any]], object]
        if t0 is None:
            done = functools.partial(self._on_done, conn, req)
        else:
            done = functools.partial(self._on_done_observed, conn, req, t0)
        fut.add_done_callback(done)

    def _on_done_observed(self, conn: Connection, req: RemotingCommand, t0: float, fut: asyncio.Future) -> None:
        code = self._on_done(conn, req, fut)
        if code is not None:
            self._observe(req, code, t0)

    def _on_done(self, conn: Connection, req: RemotingCommand, fut: asyncio.Future) -> int | None:
        """Answer from a processor's future; returns the response code sent, if any."""
        if fut.cancelled():
            logger.debug(
                "%s: processing of %s from %s was cancelled",
                self.name,
                RequestCode.name_of(req.code),
                conn.remote_address,
            )
            if req.flag & _ONEWAY:
                conn._finish_request()
                return None
            self._send_error(conn, req, ResponseCode.SYSTEM_ERROR, "request processing was cancelled")
            return ResponseCode.SYSTEM_ERROR
        exc = fut.exception()
        if exc is not None:
            self._failed(conn, req, exc)
            return ResponseCode.SYSTEM_ERROR
        result = fut.result()
        if result is None:
            if req.flag & _ONEWAY:
                conn._finish_request()
            return None
        if isinstance(result, RemotingCommand):
            self._answer(conn, req, result)
            return result.code
        self._failed(
            conn,
            req,
            TypeError(f"processor's awaitable returned {type(result).__name__}, not a RemotingCommand or None"),
        )
        return ResponseCode.SYSTEM_ERROR

    # ------------------------------------------------------------------ generic answers
    def _unsupported(self, conn: Connection, req: RemotingCommand) -> None:
        self._log_once(
            req.code,
            LookupError,
            "%s: request code %d (%s) from %s is not supported",
            self.name,
            req.code,
            RequestCode.name_of(req.code),
            conn.remote_address,
        )
        if req.flag & _ONEWAY:
            conn._finish_request()
            return
        self._send_error(conn, req, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {req.code} not supported")

    def _failed(self, conn: Connection, req: RemotingCommand, exc: BaseException) -> None:
        self.stats.processor_errors += 1
        if isinstance(exc, HeaderFieldError):
            self._bad_header(conn, req, exc)
            return
        self._log_once(
            req.code,
            type(exc),
            "%s: processing %s (code %d) from %s failed, %s (logged once per code and exception type)",
            self.name,
            RequestCode.name_of(req.code),
            req.code,
            conn.remote_address,
            "oneway, not answered" if req.flag & _ONEWAY else "answering SYSTEM_ERROR",
            exc=exc,
        )
        if req.flag & _ONEWAY:
            conn._finish_request()
            return
        self._send_error(conn, req, ResponseCode.SYSTEM_ERROR, exception_text(exc))

    def _bad_header(self, conn: Connection, req: RemotingCommand, exc: HeaderFieldError) -> None:
        """The peer sent a request we cannot read: its mistake, told to it, not a traceback."""
        peer = conn.remote_address
        warned = self._warned_peers
        first = peer not in warned and len(warned) < _MAX_LOGGED_KEYS
        if first:
            warned.add(peer)
        if first or logger.isEnabledFor(logging.DEBUG):
            logger.log(
                logging.WARNING if first else logging.DEBUG,
                "%s: bad request from %s: %s (code %d), field %s: %s; %s%s",
                self.name,
                peer,
                RequestCode.name_of(req.code),
                req.code,
                exc.field,
                exc,
                "oneway, not answered" if req.flag & _ONEWAY else "answered SYSTEM_ERROR",
                " (logged once per peer)" if first else "",
            )
        if req.flag & _ONEWAY:
            conn._finish_request()
            return
        self._send_error(conn, req, ResponseCode.SYSTEM_ERROR, str(exc))

    def _send_error(self, conn: Connection, req: RemotingCommand, code: int, remark: str) -> None:
        try:
            conn.send_response(req.create_response(code, remark))
        except Exception:
            # e.g. lone surrogates in the text; the code alone still tells the caller.
            conn.send_response(req.create_response(code, remark.encode("utf-8", "replace").decode("utf-8")))

    def _log_once(self, code: int, kind: type, msg: str, *args: object, exc: BaseException | None = None) -> None:
        key = (code, kind)
        if key in self._logged or len(self._logged) >= _MAX_LOGGED_KEYS:
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug(
                    msg + (": %s" if exc is not None else ""),
                    *args,
                    *((exception_text(exc),) if exc is not None else ()),
                )
            return
        self._logged.add(key)
        if exc is None:
            logger.warning(msg, *args)
        else:
            logger.error(msg, *args, exc_info=exc)
