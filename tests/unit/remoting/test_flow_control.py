"""Flow control (bounded in-flight work and buffers) and write coalescing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from rmq.protocol.codes import RemotingFlag
from rmq.protocol.frame import FrameDecoder, RemotingCommand, encode
from tests.unit.waiting import wait_until

pytestmark = pytest.mark.timeout(30)


async def _write_until_blocked(writer: asyncio.StreamWriter, chunk: bytes, limit: int = 200 << 20) -> int:
    """Write ``chunk`` repeatedly until the peer stops reading (drain stalls); bytes sent."""
    sent = 0
    while sent < limit:
        writer.write(chunk)
        sent += len(chunk)
        try:
            await asyncio.wait_for(writer.drain(), 0.3)
        except TimeoutError:
            return sent
    raise AssertionError(f"peer read {limit} bytes without pausing")


async def test_inflight_bound_pauses_reading(make_server, raw_conns):
    max_inflight = 64
    loop = asyncio.get_running_loop()
    held: list[asyncio.Future] = []
    calls = 0
    release_all = False

    def never_done(conn, cmd):
        nonlocal calls
        calls += 1
        if release_all:
            return None
        fut = loop.create_future()
        held.append(fut)
        return fut

    server = await make_server(max_inflight_per_connection=max_inflight)
    server.register_processor(1000, never_done)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    raw_conns.append(writer)
    frame = encode(RemotingCommand(1000, flag=RemotingFlag.ONEWAY, body=b"x" * 1024))
    sent = await _write_until_blocked(writer, frame * 64)
    frames_sent = sent // len(frame)

    conn = server.connections[0]
    assert server.stats.read_pauses == 1
    assert conn.reading_paused
    # exactly one request past the bound was dispatched, then dispatch stopped
    assert calls == max_inflight + 1 == conn.inflight
    assert frames_sent > 10 * calls, (frames_sent, calls)
    # what waits inside the process is bounded by one read, not by what the client sent
    waiting_bytes = len(conn._backlog) * len(frame) + conn._decoder.buffered
    assert waiting_bytes < 1 << 20
    assert sent > 2 * waiting_bytes

    # completing the held work resumes reading; every frame is eventually processed
    release_all = True
    for fut in held:
        fut.set_result(None)
    await wait_until(lambda: calls == frames_sent, timeout=15)
    assert conn.inflight == 0
    await wait_until(lambda: not conn.reading_paused)


def _holding_processor() -> tuple[list[tuple], Callable]:
    """A processor that answers nothing until the test completes the future it returned:
    (the (future, request) pairs so far, the processor)."""
    loop = asyncio.get_running_loop()
    held: list[tuple] = []

    def hold(conn, cmd):
        fut = loop.create_future()
        held.append((fut, cmd))
        return fut

    return held, hold


async def test_inflight_resumes_at_half(make_server, make_client):
    held, hold = _holding_processor()
    server = await make_server(max_inflight_per_connection=10)
    server.register_processor(1000, hold)
    client = make_client()
    tasks = [asyncio.ensure_future(client.invoke(server.address, RemotingCommand(1000), 10)) for _ in range(30)]
    await wait_until(lambda: len(held) == 11)
    await asyncio.sleep(0.05)
    conn = server.connections[0]
    assert conn.reading_paused and len(held) == 11
    for fut, cmd in held[:5]:  # 6 left: still above half
        fut.set_result(cmd.create_response(0))
    await asyncio.sleep(0.05)
    assert conn.reading_paused and len(held) == 11
    held[5][0].set_result(held[5][1].create_response(0))  # 5 left: resume
    await wait_until(lambda: len(held) > 11)
    assert len(held) <= 17  # 5 still in flight + up to 12 more: 11 again, paused again
    n = 0
    while n < 30:  # answer everything
        for fut, cmd in held:
            if not fut.done():
                fut.set_result(cmd.create_response(0))
        n = len(held)
        await asyncio.sleep(0.01)
    assert all(r.code == 0 for r in await asyncio.gather(*tasks))


async def test_write_pressure_pauses_reading(make_server, raw_conns):
    """A client that sends requests but never reads responses cannot make us buffer them."""
    calls = 0
    big = b"r" * (128 << 10)

    def big_answer(conn, cmd):
        nonlocal calls
        calls += 1
        return cmd.create_response(0, body=big)

    high = 256 << 10
    server = await make_server(write_buffer_high=high)
    server.register_processor(1000, big_answer)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port, limit=1 << 16)
    raw_conns.append(writer)
    n_requests = 2000  # 250 MiB of responses if all were produced
    writer.write(b"".join(encode(RemotingCommand(1000, opaque=i)) for i in range(n_requests)))
    await writer.drain()
    await wait_until(lambda: server.stats.read_pauses >= 1)
    await asyncio.sleep(0.3)
    before = calls
    await asyncio.sleep(0.2)
    assert calls == before < n_requests  # stopped, bounded by kernel buffers + high-water mark
    conn = server.connections[0]
    assert conn.reading_paused and conn.write_blocked
    assert conn._transport.get_write_buffer_size() <= high + 2 * len(big) + 4096
    assert conn._out_size == 0

    # reading the responses lets everything through, in order
    dec = FrameDecoder()
    got = 0
    while got < n_requests:
        for resp in dec.feed(await asyncio.wait_for(reader.read(1 << 20), 5)):
            assert resp.opaque == got and len(resp.body) == len(big)
            got += 1
    assert calls == n_requests


async def test_client_waits_for_drain_instead_of_buffering(raw_conns, make_client):
    """The server does not read: the client's senders block, its buffer stays bounded."""
    accepted: list[asyncio.StreamWriter] = []

    async def handle(reader, writer):
        accepted.append(writer)  # never reads

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        client = make_client()
        addr = f"127.0.0.1:{srv.sockets[0].getsockname()[1]}"
        body = b"b" * (64 << 10)

        async def sender():
            for _ in range(10_000):
                await client.invoke_oneway(addr, RemotingCommand(1000, body=body))

        task = asyncio.ensure_future(sender())
        try:
            conn = await client.get_connection(addr)
            await wait_until(lambda: conn.write_blocked)
            await asyncio.sleep(0.2)
            assert not task.done()
            # high-water mark (1 MiB) + at most one coalesced batch (16 KiB + a frame)
            # written before the transport could say "pause"
            assert conn._transport.get_write_buffer_size() <= (1 << 20) + (16 << 10) + 2 * len(body)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    finally:
        for w in accepted:
            w.transport.abort()
        await asyncio.sleep(0)
        srv.close()
        await srv.wait_closed()


def _count_writes(transport) -> list[tuple[int, int]]:
    """Instrument ``transport.writelines``: (buffers, bytes) per call."""
    writes: list[tuple[int, int]] = []
    orig = transport.writelines

    def counting_writelines(bufs):
        writes.append((len(bufs), sum(len(b) for b in bufs)))
        return orig(bufs)

    transport.writelines = counting_writelines
    return writes


@pytest.mark.parametrize("limit", [16 << 10, 1 << 20], ids=["default-16KiB", "1MiB"])
async def test_responses_completing_together_share_writes(make_server, make_client, limit):
    held, hold = _holding_processor()
    server = await make_server(coalesce_limit=limit)
    server.register_processor(1000, hold)
    client = make_client()
    tasks = [
        asyncio.ensure_future(client.invoke(server.address, RemotingCommand(1000, body=b"%d" % i), 10))
        for i in range(200)
    ]
    await wait_until(lambda: len(held) == 200)
    writes = _count_writes(server.connections[0]._transport)
    for fut, cmd in held:  # one group-commit round completing 200 sends at once
        fut.set_result(cmd.create_response(0, body=cmd.body))
    resps = await asyncio.gather(*tasks)
    assert [r.body for r in resps] == [b"%d" % i for i in range(200)]
    assert sum(n for n, _ in writes) == 400  # 200 prefixes + 200 bodies
    total = sum(size for _, size in writes)
    if limit > total:
        assert len(writes) == 1  # everything from one iteration in one write
    else:
        # full batches of at least `limit` bytes, then the rest
        assert all(size >= limit for _, size in writes[:-1])
        assert len(writes) <= total // limit + 1
        assert len(writes) < 10


async def test_client_requests_coalesced(make_server, make_client):
    """Requests issued in one iteration leave together, too."""
    from .conftest import echo

    server = await make_server()
    server.register_processor(1000, echo)
    client = make_client(coalesce_limit=1 << 20)
    await client.invoke(server.address, RemotingCommand(1000), 3)
    writes = _count_writes(client.connections[server.address]._transport)
    await asyncio.gather(*(client.invoke(server.address, RemotingCommand(1000), 3) for _ in range(100)))
    assert [n for n, _ in writes] == [100]


async def test_read_answered_in_one_write(make_server, raw_conns):
    """Sync answers to the frames of one read leave at the end of that read, together."""
    from .conftest import echo

    server = await make_server()
    server.register_processor(1000, echo)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    raw_conns.append(writer)
    writer.write(encode(RemotingCommand(1000, opaque=0)))
    await asyncio.wait_for(reader.read(65536), 3)
    writes = _count_writes(server.connections[0]._transport)
    writer.write(b"".join(encode(RemotingCommand(1000, opaque=i)) for i in range(1, 51)))
    dec = FrameDecoder()
    got: list[RemotingCommand] = []
    while len(got) < 50:
        got += dec.feed(await asyncio.wait_for(reader.read(65536), 3))
    assert [c.opaque for c in got] == list(range(1, 51))
    assert len(writes) <= 2  # one per read of the server (the kernel may split ours)
