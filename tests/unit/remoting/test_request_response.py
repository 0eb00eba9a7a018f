"""Request/response behaviour of RemotingServer + RemotingClient over real sockets."""

from __future__ import annotations

import asyncio
import logging
import random
import time

import pytest

from rmq.protocol.codes import RemotingFlag, RequestCode, ResponseCode, SerializeType
from rmq.protocol.frame import FrameDecoder, RemotingCommand, encode
from rmq.remoting import (
    RemotingClosedError,
    RemotingConnectError,
    RemotingSendRequestError,
    RemotingServer,
    RemotingTimeoutError,
)
from tests.unit.waiting import wait_until

from .conftest import echo, read_frame

pytestmark = pytest.mark.timeout(30)

JSON, BIN = SerializeType.JSON, SerializeType.ROCKETMQ


@pytest.mark.parametrize("st", [JSON, BIN], ids=["JSON", "ROCKETMQ"])
async def test_request_response_follows_request_serialize_type(make_server, make_client, st):
    seen: list[RemotingCommand] = []

    def processor(conn, cmd):
        seen.append(cmd)
        # The processor answers in the "wrong" type on purpose: the server must force
        # the request's type, as 4.9.8 does.
        resp = RemotingCommand(
            ResponseCode.SUCCESS,
            remark="ok",
            ext_fields={"topic": "T"},
            body=b"pong",
            serialize_type=JSON if st == BIN else BIN,
        )
        return resp

    server = await make_server()
    server.register_processor(RequestCode.GET_ROUTEINFO_BY_TOPIC, processor)
    client = make_client(serialize_type=st)
    req = RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": "TopicTest"}, body=b"ping")
    resp = await client.invoke(server.address, req, 3)
    assert seen[0].serialize_type == st
    assert seen[0].ext_fields == {"topic": "TopicTest"} and seen[0].body == b"ping"
    assert resp.serialize_type == st
    assert resp.code == ResponseCode.SUCCESS and resp.remark == "ok" and resp.body == b"pong"
    assert resp.ext_fields == {"topic": "T"}
    assert resp.is_response and resp.opaque == req.opaque
    assert server.stats.requests == 1


async def test_response_type_follows_each_request_on_one_server(make_server, make_client):
    server = await make_server()
    server.register_processor(1000, echo)
    a, b = make_client(serialize_type=JSON), make_client(serialize_type=BIN)
    ra = await a.invoke(server.address, RemotingCommand(1000, body=b"a"), 3)
    rb = await b.invoke(server.address, RemotingCommand(1000, body=b"b"), 3)
    assert (ra.serialize_type, ra.body) == (JSON, b"a")
    assert (rb.serialize_type, rb.body) == (BIN, b"b")


async def test_client_sets_language_and_version(make_server, make_client):
    seen = []
    server = await make_server()
    server.register_processor(1000, lambda c, cmd: (seen.append(cmd), echo(c, cmd))[1])
    client = make_client(language=3, version=401)
    await client.invoke(server.address, RemotingCommand(1000), 3)
    assert seen[0].language == 3 and seen[0].version == 401


async def test_pipelining_1000_out_of_order(make_server, make_client):
    rng = random.Random(7)

    async def slow_echo(conn, cmd):
        await asyncio.sleep(rng.random() * 0.05)
        return cmd.create_response(0, ext_fields={"i": cmd.ext_fields["i"]})

    server = await make_server()
    server.register_processor(1000, slow_echo)
    client = make_client()
    reqs = [RemotingCommand(1000, ext_fields={"i": str(i)}) for i in range(1000)]
    resps = await asyncio.gather(*(client.invoke(server.address, r, 10) for r in reqs))
    assert [r.ext_fields["i"] for r in resps] == [str(i) for i in range(1000)]
    assert server.stats.connections_accepted == 1  # all on one connection
    assert server.stats.requests == 1000


async def test_concurrent_callers_share_one_connect(make_server, make_client):
    server = await make_server()
    server.register_processor(1000, echo)
    client = make_client()
    await asyncio.gather(*(client.invoke(server.address, RemotingCommand(1000), 3) for _ in range(50)))
    assert server.stats.connections_accepted == 1
    assert list(client.connections) == [server.address]


async def test_processor_returning_future_and_coroutine(make_server, make_client):
    loop = asyncio.get_running_loop()

    def fut_proc(conn, cmd):
        fut = loop.create_future()
        loop.call_later(0.01, fut.set_result, cmd.create_response(0, remark="future"))
        return fut

    async def coro_proc(conn, cmd):
        await asyncio.sleep(0)
        return cmd.create_response(0, remark="coroutine")

    server = await make_server()
    server.register_processor(1, fut_proc)
    server.register_processor(2, coro_proc)
    client = make_client()
    r1 = await client.invoke(server.address, RemotingCommand(1), 3)
    r2 = await client.invoke(server.address, RemotingCommand(2), 3)
    assert (r1.remark, r2.remark) == ("future", "coroutine")


async def test_long_polling_processor_answers_later(make_server, make_client):
    held: list[tuple] = []

    def hold(conn, cmd):
        held.append((conn, cmd))
        return None  # answered later through conn.send_response

    server = await make_server()
    server.register_processor(RequestCode.PULL_MESSAGE, hold)
    client = make_client(serialize_type=BIN)
    task = asyncio.ensure_future(client.invoke(server.address, RemotingCommand(RequestCode.PULL_MESSAGE), 3))
    await wait_until(lambda: bool(held))
    conn, req = held[0]
    assert conn.inflight == 1  # held requests count as in flight
    await asyncio.sleep(0.05)
    assert not task.done()
    conn.send_response(req.create_response(ResponseCode.PULL_NOT_FOUND, body=b"late"))
    resp = await task
    assert (resp.code, resp.body, resp.serialize_type) == (ResponseCode.PULL_NOT_FOUND, b"late", BIN)
    assert conn.inflight == 0


async def test_unknown_code_not_supported(make_server, make_client):
    server = await make_server()
    client = make_client()
    resp = await client.invoke(server.address, RemotingCommand(4242), 3)
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert resp.remark == " request type 4242 not supported"


async def test_default_processor(make_server, make_client):
    server = await make_server()
    server.register_default_processor(lambda c, cmd: cmd.create_response(0, remark=str(cmd.code)))
    client = make_client()
    resp = await client.invoke(server.address, RemotingCommand(4242), 3)
    assert (resp.code, resp.remark) == (0, "4242")


async def test_exception_system_error_logged_once(make_server, make_client, caplog):
    def boom(conn, cmd):
        raise ValueError("boom " + cmd.ext_fields["n"])

    async def async_boom(conn, cmd):
        await asyncio.sleep(0)
        raise KeyError("nope")

    server = await make_server()
    server.register_processor(RequestCode.SEND_MESSAGE_V2, boom)
    server.register_processor(RequestCode.HEART_BEAT, async_boom)
    client = make_client()
    caplog.set_level(logging.DEBUG, logger="rmq.remoting")
    for n in range(3):
        resp = await client.invoke(
            server.address, RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext_fields={"n": str(n)}), 3
        )
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert resp.remark == f"ValueError: boom {n}"
    for _ in range(2):
        resp = await client.invoke(server.address, RemotingCommand(RequestCode.HEART_BEAT), 3)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "nope" in resp.remark
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 2  # once per (code, exception type)
    assert "SEND_MESSAGE_V2" in errors[0].getMessage() and "127.0.0.1" in errors[0].getMessage()
    assert errors[0].exc_info is not None
    assert "HEART_BEAT" in errors[1].getMessage()
    assert server.stats.processor_errors == 5
    # the connection survived all of it
    server.register_processor(1000, echo)
    assert (await client.invoke(server.address, RemotingCommand(1000), 3)).code == 0


async def test_bad_processor_results_are_system_errors(make_server, make_client):
    server = await make_server()
    server.register_processor(1, lambda c, cmd: 42)
    # a response that cannot be encoded (ext value is not a string)
    server.register_processor(2, lambda c, cmd: cmd.create_response(0, ext_fields={"k": 1}))

    async def cancelled(conn, cmd):
        raise asyncio.CancelledError

    server.register_processor(3, cancelled)
    client = make_client()
    r1 = await client.invoke(server.address, RemotingCommand(1), 3)
    r2 = await client.invoke(server.address, RemotingCommand(2), 3)
    r3 = await client.invoke(server.address, RemotingCommand(3), 3)
    assert r1.code == r2.code == r3.code == ResponseCode.SYSTEM_ERROR
    assert "int" in r1.remark and "cancelled" in r3.remark
    assert server.connections[0].inflight == 0


async def test_oneway_never_answered(make_server, raw_conns, caplog):
    calls: list[int] = []

    def raising(conn, cmd):
        calls.append(cmd.code)
        raise RuntimeError("oneway failure")

    async def async_raising(conn, cmd):
        calls.append(cmd.code)
        raise RuntimeError("async oneway failure")

    def answering(conn, cmd):
        calls.append(cmd.code)
        return cmd.create_response(0)

    server = await make_server()
    server.register_processor(1, raising)
    server.register_processor(2, async_raising)
    server.register_processor(3, answering)
    server.register_processor(1000, echo)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    raw_conns.append(writer)
    flag = RemotingFlag.ONEWAY
    for i, code in enumerate([1, 2, 3, 4242]):  # 4242: unknown code
        writer.write(encode(RemotingCommand(code, opaque=100 + i, flag=flag)))
    writer.write(encode(RemotingCommand(1000, opaque=7)))
    # the only answer is the one to the two-way request
    resp = FrameDecoder().feed(await asyncio.wait_for(read_frame(reader), 3))[0]
    assert resp.opaque == 7 and resp.is_response
    await asyncio.sleep(0.1)
    assert sorted(calls) == [1, 2, 3]  # the coroutine runs after the sync ones
    writer.write(encode(RemotingCommand(1000, opaque=8)))
    resp = FrameDecoder().feed(await asyncio.wait_for(read_frame(reader), 3))[0]
    assert resp.opaque == 8  # nothing for the oneways came in between
    assert server.connections[0].inflight == 0


async def test_client_invoke_oneway(make_server, make_client):
    got = asyncio.get_running_loop().create_future()
    server = await make_server()
    server.register_processor(RequestCode.UPDATE_CONSUMER_OFFSET, lambda c, cmd: got.set_result(cmd))
    client = make_client(serialize_type=BIN)
    await client.invoke_oneway(
        server.address, RemotingCommand(RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields={"offset": "5"})
    )
    cmd = await asyncio.wait_for(got, 3)
    assert cmd.is_oneway and cmd.ext_fields == {"offset": "5"} and cmd.serialize_type == BIN


async def test_timeout_drops_pending_and_late_response(make_server, make_client, caplog):
    held = []
    server = await make_server()
    server.register_processor(1000, lambda c, cmd: held.append((c, cmd)))
    client = make_client()
    t0 = time.monotonic()
    with pytest.raises(RemotingTimeoutError):
        await client.invoke(server.address, RemotingCommand(1000), 0.2)
    assert 0.15 < time.monotonic() - t0 < 1.5
    conn = client.connections[server.address]
    assert conn.pending_requests == 0
    assert client.stats.timeouts == 1
    # the late answer is logged and dropped; the connection keeps working
    caplog.set_level(logging.DEBUG, logger="rmq.remoting")
    sconn, req = held[0]
    sconn.send_response(req.create_response(0))
    await wait_until(lambda: client.stats.unmatched_responses == 1)
    assert any("matches no pending request" in r.getMessage() for r in caplog.records)
    server.register_processor(1001, echo)
    assert (await client.invoke(server.address, RemotingCommand(1001), 3)).code == 0


async def unanswered(make_server, make_client):
    """A server that never answers code 1000, and a client with one such request pending."""
    server = await make_server()
    server.register_processor(1000, lambda c, cmd: None)
    client = make_client()
    task = asyncio.ensure_future(client.invoke(server.address, RemotingCommand(1000), 30))
    await wait_until(lambda: server.stats.requests == 1)
    return server, client, task


async def test_cancelled_invoke_drops_pending(make_server, make_client):
    server, client, task = await unanswered(make_server, make_client)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert client.connections[server.address].pending_requests == 0


@pytest.mark.parametrize("handler_kind", ["sync", "async"])
async def test_server_initiated_request_to_client(make_server, make_client, handler_kind):
    notified = asyncio.get_running_loop().create_future()

    def sync_handler(conn, cmd):
        if cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            notified.set_result(cmd)
            return cmd.create_response(0)  # must NOT be sent back: the request is oneway
        return cmd.create_response(0, remark="running", body=b"info:" + cmd.body)

    async def async_handler(conn, cmd):
        await asyncio.sleep(0.01)
        return sync_handler(conn, cmd)

    server = await make_server()
    server.register_processor(RequestCode.HEART_BEAT, echo)
    made = []
    server.on_connection_made(made.append)
    client = make_client(request_handler=sync_handler if handler_kind == "sync" else async_handler, serialize_type=BIN)
    await client.invoke(server.address, RemotingCommand(RequestCode.HEART_BEAT), 3)
    (conn,) = made
    resp = await conn.request(RemotingCommand(RequestCode.GET_CONSUMER_RUNNING_INFO, body=b"x"), 3)
    assert (resp.code, resp.remark, resp.body) == (0, "running", b"info:x")
    assert resp.serialize_type == JSON  # the server's request was JSON; the answer follows it
    conn.send_oneway(RemotingCommand(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, ext_fields={"consumerGroup": "g"}))
    cmd = await asyncio.wait_for(notified, 3)
    assert cmd.is_oneway and cmd.ext_fields == {"consumerGroup": "g"}
    # a round trip later, still no stray response reached the server
    await conn.request(RemotingCommand(RequestCode.GET_CONSUMER_RUNNING_INFO, body=b""), 3)
    assert server.stats.unmatched_responses == 0
    assert client.stats.requests == 3


async def test_server_initiated_request_without_handler(make_server, make_client):
    server = await make_server()
    server.register_processor(RequestCode.HEART_BEAT, echo)
    client = make_client()
    await client.invoke(server.address, RemotingCommand(RequestCode.HEART_BEAT), 3)
    resp = await server.connections[0].request(RemotingCommand(RequestCode.CHECK_TRANSACTION_STATE), 3)
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


async def test_client_register_processor(make_server, make_client):
    server = await make_server()
    server.register_processor(RequestCode.HEART_BEAT, echo)
    client = make_client(request_handler=lambda c, cmd: cmd.create_response(1, remark="handler"))
    client.register_processor(
        RequestCode.CHECK_TRANSACTION_STATE, lambda c, cmd: cmd.create_response(0, remark="processor")
    )
    await client.invoke(server.address, RemotingCommand(RequestCode.HEART_BEAT), 3)
    conn = server.connections[0]
    r1 = await conn.request(RemotingCommand(RequestCode.CHECK_TRANSACTION_STATE), 3)
    r2 = await conn.request(RemotingCommand(RequestCode.GET_CONSUMER_RUNNING_INFO), 3)
    assert (r1.remark, r2.remark) == ("processor", "handler")


async def test_reconnect_after_server_closes_connection(make_server, make_client):
    server = await make_server()
    server.register_processor(1000, echo)
    closed = []
    server.on_connection_closed(closed.append)
    client = make_client()
    await client.invoke(server.address, RemotingCommand(1000), 3)
    old = client.connections[server.address]
    for conn in server.connections:
        conn.close()
    await asyncio.wait_for(old.wait_closed(), 3)
    assert old.closed and len(closed) == 1
    resp = await client.invoke(server.address, RemotingCommand(1000, body=b"again"), 3)
    assert resp.body == b"again"
    assert client.connections[server.address] is not old
    assert server.stats.connections_accepted == 2


async def test_reconnect_after_server_restart(make_server, make_client):
    server = await make_server()
    server.register_processor(1000, echo)
    client = make_client()
    addr = server.address
    await client.invoke(addr, RemotingCommand(1000), 3)
    await server.stop()
    await wait_until(lambda: not client.connections)
    with pytest.raises(RemotingConnectError):
        await client.invoke(addr, RemotingCommand(1000), 3)
    server2 = await make_server(port=server.port)
    server2.register_processor(1000, echo)
    assert (await client.invoke(addr, RemotingCommand(1000, body=b"x"), 3)).body == b"x"


async def test_close_fails_pending_fast(make_server, make_client):
    server = await make_server()
    server.register_processor(1000, lambda c, cmd: asyncio.get_running_loop().create_future())
    client = make_client()
    tasks = [asyncio.ensure_future(client.invoke(server.address, RemotingCommand(1000), 30)) for _ in range(10)]
    await wait_until(lambda: server.stats.requests == 10)
    t0 = time.monotonic()
    server.connections[0].close()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert time.monotonic() - t0 < 1.0
    assert all(isinstance(r, RemotingClosedError) for r in results)


async def test_client_close_connection_fails_pending(make_server, make_client):
    server, client, task = await unanswered(make_server, make_client)
    client.close_connection(server.address)
    with pytest.raises(RemotingClosedError):
        await asyncio.wait_for(task, 1)
    await wait_until(lambda: not server.connections)


async def test_server_stop_fails_client_pending(make_client):
    server = RemotingServer()
    await server.start()
    try:
        server.register_processor(1000, lambda c, cmd: asyncio.sleep(3600))
        client = make_client()
        task = asyncio.ensure_future(client.invoke(server.address, RemotingCommand(1000), 30))
        await wait_until(lambda: server.stats.requests == 1)
    finally:
        await server.stop()
    with pytest.raises(RemotingClosedError):
        await asyncio.wait_for(task, 2)
    assert server.connections == []


async def test_connect_error(make_client):
    # a port nothing listens on: bind, remember, close
    srv = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    srv.close()
    await srv.wait_closed()
    client = make_client(connect_timeout=1.0)
    with pytest.raises(RemotingConnectError):
        await client.invoke(f"127.0.0.1:{port}", RemotingCommand(1000), 3)
    with pytest.raises(RemotingConnectError):
        await client.invoke("no-port", RemotingCommand(1000), 3)


async def test_closed_client_refuses(make_server, make_client):
    server = await make_server()
    client = make_client()
    await client.close()
    with pytest.raises(RemotingClosedError):
        await client.invoke(server.address, RemotingCommand(1000), 3)


async def test_unencodable_request(make_server, make_client):
    server = await make_server()
    client = make_client(serialize_type=BIN)
    with pytest.raises(RemotingSendRequestError):
        await client.invoke(server.address, RemotingCommand(200050), 3)  # int16 code field


async def test_large_bodies_both_ways(make_server, make_client):
    server = await make_server()
    server.register_processor(1000, echo)
    client = make_client()
    body = random.Random(1).randbytes(8 << 20)
    resp = await client.invoke(server.address, RemotingCommand(1000, body=body), 10)
    assert resp.body == body


async def test_memoryview_body_response(make_server, make_client):
    store = bytearray(b"0123456789" * 1000)
    server = await make_server()
    server.register_processor(
        RequestCode.PULL_MESSAGE, lambda c, cmd: cmd.create_response(0, body=memoryview(store)[10:5010])
    )  # type: ignore[arg-type]
    client = make_client()
    resp = await client.invoke(server.address, RemotingCommand(RequestCode.PULL_MESSAGE), 3)
    assert resp.body == bytes(store[10:5010])


async def test_connection_addresses_and_attrs(make_server, make_client):
    server = await make_server()
    server.register_processor(1000, echo)
    client = make_client()
    await client.invoke(server.address, RemotingCommand(1000), 3)
    sconn = server.connections[0]
    cconn = client.connections[server.address]
    assert sconn.local_address == server.address == cconn.remote_address
    assert sconn.remote_address == cconn.local_address
    sconn.attrs["clientId"] = "c1"
    assert server.connections[0].attrs == {"clientId": "c1"}


async def test_close_while_connecting_and_connect_slower_than_timeout(make_client, monkeypatch):
    client = make_client(connect_timeout=3.0)

    async def slow_open(addr):
        await asyncio.sleep(10)

    monkeypatch.setattr(client, "_open", slow_open)
    with pytest.raises(RemotingTimeoutError):  # the request's timeout covers connecting
        await client.invoke("127.0.0.1:1", RemotingCommand(1000), 0.05)
    task = asyncio.ensure_future(client.invoke("127.0.0.1:1", RemotingCommand(1000), 5))
    await asyncio.sleep(0.01)
    await client.close()
    with pytest.raises(RemotingClosedError):
        await asyncio.wait_for(task, 1)
