"""Broker: generic remoting answers (spec 1.1, 1.5) and bad input on a connection.

* an unknown request code is answered REQUEST_CODE_NOT_SUPPORTED with Java's remark;
* a response uses the request's serialize type (JSON or ROCKETMQ binary header);
* a oneway request is never answered (not even an unknown code or an error);
* bad input (bad length, frame > 16 MiB, header longer than the frame, unknown serialize
  type, bad JSON) closes that connection only, with a log line and a counter that goes up;
  a parallel good connection, with a long poll parked on it, keeps working.
"""

from __future__ import annotations

import asyncio
import struct

import pytest

from rmq.protocol.codes import PullSysFlag, RemotingFlag, RequestCode, ResponseCode, SerializeType
from rmq.protocol.frame import RemotingCommand, decode_frame
from rmq.protocol.headers import (
    GetMaxOffsetRequestHeader,
    QueryConsumerOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from rmq.protocol.message import decode_records
from tests.integration.broker_util import BrokerApi, RawConn, unique, wait_until
from tests.integration.rigs import ns_and_broker

pytestmark = pytest.mark.timeout(60)


cluster = ns_and_broker("broker-protocol")


@pytest.fixture(scope="module")
def broker(cluster):
    return cluster[1]


# --------------------------------------------------------------------------- spec 1.5
@pytest.mark.parametrize("st", [SerializeType.JSON, SerializeType.ROCKETMQ], ids=["json", "rocketmq"])
async def test_unknown_code_is_request_code_not_supported(broker, st):
    async with BrokerApi(broker.addr, serialize_type=st) as api:
        r = await api.call(9999, {"foo": "bar"})
        assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED == 3
        assert r.remark == " request type 9999 not supported"
        assert r.is_response
        assert r.serialize_type == st
        # the connection stays usable
        r = await api.call(RequestCode.GET_BROKER_RUNTIME_INFO)
        assert r.code == ResponseCode.SUCCESS


@pytest.mark.parametrize("st", [SerializeType.JSON, SerializeType.ROCKETMQ], ids=["json", "rocketmq"])
async def test_response_uses_the_request_serialize_type(broker, st):
    """Raw frames: the high byte of the response's header-length word is the request's type."""
    topic = unique("SerType")
    async with BrokerApi(broker.addr) as api:
        await api.send_ok(topic, b"x", queue_id=1)
        await api.wait_max_offset(topic, 1, 1)
    conn = await RawConn.open(broker.addr)
    try:
        for opaque, code, ext in (
            (77, RequestCode.GET_MAX_OFFSET, GetMaxOffsetRequestHeader(topic, 1).to_ext_fields()),
            (78, 9998, None),
        ):
            await conn.send(RemotingCommand(code, opaque=opaque, ext_fields=ext, serialize_type=st))
            raw = await conn.read_frame_raw()
            assert raw[4] == st, f"response header type {raw[4]} for a request of type {st}"
            (word,) = struct.unpack_from(">I", raw, 4)
            assert (word & 0xFFFFFF) <= len(raw) - 8
            resp = decode_frame(raw)
            assert resp.opaque == opaque
            assert resp.flag & RemotingFlag.RESPONSE
            assert resp.serialize_type == st
            if code == RequestCode.GET_MAX_OFFSET:
                assert resp.code == ResponseCode.SUCCESS
                assert resp.ext_fields == {"offset": "1"}
            else:
                assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
                assert resp.remark == " request type 9998 not supported"
    finally:
        await conn.close()


async def test_binary_client_send_pull_and_errors(broker):
    """A client speaking ROCKETMQ binary headers gets binary answers with the same content."""
    topic = unique("Bin")
    async with BrokerApi(broker.addr, serialize_type=SerializeType.ROCKETMQ) as api:
        r = await api.send(topic, b"binary-body", queue_id=0)
        assert r.code == ResponseCode.SUCCESS and r.serialize_type == SerializeType.ROCKETMQ
        assert r.ext_fields["queueId"] == "0" and r.ext_fields["queueOffset"] == "0"
        await api.wait_max_offset(topic, 0, 1)
        p = await api.pull(topic, 0, 0)
        assert p.code == ResponseCode.SUCCESS and p.serialize_type == SerializeType.ROCKETMQ
        assert p.remark == "FOUND"
        assert [m.body for m in decode_records(p.body)] == [b"binary-body"]
        bad = await api.send("SCHEDULE_TOPIC_XXXX", b"x")
        assert bad.code == ResponseCode.NO_PERMISSION
        assert bad.serialize_type == SerializeType.ROCKETMQ
        assert bad.remark == "Sending message to topic[SCHEDULE_TOPIC_XXXX] is forbidden."


async def test_oneway_requests_get_no_answer(broker):
    topic = unique("Oneway")
    group = unique("OnewayG")
    conn = await RawConn.open(broker.addr)
    try:
        oneway = RemotingFlag.ONEWAY
        # a oneway offset update (as the Java client sends it), a oneway unknown code and
        # a oneway request whose processing fails (no header fields at all)
        await conn.send(
            RemotingCommand(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                opaque=101,
                flag=oneway,
                ext_fields=UpdateConsumerOffsetRequestHeader(group, topic, 0, 42).to_ext_fields(),
            )
        )
        await conn.send(RemotingCommand(9999, opaque=102, flag=oneway))
        await conn.send(RemotingCommand(RequestCode.GET_MAX_OFFSET, opaque=103, flag=oneway))
        await conn.send(
            RemotingCommand(
                RequestCode.QUERY_CONSUMER_OFFSET,
                opaque=104,
                ext_fields=QueryConsumerOffsetRequestHeader(group, topic, 0).to_ext_fields(),
            )
        )
        resp = await conn.read_frame()
        assert resp.opaque == 104, f"a oneway request was answered: {resp!r}"
        assert resp.code == ResponseCode.SUCCESS and resp.ext_fields["offset"] == "42"
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(conn.reader.read(1), 0.3)
    finally:
        await conn.close()


# --------------------------------------------------------------------------- bad input
def _json_header(code: int = RequestCode.GET_BROKER_RUNTIME_INFO) -> bytes:
    return b'{"code":%d,"flag":0,"language":"JAVA","opaque":1,"serializeTypeCurrentRPC":"JSON","version":409}' % code


def _frame(header: bytes, st: int = 0, body: bytes = b"", hlen: int | None = None, length: int | None = None) -> bytes:
    hl = len(header) if hlen is None else hlen
    n = 4 + len(header) + len(body) if length is None else length
    return struct.pack(">iI", n, (st << 24) | hl) + header + body


BAD_INPUT = {
    "length-below-4": struct.pack(">i", 2) + b"\x00\x00\x00\x00",
    "negative-length": struct.pack(">i", -7) + b"\x00" * 8,
    "frame-over-16MiB": struct.pack(">iI", 16 * 1024 * 1024 - 4 + 1, 20),
    "header-longer-than-frame": _frame(b"x" * 6, hlen=100),
    "unknown-serialize-type": _frame(_json_header(), st=5),
    "bad-json": _frame(b'{"code":28,"flag":0,"opaque":1,'),
    "json-not-an-object": _frame(b"[1,2,3]"),
}


async def bad_input_is_cut_off(addr: str, case: str) -> RawConn:
    """BAD_INPUT[case] written on a fresh connection to ``addr``, which the server closes
    (asserted); the closed connection (its local port names it in the server's log)."""
    bad = await RawConn.open(addr)
    try:
        await bad.write(BAD_INPUT[case])
        assert await bad.closed_by_peer(5.0), f"{case}: the broker kept the connection open"
    finally:
        await bad.close()
    return bad


@pytest.mark.parametrize("case", list(BAD_INPUT))
async def test_bad_input_closes_only_that_connection(broker, case):
    topic = unique("BadIn")
    async with BrokerApi(broker.addr) as good:
        before = int((await good.runtime_info()).get("remotingProtocolErrors", -1))
        conn_before = good.client.connections[good.addr]
        assert (await good.create_topic(topic)).code == ResponseCode.SUCCESS
        # a long poll parked on the good connection while the bad one misbehaves
        parked = asyncio.ensure_future(
            good.pull(topic, 0, 0, sys_flag=PullSysFlag.SUBSCRIPTION | PullSysFlag.SUSPEND, suspend_ms=8000, timeout=15)
        )
        await asyncio.sleep(0.2)
        assert not parked.done()

        bad = await bad_input_is_cut_off(broker.addr, case)

        await wait_until(
            lambda: f"bad input from 127.0.0.1:{bad.local_port}" in broker.log_text(),
            3.0,
            f"{case}: no log line for the bad connection",
        )
        line = [ln for ln in broker.log_text().splitlines() if f"bad input from 127.0.0.1:{bad.local_port}" in ln]
        assert len(line) == 1 and "closing the connection" in line[0]

        # the good connection: same socket, parked pull still answered, requests work
        assert good.client.connections.get(good.addr) is conn_before and not conn_before.closed
        assert not parked.done()
        r = await good.send(topic, b"after-bad-input", queue_id=0)
        assert r.code == ResponseCode.SUCCESS
        p = await asyncio.wait_for(parked, 3.0)
        assert p.code == ResponseCode.SUCCESS
        assert [m.body for m in decode_records(p.body)] == [b"after-bad-input"]
        info = await good.runtime_info()
        assert "remotingProtocolErrors" in info, "no protocol error counter in the runtime info"
        assert int(info["remotingProtocolErrors"]) == before + 1
        assert good.client.connections.get(good.addr) is conn_before
