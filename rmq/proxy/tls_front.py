"""Plaintext and TLS gRPC on one port, as RocketMQ 5's ``ProxyAndTlsProtocolNegotiator`` does.

grpc's Python server cannot look at a connection's first byte, so the public port is rmq's own
``TlsListener`` (the broker's: it peeks at the first byte and refuses what ``tls.server.mode``
forbids); each connection is then relayed, bytes unchanged, to one of the gRPC server's two
internal ports, Unix domain sockets in a private (0700) temporary directory, so no other local
user can reach gRPC behind the listener's back:

* ``grpc.sock`` (insecure): plaintext clients (not bound in enforcing mode);
* ``grpc-tls.sock`` (``add_secure_port``): TLS clients. gRPC itself ends TLS there, with the
  credentials built from the ``tls.*`` keys (``grpc_server_credentials``) and ALPN ``h2``; the
  relay forwards the ClientHello and everything after it untouched.

gRPC's server credentials cannot say ``tls.server.need.client.auth=optional`` (request a
certificate, verify it when given) nor verify client certificates against the system CAs; with
those settings Python's ``ssl`` ends TLS in the listener as before and the relay forwards the
plaintext to ``grpc.sock`` (slower: every byte is encrypted in Python's event loop).

The relay is two ``asyncio.Protocol`` halves: each received chunk is written to the other side's
transport as it is; a side whose transport has too much queued pauses the other side's reading.

The gRPC server sees the relay's socket as the peer. Each relayed connection binds its socket to
its own name in Linux's abstract namespace (no file to create or unlink), and ``real_peer`` maps
the peer string gRPC reports for that name back to the client's address (for ACL address rules
and logs).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import secrets
import shutil
import socket
import ssl
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import cast

import grpc

from rmq.remoting.listener import TlsListener
from rmq.remoting.tls import ClientAuth, TlsMode, TlsSettings, self_signed_pem

__all__ = ["TlsFront", "grpc_server_credentials"]

log = logging.getLogger("rmq.proxy.tls")

_HIGH_WATER = 1 << 20
#: what grpc calls a peer bound in the abstract namespace (``unix-abstract:<name>``)
_ABSTRACT_PEER = "unix-abstract:"


def grpc_server_credentials(s: TlsSettings) -> grpc.ServerCredentials | None:
    """gRPC's TLS credentials for ``s`` (``rmq.remoting.tls.server_context``'s rules), or None
    when gRPC cannot express them (optional client auth; client certificates verified against
    the system CAs). Blocking (reads files or makes a certificate): call it in a thread.
    Raises ``OSError`` / ``ValueError`` for unreadable files or a key it cannot decrypt."""
    if s.test_mode:
        cert, key = self_signed_pem()
        return grpc.ssl_server_credentials([(key, cert)])
    if s.server_need_client_auth == ClientAuth.OPTIONAL or (
        s.server_need_client_auth == ClientAuth.REQUIRE and not s.server_trust_cert_path
    ):
        return None
    if not s.server_cert_path or not s.server_key_path:
        return None  # server_context names the missing keys
    cert = Path(s.server_cert_path).read_bytes()
    key = Path(s.server_key_path).read_bytes()
    if s.server_key_password:
        # gRPC takes an unencrypted key only: decrypt it here, in memory
        from cryptography.hazmat.primitives import serialization

        private = serialization.load_pem_private_key(key, s.server_key_password.encode())
        key = private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    if s.server_need_client_auth == ClientAuth.REQUIRE:
        roots = Path(s.server_trust_cert_path).read_bytes()
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=roots, require_client_auth=True)
    return grpc.ssl_server_credentials([(key, cert)])


class _Pipe(asyncio.Protocol):
    """One half: whatever arrives is written to ``peer``'s transport."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Pipe | None = None
        self.pending: list[bytes] = []
        self.eof = False  # the EOF from our side was received
        self.closed = False
        self.on_lost: Callable[[], object] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(high=_HIGH_WATER)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is None:
            self.pending.append(data)
        else:
            cast(asyncio.Transport, peer.transport).write(data)

    def eof_received(self) -> bool | None:
        """Half-close: pass the EOF on and keep writing the other way. Once both ways have
        ended (or the other side cannot half-close) both transports close: asyncio does not
        close a transport by itself after EOF both ways, and the relay would keep two sockets."""
        self.eof = True
        peer = self.peer
        if peer is None or peer.transport is None or peer.eof or not peer.transport.can_write_eof():
            if peer is not None and peer.transport is not None:
                peer.transport.close()
            return None  # our transport closes itself
        peer.transport.write_eof()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.on_lost is not None:
            self.on_lost()
        peer = self.peer
        if peer is not None and peer.transport is not None and not peer.closed:
            peer.transport.close()

    # our transport calls these when its write buffer crosses the limits: the other side stops
    # (resumes) reading, so a slow reader never makes the relay buffer without bound
    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None and not self.peer.closed:
            self.peer.transport.resume_reading()


class _Client(_Pipe):
    """The client's side: on connect, open the relay's connection to one of gRPC's sockets."""

    def __init__(self, front: TlsFront, backend: str) -> None:
        super().__init__()
        self.front = front
        self.backend = backend

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        task = asyncio.get_running_loop().create_task(self._open(), name="proxy-relay-open")
        self.front.tasks.add(task)
        task.add_done_callback(self.front.tasks.discard)

    async def _open(self) -> None:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        peername = self.transport.get_extra_info("peername")
        name = self.front.relay_name()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            sock.bind("\0" + name)
            await loop.sock_connect(sock, self.backend)
            _, backend = await loop.create_unix_connection(_Pipe, sock=sock)
        except OSError as e:
            sock.close()
            log.warning("proxy: cannot reach the gRPC server on %s: %s", os.path.basename(self.backend), e)
            self.transport.close()
            return
        except BaseException:
            sock.close()
            raise
        assert isinstance(backend, _Pipe) and backend.transport is not None
        if self.closed:
            backend.transport.close()
            return
        if peername:
            self.front.peers[name] = peername[0]
            backend.on_lost = lambda: self.front.peers.pop(name, None)
        self.peer, backend.peer = backend, self
        # what either side said before the link (the client's preface, the server's SETTINGS)
        for chunk in self.pending:
            backend.transport.write(chunk)
        for chunk in backend.pending:
            self.transport.write(chunk)
        self.pending.clear()
        backend.pending.clear()


class _Listener(TlsListener):
    """``TlsListener`` whose TLS connections go, still encrypted, to gRPC's TLS socket."""

    def __init__(self, front: TlsFront, host: str, port: int, settings: TlsSettings) -> None:
        super().__init__("proxy", front.plain_client, host, port, settings)
        self.front = front

    async def _connect(self, sock: socket.socket, ctx: ssl.SSLContext | None) -> None:
        tls_backend = self.front.tls_backend
        if ctx is None or tls_backend is None:
            await super()._connect(sock, ctx)
            return
        assert self._loop is not None
        try:
            await self._loop.connect_accepted_socket(lambda: _Client(self.front, tls_backend), sock)
        except asyncio.CancelledError:
            sock.close()
            raise
        except OSError as e:
            log.warning("proxy: connection from %s failed: %s", self.front.peer_of(sock), e)
            sock.close()


class TlsFront:
    """The public listener in front of the gRPC server's internal Unix sockets.

    ``bind_backends(server)`` (before the gRPC server starts) makes the private directory and
    adds the ports; ``start()`` listens; ``close()`` stops listening; ``remove_backends()``
    (after the gRPC server stopped) removes the directory."""

    def __init__(self, host: str, port: int, settings: TlsSettings) -> None:
        self.settings = settings
        self.peers: dict[str, str] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.dir: str | None = None
        self.plain_backend: str | None = None
        self.tls_backend: str | None = None
        self._names = itertools.count()
        self._prefix = f"rmq-proxy-{os.getpid()}-{secrets.token_hex(6)}-"
        self.listener = _Listener(self, host, port, settings)

    @property
    def port(self) -> int:
        return self.listener.port

    def relay_name(self) -> str:
        return f"{self._prefix}{next(self._names)}"

    def plain_client(self) -> _Client:
        assert self.plain_backend is not None
        return _Client(self, self.plain_backend)

    @staticmethod
    def peer_of(sock: socket.socket) -> str:
        with contextlib.suppress(OSError):
            return str(sock.getpeername()[0])
        return "?"

    async def bind_backends(self, server: grpc.aio.Server) -> None:
        """Raises ``OSError`` when a port cannot be added or the directory made, ``ValueError``
        for TLS files gRPC cannot use."""
        self.dir = await asyncio.to_thread(tempfile.mkdtemp, prefix="rmq-proxy-")  # mode 0700
        creds = await asyncio.to_thread(grpc_server_credentials, self.settings)
        if creds is not None:
            self.tls_backend = os.path.join(self.dir, "grpc-tls.sock")
            if server.add_secure_port(f"unix:{self.tls_backend}", creds) == 0:
                raise OSError(f"cannot listen on {self.tls_backend}")
        else:
            log.info("proxy: TLS ends in the relay (Python ssl): gRPC cannot express these tls.* settings")
        if self.settings.server_mode != TlsMode.ENFORCING or creds is None:
            self.plain_backend = os.path.join(self.dir, "grpc.sock")
            if server.add_insecure_port(f"unix:{self.plain_backend}") == 0:
                raise OSError(f"cannot listen on {self.plain_backend}")

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

    async def remove_backends(self) -> None:
        d, self.dir = self.dir, None
        if d is not None:
            await asyncio.to_thread(shutil.rmtree, d, True)

    def real_peer(self, grpc_peer: str) -> str | None:
        """The client address behind a gRPC peer string ``unix-abstract:<relay name>``."""
        if grpc_peer.startswith(_ABSTRACT_PEER):
            return self.peers.get(grpc_peer[len(_ABSTRACT_PEER) :])
        return None
