"""The proxy's TLS front (rmq/proxy/tls_front.py) in one process: a grpc.aio server behind it on
Unix sockets in a private directory, plaintext and TLS clients through one public port, the
client's address behind the relay, and nothing left behind."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import grpc
import pytest

from rmq.proxy.tls_front import TlsFront, grpc_server_credentials
from rmq.remoting.tls import ClientAuth, TlsMode, TlsSettings, self_signed_pem


def _tcp_listeners(pid: int) -> set[int]:
    """Inodes of the TCP sockets this process listens on (state 0A in /proc/net/tcp*)."""
    out: set[int] = set()
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(f) as fh:
            for line in fh.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A":
                    out.add(int(cols[9]))
    mine = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            mine.add(int(target[8:-1]))
    return out & mine


@pytest.fixture
def cert(tmp_path: Path) -> tuple[Path, Path]:
    c, k = self_signed_pem("localhost")
    (tmp_path / "cert.pem").write_bytes(c)
    (tmp_path / "key.pem").write_bytes(k)
    return tmp_path / "cert.pem", tmp_path / "key.pem"


async def _serve(settings: TlsSettings) -> tuple[grpc.aio.Server, TlsFront, list[tuple[str, str | None]]]:
    server = grpc.aio.server()
    front = TlsFront("127.0.0.1", 0, settings)
    seen: list[tuple[str, str | None]] = []

    def echo(req: bytes, ctx: grpc.ServicerContext) -> bytes:
        seen.append((ctx.peer(), front.real_peer(ctx.peer())))
        return req

    handler = grpc.method_handlers_generic_handler("t.S", {"E": grpc.unary_unary_rpc_method_handler(echo)})
    server.add_generic_rpc_handlers((handler,))
    await front.bind_backends(server)
    await server.start()
    await front.start()
    return server, front, seen


async def _stop(server: grpc.aio.Server, front: TlsFront) -> None:
    await front.close()
    await server.stop(0)
    await front.remove_backends()


async def test_plaintext_and_tls_reach_grpc_over_private_unix_sockets(cert) -> None:
    cert_path, key_path = cert
    settings = TlsSettings(
        server_mode=TlsMode.PERMISSIVE, test_mode=False, server_cert_path=str(cert_path), server_key_path=str(key_path)
    )
    server, front, seen = await _serve(settings)
    d = front.dir
    try:
        assert d is not None and stat.S_IMODE(os.stat(d).st_mode) == 0o700
        assert sorted(os.listdir(d)) == ["grpc-tls.sock", "grpc.sock"]
        # the public port is the only TCP port the process listens on: gRPC is not reachable around it
        assert len(_tcp_listeners(os.getpid())) == 1
        async with grpc.aio.insecure_channel(f"127.0.0.1:{front.port}") as ch:
            assert await ch.unary_unary("/t.S/E")(b"plain", timeout=10) == b"plain"
        creds = grpc.ssl_channel_credentials(root_certificates=cert_path.read_bytes())
        async with grpc.aio.secure_channel(f"localhost:{front.port}", creds) as ch:
            assert await ch.unary_unary("/t.S/E")(b"tls", timeout=10) == b"tls"
        assert front.listener.plaintext_connections == 1 and front.listener.tls_connections == 1
        # gRPC sees the relay's socket; the front names the client behind it
        assert [p.startswith("unix-abstract:rmq-proxy-") for p, _ in seen] == [True, True]
        assert [real for _, real in seen] == ["127.0.0.1", "127.0.0.1"]
    finally:
        await _stop(server, front)
    assert not os.path.exists(d)
    for _ in range(500):  # the relay's halves close a loop iteration or two after gRPC's side
        if not front.peers:
            break
        await asyncio.sleep(0.01)
    assert front.peers == {}


async def test_enforcing_binds_no_plaintext_socket_and_refuses_plaintext(cert) -> None:
    cert_path, key_path = cert
    settings = TlsSettings(
        server_mode=TlsMode.ENFORCING, test_mode=False, server_cert_path=str(cert_path), server_key_path=str(key_path)
    )
    server, front, _ = await _serve(settings)
    try:
        assert front.dir is not None and os.listdir(front.dir) == ["grpc-tls.sock"]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{front.port}") as ch:
            with pytest.raises(grpc.aio.AioRpcError) as ei:
                await ch.unary_unary("/t.S/E")(b"plain", timeout=5)
            assert ei.value.code() == grpc.StatusCode.UNAVAILABLE
        assert front.listener.refused_connections >= 1
    finally:
        await _stop(server, front)


def test_grpc_credentials_only_where_grpc_can_say_it(cert) -> None:
    cert_path, key_path = cert
    files = {"test_mode": False, "server_cert_path": str(cert_path), "server_key_path": str(key_path)}
    assert grpc_server_credentials(TlsSettings()) is not None  # test mode: a self-signed certificate
    assert grpc_server_credentials(TlsSettings(**files)) is not None
    assert grpc_server_credentials(
        TlsSettings(**files, server_need_client_auth=ClientAuth.REQUIRE, server_trust_cert_path=str(cert_path))
    )
    # optional client certificates, or required ones checked against the system CAs: Python's ssl
    assert grpc_server_credentials(TlsSettings(**files, server_need_client_auth=ClientAuth.OPTIONAL)) is None
    assert grpc_server_credentials(TlsSettings(**files, server_need_client_auth=ClientAuth.REQUIRE)) is None
