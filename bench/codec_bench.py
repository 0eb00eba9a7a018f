"""Micro-benchmark of the remoting codecs on the produce hot path.

Run: ``.venv/bin/python bench/codec_bench.py [--quick]``

Prints microseconds per operation (best of several repeats) for a typical
SEND_MESSAGE_V2 request (Java client shape: properties with UNIQ_KEY/WAIT/TAGS/KEYS,
128-byte body, the benchmark tool's default size) and its SendMessageResponse, in
both header encodings, plus the header conversions the broker does per message.
"""

from __future__ import annotations

import argparse
import os
import sys
import timeit

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from rmq.protocol.codes import RemotingFlag, RequestCode, ResponseCode, SerializeType
from rmq.protocol.frame import FrameDecoder, RemotingCommand, encode, encode_parts
from rmq.protocol.headers import SendMessageRequestHeader, SendMessageResponseHeader

JSON, BIN = SerializeType.JSON, SerializeType.ROCKETMQ


def sample_request(st: int) -> RemotingCommand:
    header = SendMessageRequestHeader(
        producer_group="please_rename_unique_group_name",
        topic="BenchmarkTest",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=3,
        sys_flag=0,
        born_timestamp=1700000000123,
        flag=0,
        properties="KEYS\x01key-000042\x02UNIQ_KEY\x017F0000010A2418B4AAC25C8F4D2A0000\x02"
        "WAIT\x01true\x02TAGS\x01TagA\x02",
        reconsume_times=0,
    )
    return RemotingCommand(
        RequestCode.SEND_MESSAGE_V2,
        opaque=123456,
        ext_fields=header.to_v2_ext_fields(),
        body=b"x" * 128,
        serialize_type=st,
    )


def sample_response(st: int) -> RemotingCommand:
    header = SendMessageResponseHeader(
        msg_id="7F00000100002A9F0000000000A1B2C3",
        queue_id=3,
        queue_offset=1234567,
        transaction_id="7F0000010A2418B4AAC25C8F4D2A0000",
    )
    ext = header.to_ext_fields()
    ext["MSG_REGION"] = "DefaultRegion"
    ext["TRACE_ON"] = "true"
    return RemotingCommand(
        ResponseCode.SUCCESS, opaque=123456, flag=RemotingFlag.RESPONSE, ext_fields=ext, serialize_type=st
    )


def per_op_us(fn, number: int, repeat: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def frame_rows(
    what: str, name: str, cmd: RemotingCommand, number: int, repeat: int, pipelined: bool = False
) -> list[tuple[str, float, str]]:
    """Decode and encode rows for one command in one serialize type (name)."""
    frame = encode(cmd)
    # feed() of one whole frame (fresh decoder each time is the worst case:
    # allocation included); then pipelined: 100 frames in one read.
    rows = [
        (
            f"{what} decode, 1 frame/feed ({name})" if pipelined else f"{what} decode ({name})",
            per_op_us(lambda: FrameDecoder().feed(frame), number, repeat),
            f"{len(frame)} B",
        )
    ]
    if pipelined:
        hundred = frame * 100
        rows.append(
            (
                f"{what} decode, 100 frames/feed ({name}) per frame",
                per_op_us(lambda: FrameDecoder().feed(hundred), number // 100 or 1, repeat) / 100,
                "",
            )
        )
    rows.append((f"{what} encode ({name})", per_op_us(lambda: encode(cmd), number, repeat), ""))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations")
    args = ap.parse_args()
    number, repeat = (2000, 3) if args.quick else (20000, 5)

    rows: list[tuple[str, float, str]] = []

    for st, name in ((JSON, "JSON"), (BIN, "ROCKETMQ")):
        rows += frame_rows("SEND_MESSAGE_V2", name, sample_request(st), number, repeat, pipelined=True)
    for st, name in ((JSON, "JSON"), (BIN, "ROCKETMQ")):
        rows += frame_rows("SendMessageResponse", name, sample_response(st), number, repeat)

    ext_v2 = sample_request(JSON).ext_fields
    v1 = SendMessageRequestHeader.from_v2_ext_fields(ext_v2)
    rows.append(
        (
            "V2 ext fields -> V1 header (from_v2_ext_fields)",
            per_op_us(lambda: SendMessageRequestHeader.from_v2_ext_fields(ext_v2), number, repeat),
            "",
        )
    )
    rows.append(("V1 header -> V2 ext fields (to_v2_ext_fields)", per_op_us(v1.to_v2_ext_fields, number, repeat), ""))
    resp_header = SendMessageResponseHeader(
        "7F00000100002A9F0000000000A1B2C3", 3, 1234567, "7F0000010A2418B4AAC25C8F4D2A0000"
    )
    resp_ext = resp_header.to_ext_fields()
    rows.append(("SendMessageResponseHeader.to_ext_fields", per_op_us(resp_header.to_ext_fields, number, repeat), ""))
    rows.append(
        (
            "SendMessageResponseHeader.from_ext_fields",
            per_op_us(lambda: SendMessageResponseHeader.from_ext_fields(resp_ext), number, repeat),
            "",
        )
    )

    pull = RemotingCommand(
        ResponseCode.SUCCESS,
        opaque=7,
        flag=RemotingFlag.RESPONSE,
        ext_fields={"suggestWhichBrokerId": "0", "nextBeginOffset": "1032", "minOffset": "0", "maxOffset": "99999"},
        body=memoryview(bytes(256 * 1024)),
    )
    rows.append(
        (
            "pull response encode_parts, 256 KiB body (no copy)",
            per_op_us(lambda: encode_parts(pull), number, repeat),
            "",
        )
    )

    width = max(len(r[0]) for r in rows)
    print(f"{'operation':<{width}}  {'us/op':>8}  note")
    print(f"{'-' * width}  {'-' * 8}  ----")
    for label, us, note in rows:
        print(f"{label:<{width}}  {us:8.2f}  {note}")
    print(f"\npython {sys.version.split()[0]}, {number} iterations x best of {repeat}")


if __name__ == "__main__":
    main()
