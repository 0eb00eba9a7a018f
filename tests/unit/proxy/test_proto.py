"""rmq's rocketmq_v2.proto: the committed descriptor set matches the .proto, the field numbers
the 5.x clients depend on are right, and our descriptors stay out of protobuf's default pool."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool

from rmq.proxy import pb
from rmq.proxy.proto import DESCRIPTOR_SET_FILE, PROTO_NAME
from rmq.proxy.proto.compile import compile_descriptor_set


def _file(path: Path) -> descriptor_pb2.FileDescriptorProto:
    fds = descriptor_pb2.FileDescriptorSet.FromString(path.read_bytes())
    (f,) = [f for f in fds.file if f.name == PROTO_NAME]
    f.ClearField("source_code_info")
    return f


def test_committed_descriptor_set_matches_the_proto(tmp_path: Path) -> None:
    out = tmp_path / "fresh.binpb"
    compile_descriptor_set(out)
    assert _file(out) == _file(DESCRIPTOR_SET_FILE), "run: python -m rmq.proxy.proto.compile"


def _numbers(name: str) -> dict[str, int]:
    d = pb.pool().FindMessageTypeByName(f"apache.rocketmq.v2.{name}")
    return {f.name: f.number for f in d.fields}


def test_wire_numbers_of_rocketmq_apis_v2_1_2() -> None:
    assert _numbers("SystemProperties") == {
        "tag": 1, "keys": 2, "message_id": 3, "body_digest": 4, "body_encoding": 5, "message_type": 6,
        "born_timestamp": 7, "born_host": 8, "store_timestamp": 9, "store_host": 10, "delivery_timestamp": 11,
        "receipt_handle": 12, "queue_id": 13, "queue_offset": 14, "invisible_duration": 15,
        "delivery_attempt": 16, "message_group": 17, "trace_context": 18,
        "orphaned_transaction_recovery_duration": 19, "dead_letter_queue": 20, "lite_topic": 21, "priority": 22,
    }  # fmt: skip
    assert _numbers("Settings") == {
        "client_type": 1, "access_point": 2, "backoff_policy": 3, "request_timeout": 4, "publishing": 5,
        "subscription": 6, "user_agent": 7, "metric": 8,
    }  # fmt: skip
    assert _numbers("TelemetryCommand")["recover_orphaned_transaction_command"] == 5
    assert _numbers("ReceiveMessageRequest")["attempt_id"] == 8
    assert _numbers("ChangeInvisibleDurationRequest")["suspend"] == 7
    assert pb.Code.MESSAGE_NOT_FOUND == 40401 and pb.Code.MESSAGE_BODY_EMPTY == 41302
    svc = pb.pool().FindServiceByName(pb.SERVICE)
    assert [m.name for m in svc.methods] == [
        "QueryRoute", "Heartbeat", "SendMessage", "QueryAssignment", "ReceiveMessage", "AckMessage",
        "ForwardMessageToDeadLetterQueue", "PullMessage", "UpdateOffset", "GetOffset", "QueryOffset",
        "EndTransaction", "Telemetry", "NotifyClientTermination", "ChangeInvisibleDuration", "RecallMessage",
        "SyncLiteSubscription",
    ]  # fmt: skip


def test_private_pool_leaves_the_default_pool_free() -> None:
    pb.msg("Message")
    default = descriptor_pool.Default()
    try:
        default.FindMessageTypeByName("apache.rocketmq.v2.Message")
    except KeyError:
        return
    raise AssertionError("apache.rocketmq.v2.Message is in the default pool: a 5.x client's modules would clash")
