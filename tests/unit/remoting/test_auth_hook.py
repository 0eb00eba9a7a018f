"""The server's auth hook (rmq.remoting.dispatch): called before the processor with the
peer address; a refusal is answered as given, a refused oneway is dropped unanswered and
unprocessed; the client's request hook signs what it sends."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from rmq.auth.signing import verify
from rmq.client.acl import AclClientRPCHook
from rmq.protocol.codes import RemotingSysResponseCode, ResponseCode, SerializeType
from rmq.protocol.frame import RemotingCommand
from tests.unit.waiting import wait_until

from .conftest import echo

pytestmark = pytest.mark.timeout(30)

REMOTING = Path(__file__).resolve().parents[3] / "rmq" / "remoting"


def _refuse_all(peers: list[str]):
    def hook(peer: str, cmd: RemotingCommand) -> RemotingCommand | None:
        peers.append(peer)
        if cmd.ext_fields and cmd.ext_fields.get("pass") == "yes":
            return None
        return RemotingCommand(
            RemotingSysResponseCode.SYSTEM_ERROR, remark="refused", serialize_type=SerializeType.JSON
        )

    return hook


async def test_allowed_request_reaches_processor(make_server, make_client):
    peers: list[str] = []
    server = await make_server()
    server.register_processor(1000, echo)
    server.set_auth_hook(_refuse_all(peers))
    client = make_client()
    resp = await client.invoke(server.address, RemotingCommand(1000, ext_fields={"pass": "yes"}, body=b"x"), 3)
    assert resp.code == ResponseCode.SUCCESS and resp.body == b"x"
    assert peers and peers[0].startswith("127.0.0.1:")


async def test_refused_request_answered_in_json_and_not_processed(make_server, make_client):
    seen: list[RemotingCommand] = []
    server = await make_server()
    server.register_processor(1000, lambda c, cmd: (seen.append(cmd), echo(c, cmd))[1])
    server.set_auth_hook(_refuse_all([]))
    client = make_client(serialize_type=SerializeType.ROCKETMQ)
    req = RemotingCommand(1000, body=b"x")
    resp = await client.invoke(server.address, req, 3)
    assert resp.code == RemotingSysResponseCode.SYSTEM_ERROR and resp.remark == "refused"
    assert resp.opaque == req.opaque and resp.is_response
    assert resp.serialize_type == SerializeType.JSON  # 4.9.8: the server default, not the request's
    assert seen == [] and server.stats.auth_refused == 1


async def test_refused_oneway_is_dropped(make_server, make_client):
    seen: list[RemotingCommand] = []
    server = await make_server()
    server.register_processor(1000, lambda c, cmd: seen.append(cmd))
    server.register_processor(1001, echo)
    server.set_auth_hook(_refuse_all([]))
    client = make_client()
    await client.invoke_oneway(server.address, RemotingCommand(1000))
    await wait_until(lambda: server.stats.auth_refused == 1)
    # the connection still works and nothing unasked-for arrived on it
    resp = await client.invoke(server.address, RemotingCommand(1001, ext_fields={"pass": "yes"}), 3)
    assert resp.code == ResponseCode.SUCCESS
    assert seen == [] and client.stats.unmatched_responses == 0


async def test_hook_that_raises_fails_closed(make_server, make_client):
    seen: list[RemotingCommand] = []

    def hook(peer: str, cmd: RemotingCommand) -> RemotingCommand | None:
        raise RuntimeError("boom")

    server = await make_server()
    server.register_processor(1000, lambda c, cmd: (seen.append(cmd), echo(c, cmd))[1])
    server.set_auth_hook(hook)
    resp = await make_client().invoke(server.address, RemotingCommand(1000), 3)
    assert resp.code == ResponseCode.SYSTEM_ERROR and "boom" in (resp.remark or "")
    assert seen == []


async def test_hook_removed(make_server, make_client):
    server = await make_server()
    server.register_processor(1000, echo)
    server.set_auth_hook(_refuse_all([]))
    server.set_auth_hook(None)
    resp = await make_client().invoke(server.address, RemotingCommand(1000), 3)
    assert resp.code == ResponseCode.SUCCESS


@pytest.mark.parametrize("st", [SerializeType.JSON, SerializeType.ROCKETMQ], ids=["JSON", "ROCKETMQ"])
async def test_client_request_hook_signs_every_request(make_server, make_client, st):
    seen: list[RemotingCommand] = []
    server = await make_server()
    server.register_processor(1000, lambda c, cmd: (seen.append(cmd), echo(c, cmd))[1])
    hook = AclClientRPCHook("RocketMQ", "12345678")
    client = make_client(serialize_type=st, request_hook=hook, version=409)
    req = RemotingCommand(1000, ext_fields={"topic": "T", "queueId": "3"}, body=b"body")
    await client.invoke(server.address, req, 3)
    await client.invoke_oneway(server.address, RemotingCommand(1000, body=b"one"))
    await wait_until(lambda: len(seen) == 2)
    for got in seen:
        assert got.ext_fields is not None and got.ext_fields["AccessKey"] == "RocketMQ"
        assert verify(got.ext_fields, got.body, "12345678", got.version)
        assert not verify(got.ext_fields, got.body, "wrong-secret", got.version)
    assert "12345678" not in repr(hook)


async def test_client_re_signs_a_retried_request(make_server, make_client):
    seen: list[RemotingCommand] = []
    server = await make_server()
    server.register_processor(1000, lambda c, cmd: (seen.append(cmd), echo(c, cmd))[1])
    client = make_client(request_hook=AclClientRPCHook("RocketMQ", "12345678"))
    req = RemotingCommand(1000, ext_fields={"topic": "T"})
    await client.invoke(server.address, req, 3)
    req.ext_fields = {**(req.ext_fields or {}), "topic": "U"}  # a retry to another queue
    await client.invoke(server.address, req, 3)
    await asyncio.sleep(0)
    assert verify(seen[1].ext_fields, seen[1].body, "12345678", seen[1].version)


def test_remoting_does_not_import_broker_or_client():
    for path in sorted(REMOTING.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert not name.startswith(("rmq.broker", "rmq.client", "ha", "nameserver")), f"{path.name}: {name}"
