"""``RemotingClient``: one connection per address, request/response by opaque (NettyRemotingClient)."""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl as _ssl
from collections.abc import Callable

from rmq.protocol.codes import SerializeType
from rmq.protocol.frame import MAX_FRAME_LENGTH, RemotingCommand
from rmq.remoting.connection import Connection
from rmq.remoting.dispatch import Processor
from rmq.remoting.endpoint import Endpoint
from rmq.remoting.errors import RemotingClosedError, RemotingConnectError, RemotingTimeoutError

__all__ = ["RemotingClient", "RequestHook", "split_address"]

logger = logging.getLogger("rmq.remoting")

#: Java's ``RPCHook.doBeforeRequest(remoteAddr, request)``: may rewrite the request
#: (e.g. sign it: rmq.client's AclClientRPCHook) just before it is encoded and sent.
RequestHook = Callable[[str, RemotingCommand], None]


def split_address(addr: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[v6]:port"`` -> (host, port)."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"bad remoting address {addr!r}, expected host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


class RemotingClient(Endpoint):
    """Connections are made on demand, one per ``"host:port"``; concurrent callers share
    one connect attempt, and a closed connection is replaced on the next call (that is
    the reconnect).

    Requests this client originates get its ``serialize_type`` (and ``language`` /
    ``version`` when given). Requests the server initiates on one of our connections go
    to ``request_handler(conn, cmd)`` or a processor registered per code, with the same
    rules as a server processor (see ``rmq.remoting.dispatch``); without either they are
    answered REQUEST_CODE_NOT_SUPPORTED.

    ``request_hook(addr, cmd)`` runs on every request this client sends (after the
    serialize type, language and version are set: they are part of what it may sign).

    ``ssl``: connect with TLS (``rmq.remoting.tls.client_context``); no host name is checked
    or sent, as with RocketMQ's clients.
    """

    def __init__(
        self,
        *,
        serialize_type: int = SerializeType.JSON,
        language: int | None = None,
        version: int | None = None,
        connect_timeout: float = 3.0,
        request_handler: Processor | None = None,
        request_hook: RequestHook | None = None,
        name: str = "remoting-client",
        max_inflight_per_connection: int = 4096,
        max_frame_length: int = MAX_FRAME_LENGTH,
        coalesce_limit: int = 16 << 10,
        ssl: _ssl.SSLContext | None = None,
    ) -> None:
        if serialize_type not in (SerializeType.JSON, SerializeType.ROCKETMQ):
            raise ValueError(f"unknown serialize type {serialize_type}")
        self.serialize_type = serialize_type
        self.language = language
        self.version = version
        self.connect_timeout = connect_timeout
        self.request_hook = request_hook
        self.ssl = ssl
        super().__init__(name, max_inflight_per_connection, max_frame_length, coalesce_limit)
        self._dispatcher.register_default(request_handler)
        self._conns: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Task[Connection]] = {}
        self._closed = False

    # ------------------------------------------------------------------ requests
    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send ``cmd`` to ``addr`` and await the response; ``timeout`` covers connecting."""
        conn = self._conns.get(addr)
        if conn is None or conn.closed:
            loop = asyncio.get_running_loop()
            start = loop.time()
            conn = await self._connect(addr, timeout)
            timeout -= loop.time() - start
        self._prepare(addr, cmd)
        return await conn.request(cmd, timeout)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        """Send ``cmd`` with the ONEWAY flag; returns once it is queued for writing
        (after waiting, if the peer is slow to read, for the write buffer to drain)."""
        conn = self._conns.get(addr)
        if conn is None or conn.closed:
            conn = await self._connect(addr, self.connect_timeout)
        if conn.write_blocked:
            await conn.drain(self.connect_timeout)
        self._prepare(addr, cmd)
        conn.send_oneway(cmd)

    async def get_connection(self, addr: str) -> Connection:
        """The live connection to ``addr``, connecting if needed."""
        conn = self._conns.get(addr)
        if conn is None or conn.closed:
            conn = await self._connect(addr, self.connect_timeout)
        return conn

    def _prepare(self, addr: str, cmd: RemotingCommand) -> None:
        cmd.serialize_type = self.serialize_type
        if self.language is not None:
            cmd.language = self.language
        if self.version is not None:
            cmd.version = self.version
        if self.request_hook is not None:
            self.request_hook(addr, cmd)

    # ------------------------------------------------------------------ connections
    @property
    def connections(self) -> dict[str, Connection]:
        """Open connections by address (a snapshot)."""
        return {a: c for a, c in self._conns.items() if not c.closed}

    def address_of(self, conn: Connection) -> str:
        """The address this client dialled for ``conn`` (a request the server sent on it is
        answered to that broker), else the peer's own address."""
        for addr, c in self._conns.items():
            if c is conn:
                return addr
        return conn.remote_address

    def close_connection(self, addr: str) -> None:
        """Close the connection to ``addr``; its pending requests fail with
        ``RemotingClosedError``; the next call to ``addr`` connects afresh."""
        conn = self._conns.pop(addr, None)
        if conn is not None:
            conn.close()

    async def close(self) -> None:
        """Close every connection and refuse further calls."""
        self._closed = True
        for task in list(self._connecting.values()):
            task.cancel()
        conns = list(self._conns.values())
        self._conns.clear()
        for conn in conns:
            conn.close()
        if conns:
            await asyncio.wait([asyncio.ensure_future(c.wait_closed()) for c in conns], timeout=1.0)
            for conn in conns:
                if not conn.closed:
                    conn.abort()
        self._dispatcher.cancel_tasks()

    async def __aenter__(self) -> RemotingClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _connect(self, addr: str, timeout: float) -> Connection:
        if self._closed:
            raise RemotingClosedError(f"{self.name} is closed")
        task = self._connecting.get(addr)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._open(addr))
            self._connecting[addr] = task
            task.add_done_callback(functools.partial(self._connect_done, addr))
        try:
            if timeout >= self.connect_timeout:
                # The attempt times itself out (RemotingConnectError); shield it so that a
                # cancelled caller does not cancel the attempt other callers share.
                return await asyncio.shield(task)
            return await asyncio.wait_for(asyncio.shield(task), max(timeout, 0.0))
        except TimeoutError:
            self.stats.timeouts += 1
            raise RemotingTimeoutError(
                f"connect to {addr} not done within the request timeout {timeout * 1000:.0f}ms"
            ) from None
        except asyncio.CancelledError:
            if self._closed and task.cancelled():
                # close() cancelled the shared attempt, not our caller
                raise RemotingClosedError(f"{self.name} closed while connecting") from None
            raise

    def _connect_done(self, addr: str, task: asyncio.Task) -> None:
        if self._connecting.get(addr) is task:
            del self._connecting[addr]
        if not task.cancelled():
            task.exception()  # retrieved: callers may all have given up already

    async def _open(self, addr: str) -> Connection:
        try:
            host, port = split_address(addr)
        except ValueError as e:
            raise RemotingConnectError(str(e)) from None
        loop = asyncio.get_running_loop()
        factory = functools.partial(self._new_connection, addr)
        # server_hostname "": no SNI and no host name to match (check_hostname is off)
        connect = (
            loop.create_connection(factory, host, port)
            if self.ssl is None
            else loop.create_connection(factory, host, port, ssl=self.ssl, server_hostname="")
        )
        try:
            _, conn = await asyncio.wait_for(connect, self.connect_timeout)
        except TimeoutError:
            raise RemotingConnectError(
                f"connect to {addr} timed out after {self.connect_timeout * 1000:.0f}ms"
            ) from None
        except OSError as e:  # ssl.SSLError too (a refused handshake)
            # a TLS handshake the server cut short has an empty message: name the error then
            why = str(e) or type(e).__name__
            raise RemotingConnectError(f"connect to {addr}{' (TLS)' if self.ssl else ''} failed: {why}") from e
        if self._closed:
            conn.abort()
            raise RemotingClosedError(f"{self.name} is closed")
        self.stats.connections_accepted += 1
        self._conns[addr] = conn
        logger.debug("%s: connected to %s from %s", self.name, addr, conn.local_address)
        return conn

    def _new_connection(self, addr: str) -> Connection:
        # Never stop reading responses because our own writes are blocked: if both
        # sides did that they would deadlock. Senders wait in drain() instead.
        return self._connection(
            pause_reading_on_write_pressure=False, on_lost=functools.partial(self._connection_lost, addr)
        )

    def _connection_lost(self, addr: str, conn: Connection) -> None:
        if self._conns.get(addr) is conn:
            del self._conns[addr]
        logger.debug("%s: connection to %s closed", self.name, addr)
