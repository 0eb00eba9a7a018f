"""Bad bytes close exactly one connection, count, log one line; everyone else carries on."""

from __future__ import annotations

import asyncio
import logging
import random
import struct

import pytest

from rmq.protocol.codes import SerializeType
from rmq.protocol.errors import ProtocolError
from rmq.protocol.frame import MAX_FRAME_LENGTH, FrameDecoder, RemotingCommand, encode
from rmq.remoting import RemotingClosedError

from .conftest import echo

pytestmark = pytest.mark.timeout(30)


def _frame(word_type: int, header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), (word_type << 24) | len(header)) + header + body


_GARBAGE = random.Random(20240607).randbytes(4096)

BAD_INPUTS = {
    "bad length": struct.pack(">i", 2) + b"\x00\x00",
    "negative length": struct.pack(">i", -5) + b"\x00" * 8,
    "frame > 16 MiB declared": struct.pack(">iI", MAX_FRAME_LENGTH, 20) + b"{}",
    "header longer than frame": struct.pack(">iI", 10, 100) + b"x" * 6,
    "unknown serialize type": _frame(5, b"abcd"),
    "bad JSON": _frame(SerializeType.JSON, b'{"code":10,"flag":0,'),
    "JSON not an object": _frame(SerializeType.JSON, b"[1,2,3]"),
    "JSON wrong field type": _frame(SerializeType.JSON, b'{"code":"ten"}'),
    "short binary header": _frame(SerializeType.ROCKETMQ, b"\x00\x0a\x00"),
    "random garbage": _GARBAGE,
    # a good frame first: the bad one still closes the connection
    "good then bad": encode(RemotingCommand(1000, opaque=1)) + _frame(SerializeType.JSON, b"{"),
}


def test_bad_inputs_really_are_bad() -> None:
    for data in BAD_INPUTS.values():
        with pytest.raises(ProtocolError):
            FrameDecoder().feed(data)


@pytest.mark.parametrize("case", list(BAD_INPUTS), ids=list(BAD_INPUTS))
async def test_bad_input_closes_only_that_connection(make_server, make_client, raw_conns, caplog, case):
    caplog.set_level(logging.WARNING, logger="rmq.remoting")
    server = await make_server()
    server.register_processor(1000, echo)
    good = make_client()
    assert (await good.invoke(server.address, RemotingCommand(1000, body=b"1"), 3)).body == b"1"

    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    raw_conns.append(writer)
    # a second, concurrent good client with requests in flight while the bad one misbehaves
    inflight = [
        asyncio.ensure_future(good.invoke(server.address, RemotingCommand(1000, body=str(i).encode()), 3))
        for i in range(20)
    ]
    writer.write(BAD_INPUTS[case])
    try:
        leftover = await asyncio.wait_for(reader.read(), 3)
    except ConnectionResetError:
        leftover = b""  # abort() resets the connection
    assert leftover == b""  # closed, and nothing answered
    assert [r.body for r in await asyncio.gather(*inflight)] == [str(i).encode() for i in range(20)]

    assert server.stats.protocol_errors == 1
    lines = [r for r in caplog.records if "bad input" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert f"127.0.0.1:{writer.get_extra_info('sockname')[1]}" in lines[0].getMessage()
    # the good connection is the same one and still works
    assert (await good.invoke(server.address, RemotingCommand(1000, body=b"2"), 3)).body == b"2"
    assert good.stats.connections_accepted == 1
    assert len(server.connections) == 1


async def test_bad_input_from_server_side_closes_client_connection(make_client, caplog):
    """A client receiving garbage from its peer closes that connection, fails pending."""
    caplog.set_level(logging.WARNING, logger="rmq.remoting")

    accepted: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)
        await reader.read(1)
        writer.write(b"\xff" * 16)

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        client = make_client()
        addr = f"127.0.0.1:{srv.sockets[0].getsockname()[1]}"
        with pytest.raises(RemotingClosedError):
            await client.invoke(addr, RemotingCommand(1000), 3)
        assert client.stats.protocol_errors == 1
        assert any("bad input" in r.getMessage() for r in caplog.records)
    finally:
        for w in accepted:
            w.close()
            await w.wait_closed()
        srv.close()
        await srv.wait_closed()


async def test_fragmented_frames_are_reassembled(make_server, raw_conns):
    """Byte-at-a-time delivery is not bad input."""
    server = await make_server()
    server.register_processor(1000, echo)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    raw_conns.append(writer)
    data = b"".join(encode(RemotingCommand(1000, opaque=i, body=b"abc")) for i in range(3))
    for i in range(len(data)):
        writer.write(data[i : i + 1])
        await writer.drain()
        if i % 50 == 0:
            await asyncio.sleep(0)
    dec = FrameDecoder()
    got: list[RemotingCommand] = []
    while len(got) < 3:
        got += dec.feed(await asyncio.wait_for(reader.read(65536), 3))
    assert [c.opaque for c in got] == [0, 1, 2]
    assert server.stats.protocol_errors == 0
