"""Stored message records for the client unit tests: what a pull brings back."""

from __future__ import annotations

from rmq.protocol.message import MessageExt, decode_record, encode_record, pack_host, properties_to_string


def record(
    offset: int,
    body: bytes = b"x",
    props: dict | None = None,
    topic: str = "T",
    reconsume_times: int = 0,
    *,
    queue_id: int = 0,
    physical_offset: int | None = None,
    sys_flag: int = 0,
) -> bytes:
    """One record at queue ``offset`` (CommitLog offset ``offset * 100`` unless given)."""
    return encode_record(
        topic=topic.encode(),
        body=body,
        properties=properties_to_string(props or {}).encode(),
        queue_id=queue_id,
        flag=0,
        queue_offset=offset,
        physical_offset=offset * 100 if physical_offset is None else physical_offset,
        sys_flag=sys_flag,
        born_timestamp=1,
        born_host=pack_host("127.0.0.1", 1),
        store_timestamp=2,
        store_host=pack_host("127.0.0.1", 2),
        reconsume_times=reconsume_times,
    )


def ext(
    offset: int, body: bytes = b"x", props: dict | None = None, topic: str = "T", reconsume_times: int = 0
) -> MessageExt:
    return decode_record(record(offset, body, props, topic, reconsume_times))
