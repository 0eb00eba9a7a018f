"""Fixtures for the remoting tests: servers and clients on 127.0.0.1, always closed."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from rmq.protocol.frame import RemotingCommand
from rmq.remoting import RemotingClient, RemotingServer

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
async def make_server() -> AsyncIterator[Callable[..., Awaitable[RemotingServer]]]:
    servers: list[RemotingServer] = []

    async def factory(**kwargs: object) -> RemotingServer:
        server = RemotingServer(**kwargs)  # type: ignore[arg-type]
        servers.append(server)
        await server.start()
        return server

    try:
        yield factory
    finally:
        for server in servers:
            await server.stop()


@pytest.fixture
async def make_client() -> AsyncIterator[Callable[..., RemotingClient]]:
    clients: list[RemotingClient] = []

    def factory(**kwargs: object) -> RemotingClient:
        client = RemotingClient(**kwargs)  # type: ignore[arg-type]
        clients.append(client)
        return client

    try:
        yield factory
    finally:
        for client in clients:
            await client.close()


@pytest.fixture
async def raw_conns() -> AsyncIterator[list[asyncio.StreamWriter]]:
    """Writers of raw connections opened by a test; closed at the end."""
    writers: list[asyncio.StreamWriter] = []
    try:
        yield writers
    finally:
        for w in writers:
            w.transport.abort()
        # let connection_lost run before the loop closes (else: unclosed transport)
        for _ in range(3):
            await asyncio.sleep(0)


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    """One whole frame (length field included) from a raw connection."""
    head = await reader.readexactly(4)
    (length,) = struct.unpack(">i", head)
    return head + await reader.readexactly(length)


def echo(conn: object, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.create_response(0, ext_fields=cmd.ext_fields, body=cmd.body)
