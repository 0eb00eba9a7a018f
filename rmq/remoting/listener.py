"""``TlsListener``: a listening socket whose connections speak plaintext or TLS on the same
port, chosen per connection by its first byte, as RocketMQ 4.9.8's ``HandshakeHandler``
does (spec rocketmq-4x-acl-tls.md §3.2; the decision table is ``rmq.remoting.tls.decide``).

We accept the sockets ourselves, wait until one is readable, peek at its first byte
(``MSG_PEEK``: nothing is consumed, so nothing has to be replayed) and only then hand it to
the event loop with ``connect_accepted_socket``, with or without an ``SSLContext``. The cost
is all at the accept (one more readiness wait and one ``recv``); afterwards a plaintext
connection is the loop's ordinary transport, so the message path is as fast as without TLS.

A connection whose client waits for the server to speak first would wait forever here;
``plaintext_after`` (seconds) lets such a silent connection through as plaintext after a
while (not in enforcing mode, which refuses plaintext anyway). RocketMQ's remoting clients
always speak first.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable

from rmq.remoting.tls import Decision, TlsMode, TlsSettings, decide, server_context

__all__ = ["TlsListener"]

log = logging.getLogger("rmq.remoting")

_ACCEPTS_PER_WAKEUP = 128  # then let the loop run other work (asyncio accepts per backlog too)
_HANDSHAKE_TIMEOUT = 10.0


class TlsListener:
    """``start()`` binds and accepts; ``close()`` stops accepting (connections already handed
    to ``protocol_factory`` stay theirs); ``port`` is the bound port after ``start()``."""

    def __init__(
        self,
        name: str,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        host: str,
        port: int,
        settings: TlsSettings,
        *,
        backlog: int = 1024,
        plaintext_after: float | None = None,
    ) -> None:
        self.name = name
        self.host = host
        self.port = port
        self.settings = settings
        self._factory = protocol_factory
        self._backlog = backlog
        self._plaintext_after = plaintext_after if settings.server_mode != TlsMode.ENFORCING else None
        self._ctx: ssl.SSLContext | None = None
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # accepted, first byte not seen yet -> its plaintext_after timer (None without one)
        self._sniffing: dict[socket.socket, asyncio.TimerHandle | None] = {}
        self._attaching: set[asyncio.Task[None]] = set()
        self.tls_connections = 0
        self.plaintext_connections = 0
        self.refused_connections = 0

    async def start(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        if self.settings.server_mode != TlsMode.DISABLED:
            # a certificate to make (test mode) or files to read: not on the loop
            self._ctx = await asyncio.to_thread(server_context, self.settings)
        infos = await loop.getaddrinfo(self.host or None, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        # IPv4 first when the host allows both ("" / a name): asyncio binds every family then,
        # one socket bound to :: here would be IPv6-only
        family, *_, addr = min(infos, key=lambda info: info[0] != socket.AF_INET)
        sock = socket.create_server(addr[:2], family=family, backlog=self._backlog)
        sock.setblocking(False)
        self._sock = sock
        self.port = sock.getsockname()[1]
        loop.add_reader(sock.fileno(), self._accept)

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return () if self._sock is None else (self._sock,)

    def close(self) -> None:
        loop, sock = self._loop, self._sock
        if loop is None or sock is None:
            return
        self._sock = None
        loop.remove_reader(sock.fileno())
        sock.close()
        for s in list(self._sniffing):
            self._forget(s)
            s.close()
        for task in self._attaching:
            task.cancel()

    async def wait_closed(self) -> None:
        if self._attaching:
            await asyncio.wait(list(self._attaching))

    # ------------------------------------------------------------------ internals
    def _accept(self) -> None:
        listening, loop = self._sock, self._loop
        if listening is None or loop is None:
            return
        for _ in range(_ACCEPTS_PER_WAKEUP):
            try:
                sock, _addr = listening.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as e:
                # out of file descriptors and the like: the socket stays readable, so
                # waiting a second keeps this from spinning (asyncio does the same)
                log.error("%s: accept failed: %s; pausing accepts for 1 s", self.name, e)
                loop.remove_reader(listening.fileno())
                loop.call_later(1.0, self._resume_accept, listening)
                return
            sock.setblocking(False)
            timer = (
                None if self._plaintext_after is None else loop.call_later(self._plaintext_after, self._silent, sock)
            )
            self._sniffing[sock] = timer
            loop.add_reader(sock.fileno(), self._first_byte, sock)

    def _resume_accept(self, listening: socket.socket) -> None:
        if self._sock is listening and self._loop is not None:
            self._loop.add_reader(listening.fileno(), self._accept)

    def _forget(self, sock: socket.socket) -> None:
        timer = self._sniffing.pop(sock, None)
        if timer is not None:
            timer.cancel()
        if self._loop is not None and sock.fileno() >= 0:
            self._loop.remove_reader(sock.fileno())

    def _first_byte(self, sock: socket.socket) -> None:
        try:
            head = sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return  # not readable after all; still waiting
        except OSError:
            head = b""
        self._forget(sock)
        if not head:  # closed (or reset) before saying anything
            sock.close()
            return
        decision = decide(self.settings.server_mode, head[0])
        if decision is Decision.REFUSE_TLS or decision is Decision.REFUSE_PLAINTEXT:
            self.refused_connections += 1
            log.warning(
                "%s: %s; closing the connection from %s",
                self.name,
                "Clients intend to establish an SSL connection while this server is running in SSL disabled mode"
                if decision is Decision.REFUSE_TLS
                else "Clients intend to establish an insecure connection while this server is running in SSL "
                "enforcing mode",
                _peer(sock),
            )
            sock.close()
            return
        self._attach(sock, self._ctx if decision is Decision.TLS else None)

    def _silent(self, sock: socket.socket) -> None:
        if sock in self._sniffing:
            self._forget(sock)
            self._attach(sock, None)

    def _attach(self, sock: socket.socket, ctx: ssl.SSLContext | None) -> None:
        assert self._loop is not None
        if ctx is None:
            self.plaintext_connections += 1
        else:
            self.tls_connections += 1
        task = self._loop.create_task(self._connect(sock, ctx))
        self._attaching.add(task)
        task.add_done_callback(self._attaching.discard)

    async def _connect(self, sock: socket.socket, ctx: ssl.SSLContext | None) -> None:
        assert self._loop is not None
        peer = _peer(sock)
        try:
            if ctx is None:
                await self._loop.connect_accepted_socket(self._factory, sock)
            else:
                await self._loop.connect_accepted_socket(
                    self._factory, sock, ssl=ctx, ssl_handshake_timeout=_HANDSHAKE_TIMEOUT
                )
        except asyncio.CancelledError:
            sock.close()
            raise
        except (OSError, ssl.SSLError, TimeoutError, ValueError) as e:
            # the transport closed the socket already (a failed handshake: no or a wrong
            # client certificate, a client that does not speak TLS after all, a timeout)
            log.warning("%s: %s from %s failed: %s", self.name, "TLS handshake" if ctx else "connection", peer, e)
            sock.close()


def _peer(sock: socket.socket) -> str:
    try:
        host, port = sock.getpeername()[:2]
    except OSError:
        return "?"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
