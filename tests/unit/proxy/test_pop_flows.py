"""The POP-backed RPC bodies of rmq.proxy.pop_client against a fake broker (an in-process
RemotingServer that answers POP_MESSAGE / ACK_MESSAGE / CHANGE_MESSAGE_INVISIBLETIME /
CONSUMER_SEND_MSG_BACK as RocketMQ 5's broker does): the requests' header fields, the receive
frames, receipt handles, the DLQ path. The end-to-end tests wait for rmq's broker to serve POP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from rmq.client.api import MQClientAPI
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.message import encode_record, pack_host, properties_to_string
from rmq.proxy import pb
from rmq.proxy.convert import ProxyError
from rmq.proxy.pop_client import PopClient, ReceiptHandle
from rmq.proxy.renew import RENEW_STEPS_MS, Renewer
from rmq.remoting.client import RemotingClient
from rmq.remoting.server import RemotingServer

POP_TIME = 1_700_000_000_000


def _record(body: str, qoffset: int, clo: int, reconsume: int = 0) -> bytes:
    props = {"TAGS": "TagA", "UNIQ_KEY": f"ID-{body}", "POP_CK": f"7 {POP_TIME} 60000 2 0 broker-a 1 {qoffset}"}
    return encode_record(
        topic=b"T",
        body=body.encode(),
        properties=properties_to_string(props).encode(),
        queue_id=1,
        flag=0,
        queue_offset=qoffset,
        physical_offset=clo,
        sys_flag=0,
        born_timestamp=POP_TIME - 5,
        born_host=pack_host("10.0.0.1", 1000),
        store_timestamp=POP_TIME - 1,
        store_host=pack_host("127.0.0.1", 10911),
        reconsume_times=reconsume,
        prepared_transaction_offset=0,
    )


class FakeBroker:
    def __init__(self, records: bytes | None, code: int = ResponseCode.SUCCESS) -> None:
        self.records = records
        self.code = code
        self.requests: list[tuple[int, dict[str, str]]] = []
        self.server = RemotingServer()
        for c in (
            RequestCode.POP_MESSAGE,
            RequestCode.ACK_MESSAGE,
            RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
            RequestCode.CONSUMER_SEND_MSG_BACK,
        ):
            self.server.register_processor(c, self.handle)

    def handle(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        self.requests.append((cmd.code, dict(cmd.ext_fields or {})))
        if cmd.code == RequestCode.POP_MESSAGE:
            if not self.records:
                return cmd.create_response(ResponseCode.POLLING_TIMEOUT, "no message")
            ext = {"popTime": str(POP_TIME), "invisibleTime": "60000", "reviveQid": "2", "restNum": "0"}
            return cmd.create_response(self.code, None, ext, self.records)
        if cmd.code == RequestCode.CHANGE_MESSAGE_INVISIBLETIME:
            ext = {"popTime": str(POP_TIME + 10), "invisibleTime": cmd.ext_fields["invisibleTime"], "reviveQid": "3"}
            return cmd.create_response(ResponseCode.SUCCESS, None, ext)
        return cmd.create_response(ResponseCode.SUCCESS)


@pytest.fixture
async def broker_and_pop() -> AsyncIterator[tuple[FakeBroker, PopClient]]:
    fake = FakeBroker(_record("m1", 40, 4096) + _record("m2", 41, 8192, reconsume=3))
    await fake.server.start()
    client = RemotingClient()
    try:
        yield fake, PopClient(MQClientAPI(client))
    finally:
        await client.close()
        await fake.server.stop()


def _receive_request(**kw: Any) -> Any:
    req = pb.msg("ReceiveMessageRequest")(group=pb.msg("Resource")(name="G"), batch_size=kw.get("batch", 16))
    req.filter_expression.type = pb.FilterType.TAG
    req.filter_expression.expression = "TagA"
    req.invisible_duration.FromSeconds(kw.get("invisible_s", 30))
    return req


async def _frames(pop: PopClient, addr: str, req: Any, max_attempts: int = 17) -> list[Any]:
    gen = pop.receive(
        addr, "broker-a", req, group="G", topic="T", fifo=False, max_attempts=max_attempts, poll_ms=5000,
        now_ms=POP_TIME, timeout_ms=8000,
    )  # fmt: skip
    return [f async for f in gen]


async def test_receive_frames_and_pop_header(broker_and_pop) -> None:
    fake, pop = broker_and_pop
    frames = await _frames(pop, fake.server.address, _receive_request())
    kinds = [f.WhichOneof("content") for f in frames]
    assert kinds == ["status", "message", "message", "delivery_timestamp"]
    assert frames[0].status.code == pb.Code.OK
    m1, m2 = frames[1].message, frames[2].message
    assert (m1.body, m1.system_properties.message_id, m1.system_properties.tag) == (b"m1", "ID-m1", "TagA")
    assert m2.system_properties.delivery_attempt == 4
    h = ReceiptHandle.decode(m1.system_properties.receipt_handle)
    assert (h.broker_name, h.queue_id, h.queue_offset, h.commit_log_offset) == ("broker-a", 1, 40, 4096)
    code, ext = fake.requests[0]
    assert code == RequestCode.POP_MESSAGE
    assert ext == {
        "consumerGroup": "G", "topic": "T", "queueId": "-1", "maxMsgNums": "16", "invisibleTime": "30000",
        "pollTime": "5000", "bornTime": str(POP_TIME), "initMode": "1", "expType": "TAG", "exp": "TagA",
        "order": "false",
    }  # fmt: skip


async def test_receive_nothing_and_bad_invisible_time(broker_and_pop) -> None:
    fake, pop = broker_and_pop
    fake.records = None
    frames = await _frames(pop, fake.server.address, _receive_request())
    assert [f.WhichOneof("content") for f in frames] == ["status", "delivery_timestamp"]
    assert frames[0].status.code == pb.Code.MESSAGE_NOT_FOUND
    with pytest.raises(ProxyError) as ei:
        await _frames(pop, fake.server.address, _receive_request(invisible_s=5))
    assert ei.value.code == pb.Code.ILLEGAL_INVISIBLE_TIME and "invisible_duration" in ei.value.message


async def test_over_max_attempts_goes_to_dlq_and_is_acked(broker_and_pop) -> None:
    fake, pop = broker_and_pop
    frames = await _frames(pop, fake.server.address, _receive_request(), max_attempts=3)
    assert [f.message.body for f in frames if f.WhichOneof("content") == "message"] == [b"m1"]
    codes = [c for c, _ in fake.requests]
    assert codes == [RequestCode.POP_MESSAGE, RequestCode.CONSUMER_SEND_MSG_BACK, RequestCode.ACK_MESSAGE]
    back = fake.requests[1][1]
    assert (back["offset"], back["group"], back["delayLevel"], back["originTopic"]) == ("8192", "G", "-1", "T")
    ack = fake.requests[2][1]
    assert ack == {
        "consumerGroup": "G", "topic": "T", "queueId": "1", "extraInfo": f"7 {POP_TIME} 60000 2 0 broker-a 1 41",
        "offset": "41",
    }  # fmt: skip


async def test_ack_and_change_invisible_duration(broker_and_pop) -> None:
    fake, pop = broker_and_pop
    h = ReceiptHandle.decode(f"7 {POP_TIME} 60000 2 1 broker-a 0 40 4096")  # a revived message (retry v1)
    await pop.ack_handle("G", "T", h, fake.server.address, 3000)
    assert fake.requests[-1] == (
        RequestCode.ACK_MESSAGE,
        {"consumerGroup": "G", "topic": "%RETRY%G_T", "queueId": "0", "extraInfo": h.extra_info(), "offset": "40"},
    )
    new = await pop.change_invisible("G", "T", h, 5000, fake.server.address, 3000)
    code, ext = fake.requests[-1]
    assert code == RequestCode.CHANGE_MESSAGE_INVISIBLETIME and ext["invisibleTime"] == "5000"
    assert ext["topic"] == "%RETRY%G_T" and ext["extraInfo"] == h.extra_info()
    assert (new.pop_time, new.invisible_time, new.revive_qid) == (POP_TIME + 10, 5000, 3)
    assert (new.queue_offset, new.commit_log_offset, new.broker_name) == (40, 4096, "broker-a")


async def test_broker_without_pop_is_not_implemented() -> None:
    server = RemotingServer()  # serves no code at all
    await server.start()
    client = RemotingClient()
    try:
        with pytest.raises(ProxyError) as ei:
            await _frames(PopClient(MQClientAPI(client)), server.address, _receive_request())
        assert ei.value.code == pb.Code.NOT_IMPLEMENTED and "POP" in ei.value.message
    finally:
        await client.close()
        await server.stop()


async def test_auto_renew_keeps_a_handle_invisible_and_ack_uses_the_current_one(broker_and_pop) -> None:
    fake, pop = broker_and_pop
    clock = [POP_TIME]

    async def addr_of(topic: str, broker_name: str) -> str:
        assert (topic, broker_name) == ("T", "broker-a")
        return fake.server.address

    renewer = Renewer(pop, addr_of, 3000, clock=lambda: clock[0])
    held = f"7 {POP_TIME} 60000 2 0 broker-a 1 40 4096"
    renewer.track("c1", "G", "T", held)
    await renewer.renew_due()
    assert [c for c, _ in fake.requests] == []  # 60 s left: nothing to do
    clock[0] = POP_TIME + 51_000  # within 10 s of expiry
    await renewer.renew_due()
    code, ext = fake.requests[-1]
    assert code == RequestCode.CHANGE_MESSAGE_INVISIBLETIME and ext["invisibleTime"] == str(RENEW_STEPS_MS[0])
    assert ext["extraInfo"] == held.rsplit(" ", 1)[0]
    current = renewer.take("c1", "G", held)
    assert current is not None and current.pop_time == POP_TIME + 10 and current.invisible_time == RENEW_STEPS_MS[0]
    assert renewer.take("c1", "G", held) is None and len(renewer) == 0


async def test_a_client_that_goes_away_gets_its_messages_released(broker_and_pop) -> None:
    fake, pop = broker_and_pop

    async def addr_of(topic: str, broker_name: str) -> str:
        return fake.server.address

    renewer = Renewer(pop, addr_of, 3000, clock=lambda: POP_TIME + 1000)
    renewer.track("c1", "G", "T", f"7 {POP_TIME} 60000 2 0 broker-a 1 40 4096")
    renewer.track("c2", "G", "T", f"7 {POP_TIME} 60000 2 0 broker-a 1 41 8192")
    await renewer.release_client("c1")
    assert [(c, e["offset"], e["invisibleTime"]) for c, e in fake.requests] == [
        (RequestCode.CHANGE_MESSAGE_INVISIBLETIME, "40", "1000")
    ]
    assert len(renewer) == 1
