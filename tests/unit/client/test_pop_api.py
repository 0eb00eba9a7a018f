"""rmq.client.pop_api.popped_messages: the receipt handle (POP_CK) of each popped message,
built from a POP response as RocketMQ 5's MQClientAPIImpl.processPopResponse builds it."""

from __future__ import annotations

from rmq.client.pop_api import popped_messages
from rmq.protocol.codes import ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.message import encode_record, properties_to_string
from rmq.protocol.pop import PROPERTY_POP_CK, ExtraInfo, PopMessageResponseHeader, QueueInfo, build_queue_info

HOST = b"\x7f\x00\x00\x01\x00\x00\x27\x10"


def _record(topic: str, qid: int, qoff: int, props: dict[str, str], reconsume: int = 0) -> bytes:
    return encode_record(
        topic=topic.encode(),
        body=b"b",
        properties=properties_to_string(props).encode(),
        queue_id=qid,
        flag=0,
        queue_offset=qoff,
        physical_offset=1000 + qoff,
        sys_flag=0,
        born_timestamp=1,
        born_host=HOST,
        store_timestamp=2,
        store_host=HOST,
        reconsume_times=reconsume,
    )


def _response(queues: list[QueueInfo], body: bytes, revive_qid: int = 3) -> RemotingCommand:
    start, msgs, counts = build_queue_info(queues)
    resp = RemotingCommand(ResponseCode.SUCCESS)
    resp.ext_fields = PopMessageResponseHeader(5000, 60000, revive_qid, 0, start, msgs, counts or None).to_ext_fields()
    resp.body = body
    return resp


def test_normal_messages_get_their_handle_from_the_offset_info() -> None:
    retried = ExtraInfo.build(7, 4000, 60000, 3, "%RETRY%g_T", "b", 0, 9).encode()
    body = (
        _record("T", 1, 10, {"TAGS": "a"})
        + _record("T", 1, 12, {"TAGS": "a"})
        + _record("T", 0, 9, {PROPERTY_POP_CK: retried}, 1)
    )
    msgs = popped_messages("b", _response([QueueInfo("T", 1, 10, (10, 12))], body), order=False)
    assert [m.properties[PROPERTY_POP_CK] for m in msgs] == [
        "10 5000 60000 3 0 b 1 10",
        "10 5000 60000 3 0 b 1 12",
        retried,  # set by the broker for a retried message: kept
    ]


def test_orderly_pop_takes_the_consumed_count_as_reconsume_times() -> None:
    body = _record("T", 2, 5, {}) + _record("T", 2, 6, {})
    resp = _response([QueueInfo("T", 2, 5, (5, 6), {5: 2})], body, revive_qid=999)
    msgs = popped_messages("b", resp, order=True)
    assert [m.reconsume_times for m in msgs] == [2, 0]
    assert ExtraInfo.parse(msgs[0].properties[PROPERTY_POP_CK]).is_order
