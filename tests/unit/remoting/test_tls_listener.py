"""Same-port TLS detection (rmq.remoting.listener, spec rocketmq-4x-acl-tls.md §3.2) with an
in-process RemotingServer: the first byte of a connection picks plaintext or TLS."""

from __future__ import annotations

import asyncio
import socket

import pytest

from rmq.protocol.codes import RequestCode
from rmq.protocol.frame import RemotingCommand
from rmq.remoting import RemotingConnectError, RemotingError
from rmq.remoting.listener import TlsListener
from rmq.remoting.tls import TlsMode, TlsSettings, client_context
from tests.unit.waiting import wait_until

from .conftest import echo

pytestmark = pytest.mark.timeout(30)

CODE = RequestCode.GET_ROUTEINFO_BY_TOPIC


def ping() -> RemotingCommand:
    return RemotingCommand(CODE, ext_fields={"topic": "T"}, body=b"ping")


async def tls_server(make_server, mode: TlsMode):
    server = await make_server(tls=TlsSettings(server_mode=mode))
    server.register_processor(CODE, echo)
    return server


async def test_permissive_answers_plaintext_and_tls_on_one_port(make_server, make_client):
    server = await tls_server(make_server, TlsMode.PERMISSIVE)
    plain = make_client()
    tls = make_client(ssl=client_context(TlsSettings()))
    for client in (plain, tls, plain, tls):
        resp = await client.invoke(server.address, ping(), 5)
        assert resp.body == b"ping"
    listener = server._server
    assert isinstance(listener, TlsListener)
    assert (listener.plaintext_connections, listener.tls_connections) == (1, 1)
    assert len(server.connections) == 2


async def test_enforcing_closes_plaintext(make_server, make_client):
    server = await tls_server(make_server, TlsMode.ENFORCING)
    with pytest.raises(RemotingError):
        await make_client().invoke(server.address, ping(), 5)
    resp = await make_client(ssl=client_context(TlsSettings())).invoke(server.address, ping(), 5)
    assert resp.body == b"ping" and server.stats.requests == 1


async def test_disabled_closes_tls(make_server, make_client, caplog):
    server = await tls_server(make_server, TlsMode.DISABLED)
    with pytest.raises(RemotingConnectError):
        await make_client(ssl=client_context(TlsSettings())).invoke(server.address, ping(), 5)
    assert "running in SSL disabled mode" in caplog.text
    assert (await make_client().invoke(server.address, ping(), 5)).body == b"ping"
    assert server.stats.requests == 1


async def test_a_peer_that_closes_before_speaking_is_dropped(make_server, make_client):
    server = await tls_server(make_server, TlsMode.PERMISSIVE)
    host, port = server.address.rsplit(":", 1)
    for _ in range(3):
        _, writer = await asyncio.open_connection(host, int(port))
        writer.close()
        await writer.wait_closed()
    # served on, nothing left waiting for a first byte
    assert (await make_client().invoke(server.address, ping(), 5)).body == b"ping"
    listener = server._server
    assert isinstance(listener, TlsListener) and not listener._sniffing
    assert len(server.connections) == 1


class _Greeter(asyncio.Protocol):
    """A server that speaks first (what plaintext_after is for)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.write(b"hello")  # type: ignore[attr-defined]


@pytest.mark.parametrize("mode, greeted", [(TlsMode.PERMISSIVE, True), (TlsMode.ENFORCING, False)])
async def test_plaintext_after_lets_a_silent_client_in_unless_enforcing(mode, greeted):
    listener = TlsListener("t", _Greeter, "127.0.0.1", 0, TlsSettings(server_mode=mode), plaintext_after=0.05)
    await listener.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        try:
            if greeted:
                assert await asyncio.wait_for(reader.readexactly(5), 10) == b"hello"
            else:
                # still waiting for the client's first byte: a TLS ClientHello gets in
                writer.write(b"\x00")
                await writer.drain()
                try:  # plaintext: closed
                    assert await asyncio.wait_for(reader.read(5), 10) == b""
                except ConnectionResetError:
                    pass
        finally:
            writer.close()
    finally:
        listener.close()
        await listener.wait_closed()


async def test_close_drops_connections_not_yet_sniffed():
    listener = TlsListener("t", asyncio.Protocol, "127.0.0.1", 0, TlsSettings())
    await listener.start()
    sock = socket.create_connection(("127.0.0.1", listener.port))
    try:
        await wait_until(lambda: listener._sniffing)
        listener.close()
        await listener.wait_closed()
        assert not listener._sniffing
        sock.settimeout(10)
        assert sock.recv(1) == b""  # closed by the listener
    finally:
        sock.close()
