"""The same transport under uvloop: nothing in rmq.remoting may depend on the loop type."""

from __future__ import annotations

import asyncio
import random
import struct

import pytest

from rmq.protocol.codes import RemotingFlag, RequestCode, ResponseCode, SerializeType
from rmq.protocol.frame import RemotingCommand, encode
from rmq.remoting import RemotingClient, RemotingClosedError, RemotingServer, RemotingTimeoutError
from tests.unit.waiting import wait_until

from .conftest import echo

uvloop = pytest.importorskip("uvloop")
pytestmark = pytest.mark.timeout(30)


async def _scenario() -> None:
    assert "uvloop" in type(asyncio.get_running_loop()).__module__
    rng = random.Random(3)
    loop = asyncio.get_running_loop()

    async def slow_echo(conn, cmd):
        await asyncio.sleep(rng.random() * 0.02)
        return echo(conn, cmd)

    def raising(conn, cmd):
        raise RuntimeError("uv boom")

    held: list[asyncio.Future] = []

    def hold(conn, cmd):
        fut = loop.create_future()
        held.append(fut)
        return fut

    server = RemotingServer(max_inflight_per_connection=32)
    server.register_processor(1000, slow_echo)
    server.register_processor(1001, raising)
    server.register_processor(1002, hold)
    await server.start()
    handler_calls: list[int] = []

    def handler(conn, cmd):
        handler_calls.append(cmd.code)
        return cmd.create_response(0, remark="from client")

    clients = [
        RemotingClient(serialize_type=st, request_handler=handler)
        for st in (SerializeType.JSON, SerializeType.ROCKETMQ)
    ]
    writers: list[asyncio.StreamWriter] = []
    try:
        for client in clients:
            reqs = [RemotingCommand(1000, ext_fields={"i": str(i)}, body=b"%d" % i) for i in range(500)]
            resps = await asyncio.gather(*(client.invoke(server.address, r, 10) for r in reqs))
            assert [r.body for r in resps] == [b"%d" % i for i in range(500)]
            assert {r.serialize_type for r in resps} == {client.serialize_type}
            err = await client.invoke(server.address, RemotingCommand(1001), 3)
            assert err.code == ResponseCode.SYSTEM_ERROR and "uv boom" in err.remark
            nope = await client.invoke(server.address, RemotingCommand(7777), 3)
            assert nope.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            with pytest.raises(RemotingTimeoutError):
                await client.invoke(server.address, RemotingCommand(1002), 0.05)
        # server -> client request
        conn = server.connections[0]
        resp = await conn.request(RemotingCommand(RequestCode.GET_CONSUMER_RUNNING_INFO), 3)
        assert resp.remark == "from client"
        conn.send_oneway(RemotingCommand(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED))
        await wait_until(lambda: len(handler_calls) == 2)

        # bad input on a raw connection: closed, counted, others fine
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writers.append(writer)
        writer.write(struct.pack(">iI", 12, (7 << 24) | 4) + b"x" * 8)
        try:
            assert await asyncio.wait_for(reader.read(), 3) == b""
        except ConnectionResetError:
            pass
        assert server.stats.protocol_errors == 1
        assert (await clients[0].invoke(server.address, RemotingCommand(1000), 3)).code == 0

        # in-flight bound pauses reading under uvloop too
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writers.append(writer)
        frame = encode(RemotingCommand(1002, flag=RemotingFlag.ONEWAY, body=b"y" * 1024))
        before = len(held)
        for _ in range(400):
            writer.write(frame * 64)
            try:
                await asyncio.wait_for(writer.drain(), 0.3)
            except TimeoutError:
                break
        else:
            raise AssertionError("server never stopped reading")
        assert len(held) - before == 33
        assert server.stats.read_pauses >= 1

        # closing a connection fails its pending requests promptly
        task = asyncio.ensure_future(clients[1].invoke(server.address, RemotingCommand(1002), 30))
        await wait_until(lambda: len(held) == before + 34)
        for c in server.connections:
            if c.remote_address == clients[1].connections[server.address].local_address:
                c.close()
        with pytest.raises(RemotingClosedError):
            await asyncio.wait_for(task, 1)
    finally:
        for w in writers:
            w.transport.abort()
        for client in clients:
            await client.close()
        await server.stop()


def test_remoting_under_uvloop() -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_scenario())
