"""Fact check for rmq proxy: grpc.aio serves and calls on uvloop (one loop per process, the
project's rule), unary and bidirectional streaming, with our private-pool messages."""

from __future__ import annotations

import asyncio

import grpc
import uvloop

from rmq.proxy import pb


async def _round_trip() -> tuple[str, list[int], type]:
    Req, Resp = pb.msg("QueryRouteRequest"), pb.msg("QueryRouteResponse")
    Cmd = pb.msg("TelemetryCommand")

    async def unary(req, ctx):
        resp = Resp()
        resp.status.code = pb.Code.OK
        resp.status.message = req.topic.name
        return resp

    async def bidi(requests, ctx):
        async for cmd in requests:
            out = Cmd()
            out.status.code = pb.Code.OK if cmd.HasField("settings") else pb.Code.BAD_REQUEST
            yield out

    handler = grpc.method_handlers_generic_handler(
        "t.S",
        {
            "U": grpc.unary_unary_rpc_method_handler(unary, Req.FromString, Resp.SerializeToString),
            "B": grpc.stream_stream_rpc_method_handler(bidi, Cmd.FromString, Cmd.SerializeToString),
        },
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            req = Req()
            req.topic.name = "T1"
            resp = await ch.unary_unary("/t.S/U", Req.SerializeToString, Resp.FromString)(req, timeout=5)
            call = ch.stream_stream("/t.S/B", Cmd.SerializeToString, Cmd.FromString)()
            codes = []
            for with_settings in (True, False):
                c = Cmd()
                if with_settings:
                    c.settings.client_type = pb.ClientType.PRODUCER
                await call.write(c)
                codes.append((await asyncio.wait_for(call.read(), 5)).status.code)
            await call.done_writing()
            return resp.status.message, codes, type(asyncio.get_running_loop())
    finally:
        await server.stop(0)


def test_grpc_aio_runs_on_uvloop() -> None:
    message, codes, loop_type = uvloop.run(_round_trip())
    assert loop_type is uvloop.Loop
    assert message == "T1"
    assert codes == [pb.Code.OK, pb.Code.BAD_REQUEST]
