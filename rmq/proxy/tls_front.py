"""Plaintext and TLS gRPC on one port, as RocketMQ 5's ``ProxyAndTlsProtocolNegotiator`` does.

grpc's Python server cannot look at a connection's first byte, so the public port is rmq's own
``TlsListener`` (the broker's: it peeks at the first byte, refuses what ``tls.server.mode``
forbids and hands the socket to the loop with or without TLS); each connection is then piped,
bytes unchanged, to the gRPC server listening on a loopback port. TLS ends here, with ALPN
``h2`` as gRPC clients require. The gRPC server sees the pipe's loopback address as the peer:
``real_peer`` maps it back to the client's address (for ACL address rules and logs).

Flow control: each side stops reading while the other side's transport has too much queued.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable
from typing import cast

from rmq.remoting.listener import TlsListener
from rmq.remoting.tls import TlsSettings

__all__ = ["TlsFront"]

log = logging.getLogger("rmq.proxy.tls")

_HIGH_WATER = 1 << 20


class _Pipe(asyncio.Protocol):
    """One half: whatever arrives is written to ``peer``'s transport."""

    def __init__(self, front: TlsFront, name: str) -> None:
        self.front = front
        self.name = name
        self.transport: asyncio.Transport | None = None
        self.peer: _Pipe | None = None
        self.pending: list[bytes] = []
        self.closed = False
        self.on_lost: Callable[[], object] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(high=_HIGH_WATER)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is None or peer.transport is None:
            self.pending.append(data)
            return
        peer.transport.write(data)

    def eof_received(self) -> bool | None:
        peer = self.peer
        if peer is not None and peer.transport is not None and peer.transport.can_write_eof():
            peer.transport.write_eof()
            return True
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.on_lost is not None:
            self.on_lost()
        peer = self.peer
        if peer is not None and peer.transport is not None and not peer.closed:
            peer.transport.close()

    # the peer's transport calls these on our behalf (see _link)
    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None and not self.peer.closed:
            self.peer.transport.resume_reading()


class _Client(_Pipe):
    """The client's side: on connect, open the loopback connection to the gRPC server."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        task = asyncio.get_running_loop().create_task(self._open(), name="tls-front-open")
        self.front.tasks.add(task)
        task.add_done_callback(self.front.tasks.discard)

    async def _open(self) -> None:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        peername = self.transport.get_extra_info("peername")
        try:
            _, backend = await loop.create_connection(
                lambda: _Pipe(self.front, "backend"), "127.0.0.1", self.front.backend_port
            )
        except OSError as e:
            log.warning("proxy: cannot reach the local gRPC server on port %d: %s", self.front.backend_port, e)
            self.transport.close()
            return
        assert isinstance(backend, _Pipe) and backend.transport is not None
        if self.closed:
            backend.transport.close()
            return
        local = backend.transport.get_extra_info("sockname")
        if local and peername:
            port = local[1]
            self.front.peers[port] = peername[0]
            backend.on_lost = lambda: self.front.peers.pop(port, None)
        self.peer, backend.peer = backend, self
        # what either side said before the link (the client's preface, the server's SETTINGS)
        for chunk in self.pending:
            backend.transport.write(chunk)
        for chunk in backend.pending:
            self.transport.write(chunk)
        self.pending.clear()
        backend.pending.clear()


class TlsFront:
    """The public listener in front of the gRPC server's loopback port."""

    def __init__(self, host: str, port: int, settings: TlsSettings, backend_port: int) -> None:
        self.backend_port = backend_port
        self.peers: dict[int, str] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.listener = TlsListener("proxy", lambda: _Client(self, "client"), host, port, settings)

    @property
    def port(self) -> int:
        return self.listener.port

    async def start(self) -> None:
        await self.listener.start()
        ctx: ssl.SSLContext | None = getattr(self.listener, "_ctx", None)
        if ctx is not None:
            ctx.set_alpn_protocols(["h2"])  # gRPC clients refuse a TLS server that does not select h2

    async def close(self) -> None:
        self.listener.close()
        await self.listener.wait_closed()
        for t in list(self.tasks):
            t.cancel()
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)

    def real_peer(self, grpc_peer: str) -> str | None:
        """The client address behind a gRPC peer string ``ipv4:127.0.0.1:<pipe port>``."""
        _, _, port = grpc_peer.rpartition(":")
        return self.peers.get(int(port)) if port.isdigit() else None
