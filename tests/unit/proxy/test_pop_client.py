"""POP request headers (RocketMQ 5's wire names) and the receipt handle, without a broker."""

from __future__ import annotations

import pytest

from rmq.proxy import pb
from rmq.proxy.convert import ProxyError
from rmq.proxy.pop_client import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    PopMessageRequestHeader,
    ReceiptHandle,
)

POP_CK = "100 1700000000000 60000 3 0 broker-a 2 17"


def test_header_wire_names() -> None:
    pop = PopMessageRequestHeader("G", "T", -1, 32, 60000, 20000, 1700000000000, 1, "TAG", "*", False, None)
    assert pop.to_ext_fields() == {
        "consumerGroup": "G", "topic": "T", "queueId": "-1", "maxMsgNums": "32", "invisibleTime": "60000",
        "pollTime": "20000", "bornTime": "1700000000000", "initMode": "1", "expType": "TAG", "exp": "*",
        "order": "false",
    }  # fmt: skip
    assert AckMessageRequestHeader("G", "T", 2, POP_CK, 17).to_ext_fields() == {
        "consumerGroup": "G", "topic": "T", "queueId": "2", "extraInfo": POP_CK, "offset": "17",
    }  # fmt: skip
    assert ChangeInvisibleTimeRequestHeader("G", "T", 2, POP_CK, 17, 5000).to_ext_fields()["invisibleTime"] == "5000"


def test_receipt_handle() -> None:
    h = ReceiptHandle.from_pop_ck(POP_CK, 4096)
    assert (h.broker_name, h.queue_id, h.queue_offset, h.commit_log_offset) == ("broker-a", 2, 17, 4096)
    assert h.encode() == POP_CK + " 4096" and h.extra_info() == POP_CK
    assert ReceiptHandle.decode(h.encode()) == h
    assert not h.is_expired(1700000000000 + 59999) and h.is_expired(1700000000000 + 60000)
    assert h.real_topic("T", "G") == "T"
    retry = ReceiptHandle.decode("100 1 2 3 1 b 0 5 6")
    assert retry.real_topic("T", "G") == "%RETRY%G_T"
    assert ReceiptHandle.decode("100 1 2 3 2 b 0 5 6").real_topic("T", "G") == "%RETRY%G+T"
    new = h.renewed(1700000001000, 5000, 4)
    assert (new.pop_time, new.invisible_time, new.revive_qid, new.queue_offset) == (1700000001000, 5000, 4, 17)


@pytest.mark.parametrize("text", ["", "garbage", "1 2 3 4 0 b x 5 6", "1 2 3"])
def test_bad_receipt_handle(text: str) -> None:
    with pytest.raises(ProxyError) as ei:
        ReceiptHandle.decode(text)
    assert ei.value.code == pb.Code.INVALID_RECEIPT_HANDLE and "receipt_handle" in ei.value.message
