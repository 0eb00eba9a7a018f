"""``RemotingServer``: accept connections, dispatch requests by code (NettyRemotingServer)."""

from __future__ import annotations

import asyncio
import logging

from rmq.common.context import ServingContext
from rmq.protocol.frame import MAX_FRAME_LENGTH
from rmq.remoting.connection import Connection, ConnectionCallback
from rmq.remoting.dispatch import AuthHook, Processor, RpcObserver
from rmq.remoting.endpoint import Endpoint
from rmq.remoting.listener import TlsListener
from rmq.remoting.tls import TlsSettings

__all__ = ["RemotingServer"]

logger = logging.getLogger("rmq.remoting")


class RemotingServer(Endpoint, ServingContext):
    """A TCP server speaking RocketMQ remoting frames.

    ``register_processor(code, fn)`` before or after ``start()``; see ``rmq.remoting.dispatch``
    for what a processor may return. ``port=0`` binds an ephemeral port, readable from
    ``.port`` after ``start()``.

    ``tls``: RocketMQ's TLS settings (``tls.server.mode`` disabled / permissive / enforcing,
    certificates; ``rmq.remoting.tls``): each connection is plaintext or TLS by its first
    byte (``rmq.remoting.listener``). None: plaintext only, no detection (in-process tests).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        name: str = "remoting-server",
        max_inflight_per_connection: int = 4096,
        max_frame_length: int = MAX_FRAME_LENGTH,
        write_buffer_high: int | None = 1 << 20,
        coalesce_limit: int = 16 << 10,
        backlog: int = 1024,
        tls: TlsSettings | None = None,
    ) -> None:
        self.host = host
        self.port = port
        super().__init__(name, max_inflight_per_connection, max_frame_length, coalesce_limit, write_buffer_high)
        self._backlog = backlog
        self.tls = tls
        self._server: asyncio.AbstractServer | TlsListener | None = None
        self._connections: set[Connection] = set()
        self._made_callbacks: list[ConnectionCallback] = []
        self._closed_callbacks: list[ConnectionCallback] = []

    # ------------------------------------------------------------------ configuration
    def register_default_processor(self, fn: Processor) -> None:
        """Handles every code without its own processor (instead of NOT_SUPPORTED)."""
        self._dispatcher.register_default(fn)

    def set_rpc_observer(self, observer: RpcObserver | None) -> None:
        """``observer(request code, response code, seconds)`` per answered request
        (metrics); None removes it."""
        self._dispatcher.rpc_observer = observer

    def set_auth_hook(self, hook: AuthHook | None) -> None:
        """``hook(peer "host:port", request)`` before every request's processor: None lets
        it through, a command is the refusal (see ``rmq.remoting.dispatch``); None removes it."""
        self._dispatcher.auth_hook = hook

    def on_connection_made(self, callback: ConnectionCallback) -> None:
        self._made_callbacks.append(callback)

    def on_connection_closed(self, callback: ConnectionCallback) -> None:
        """``callback(conn)`` after a connection closed (the broker unregisters its client)."""
        self._closed_callbacks.append(callback)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError(f"{self.name} already started")
        if self.tls is None:
            loop = asyncio.get_running_loop()
            self._server = await loop.create_server(
                self._new_connection, self.host, self.port, backlog=self._backlog, reuse_address=True
            )
            self.port = self._server.sockets[0].getsockname()[1]
        else:
            listener = TlsListener(
                self.name, self._new_connection, self.host, self.port, self.tls, backlog=self._backlog
            )
            await listener.start()
            self._server = listener
            self.port = listener.port
        logger.info(
            "%s listening on %s:%d%s",
            self.name,
            self.host,
            self.port,
            "" if self.tls is None else f" (TLS {self.tls.server_mode.value})",
        )

    async def stop(self, grace: float = 1.0) -> None:
        """Stop accepting, close every connection (aborting those that do not close
        within ``grace`` s, e.g. a peer that does not read), cancel processor tasks."""
        server = self._server
        if server is None:
            return
        self._server = None
        server.close()
        conns = list(self._connections)
        for conn in conns:
            conn.close()
        if conns:
            waits = [asyncio.ensure_future(c.wait_closed()) for c in conns]
            _, late = await asyncio.wait(waits, timeout=grace)
            for w in late:
                w.cancel()
            for conn in conns:
                if not conn.closed:
                    conn.abort()
            await asyncio.wait([asyncio.ensure_future(c.wait_closed()) for c in conns], timeout=grace)
        self._dispatcher.cancel_tasks()
        await server.wait_closed()
        logger.info("%s stopped", self.name)

    # ------------------------------------------------------------------ state
    @property
    def connections(self) -> list[Connection]:
        """Open connections (a snapshot)."""
        return list(self._connections)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    # ------------------------------------------------------------------ internals
    def _new_connection(self) -> Connection:
        # A client that does not read its responses must not make us buffer
        # them without limit: stop reading its requests instead.
        return self._connection(
            pause_reading_on_write_pressure=True, on_made=self._connection_made, on_lost=self._connection_lost
        )

    def _connection_made(self, conn: Connection) -> None:
        self.stats.connections_accepted += 1
        self._connections.add(conn)
        logger.debug("%s: connection from %s", self.name, conn.remote_address)
        self._notify(self._made_callbacks, conn, "on_connection_made")

    def _connection_lost(self, conn: Connection) -> None:
        self._connections.discard(conn)
        logger.debug("%s: connection from %s closed", self.name, conn.remote_address)
        self._notify(self._closed_callbacks, conn, "on_connection_closed")

    def _notify(self, callbacks: list[ConnectionCallback], conn: Connection, kind: str) -> None:
        """Every callback runs; one that fails is logged."""
        for cb in callbacks:
            try:
                cb(conn)
            except Exception:
                logger.exception("%s: %s callback %r failed", self.name, kind, cb)
