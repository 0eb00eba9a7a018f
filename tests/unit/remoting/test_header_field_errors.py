"""A request whose header lacks a required field or carries a malformed value is the
client's mistake: answered SYSTEM_ERROR with RocketMQ's remark naming the field, logged as
one warning line per peer, never as a traceback (issue 11 item 7)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from rmq.protocol.codes import RemotingFlag, RequestCode, ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import GetMaxOffsetRequestHeader, GetMaxOffsetResponseHeader

pytestmark = pytest.mark.timeout(30)


def get_max_offset(conn: object, cmd: RemotingCommand) -> RemotingCommand:
    h = GetMaxOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
    return cmd.create_response(ResponseCode.SUCCESS, ext_fields=GetMaxOffsetResponseHeader(h.queue_id).to_ext_fields())


async def async_get_max_offset(conn: object, cmd: RemotingCommand) -> RemotingCommand:
    await asyncio.sleep(0)
    return get_max_offset(conn, cmd)


def _req(code: int, **ext: str) -> RemotingCommand:
    return RemotingCommand(code, ext_fields=dict(ext))


def _warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "rmq.remoting" and r.levelno >= logging.WARNING]


@pytest.mark.parametrize("processor", [get_max_offset, async_get_max_offset], ids=["sync", "async"])
async def test_missing_and_malformed_fields_are_named(make_server, make_client, caplog, processor):
    server = await make_server()
    server.register_processor(RequestCode.GET_MAX_OFFSET, processor)
    client = make_client()
    caplog.set_level(logging.DEBUG, logger="rmq.remoting")

    resp = await client.invoke(server.address, _req(RequestCode.GET_MAX_OFFSET, queueId="0"), 3)
    assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, "the custom field <topic> is null")
    resp = await client.invoke(server.address, _req(RequestCode.GET_MAX_OFFSET, topic="T", queueId="abc"), 3)
    assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, "the custom field <queueId> is not a number: abc")
    # the connection is fine and a good request still works
    resp = await client.invoke(server.address, _req(RequestCode.GET_MAX_OFFSET, topic="T", queueId="7"), 3)
    assert (resp.code, resp.ext_fields) == (ResponseCode.SUCCESS, {"offset": "7"})

    warnings = _warnings(caplog)
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    msg = warnings[0].getMessage()
    assert warnings[0].levelno == logging.WARNING and warnings[0].exc_info is None
    assert "\n" not in msg
    assert "127.0.0.1:" in msg and "GET_MAX_OFFSET" in msg and "field topic" in msg
    # the second one went to DEBUG, still without a traceback
    debug = [
        r
        for r in caplog.records
        if r.name == "rmq.remoting" and r.levelno == logging.DEBUG and "field queueId" in r.getMessage()
    ]
    assert len(debug) == 1 and debug[0].exc_info is None


async def test_warned_once_per_peer(make_server, make_client, caplog):
    server = await make_server()
    server.register_processor(RequestCode.GET_MAX_OFFSET, get_max_offset)
    caplog.set_level(logging.INFO, logger="rmq.remoting")
    peers = [make_client(), make_client()]
    for client in peers:
        for _ in range(3):
            resp = await client.invoke(server.address, _req(RequestCode.GET_MAX_OFFSET), 3)
            assert resp.code == ResponseCode.SYSTEM_ERROR
            assert resp.remark == "the custom field <topic> is null"
    warnings = _warnings(caplog)
    assert len(warnings) == 2
    addrs = {c.connections[server.address].local_address for c in peers}
    assert {next(a for a in addrs if a in r.getMessage()) for r in warnings} == addrs


async def test_oneway_is_not_answered(make_server, make_client, caplog):
    server = await make_server()
    seen = asyncio.Event()

    def oneway(conn: object, cmd: RemotingCommand) -> None:
        seen.set()
        GetMaxOffsetRequestHeader.from_ext_fields(cmd.ext_fields)

    server.register_processor(RequestCode.GET_MAX_OFFSET, oneway)
    client = make_client()
    caplog.set_level(logging.INFO, logger="rmq.remoting")
    cmd = _req(RequestCode.GET_MAX_OFFSET)
    cmd.flag |= RemotingFlag.ONEWAY
    await client.invoke_oneway(server.address, cmd)
    await asyncio.wait_for(seen.wait(), 3)
    # a two-way request after it gets its own answer, not the oneway's
    server.register_processor(1000, lambda c, r: r.create_response(0, remark="pong"))
    resp = await client.invoke(server.address, RemotingCommand(1000), 3)
    assert (resp.code, resp.remark) == (0, "pong")
    [warning] = _warnings(caplog)
    assert "oneway, not answered" in warning.getMessage()


async def test_other_exceptions_keep_their_traceback(make_server, make_client, caplog):
    server = await make_server()

    def boom(conn: object, cmd: RemotingCommand) -> RemotingCommand:
        raise KeyError("topic")

    server.register_processor(RequestCode.GET_MAX_OFFSET, boom)
    client = make_client()
    caplog.set_level(logging.INFO, logger="rmq.remoting")
    resp = await client.invoke(server.address, _req(RequestCode.GET_MAX_OFFSET), 3)
    assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark == "KeyError: 'topic'"
    [error] = _warnings(caplog)
    assert error.levelno == logging.ERROR and error.exc_info is not None
