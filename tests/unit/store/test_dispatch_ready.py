"""The DispatchRequests the put path hands to dispatch equal what parsing the record gives.

On a master, ReputMessageService takes each record's DispatchRequest from the put path
(CommitLog.dispatch_ready) instead of parsing the record back from the file. Both must
be exactly the same as `check_message_and_return_size` on the stored bytes, and as a
reference built from the full record decoder (`decode_record`, `string_to_properties`):
random messages with delays (incl. clamped and malformed levels), transactions,
non-ASCII and separator-laden properties, batches, IPv6 hosts.
"""

from __future__ import annotations

import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq.protocol.message import (
    SCHEDULE_TOPIC,
    BatchItem,
    MessageExtBatch,
    MessageExtBrokerInner,
    decode_record,
    java_hash,
    pack_host,
    string_to_properties,
)
from rmq.protocol.record import (
    DispatchRequest,
    check_message_and_return_size,
    compute_deliver_timestamp,
    dispatch_properties,
    property_value,
)
from rmq.store.commitlog import CommitLog
from rmq.store.results import PutMessageStatus

LEVELS = [1000, 5000, 10000]
FILE_SIZE = 64 * 1024

# Characters that matter to the properties format, plus non-ASCII and 4-byte UTF-8.
_ALPHABET = st.sampled_from(list("TAGSKEYUNIQ_DLx \x01\x02") + ["é", "日", "本", "\U0001f600", "-"])
_text = st.text(_ALPHABET, max_size=12)
_names = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "WAIT", "X", "TAGSX", "XTAGS", ""])
_delay = st.one_of(st.integers(-2, 6).map(str), st.sampled_from(["", " 2", "+1", "x", "1_0", "٣"]))


@st.composite
def properties_strings(draw) -> str:
    """Either a well-formed name/value string or arbitrary segments (the parser's rules
    decide; both paths must agree with it)."""
    if draw(st.booleans()):
        parts = []
        for name in draw(st.lists(_names, max_size=6)):
            value = draw(_delay) if name == "DELAY" else draw(_text)
            parts.append(f"{name}\x01{value}\x02")
        return "".join(parts)
    return draw(st.text(_ALPHABET, max_size=40))


_hosts = st.sampled_from(
    [pack_host("127.0.0.1", 1), pack_host("10.1.2.3", 65535), pack_host("::1", 10911), pack_host("fe80::1:2", 7)]
)
_tran = st.sampled_from([0x0, 0x4, 0x8, 0xC])
_topics = st.sampled_from(["TopicA", "T", "%RETRY%g", "a|b", "x" * 127])


@st.composite
def single_messages(draw) -> MessageExtBrokerInner:
    props_s = draw(properties_strings())
    m = MessageExtBrokerInner(
        topic=draw(_topics),
        body=draw(st.binary(max_size=300)),
        queue_id=draw(st.integers(0, 3)),
        flag=draw(st.integers(-(2**31), 2**31 - 1)),
        properties=string_to_properties(props_s),
        properties_string=props_s,
        sys_flag=draw(_tran) | draw(st.sampled_from([0, 1, 2, 0x30])),
        born_timestamp=draw(st.integers(0, 2**41)),
        born_host=draw(_hosts),
        store_host=draw(_hosts),
        reconsume_times=draw(st.integers(0, 16)),
        prepared_transaction_offset=draw(st.integers(0, 2**40)),
    )
    if draw(st.booleans()):
        # a delayed message: rewritten to SCHEDULE_TOPIC_XXXX (levels above 3 are clamped)
        m.properties["DELAY"] = draw(_delay)
        m.properties_string = None
    if draw(st.booleans()):
        m.properties_string = None  # the store encodes the dict
    return m


@st.composite
def batches(draw) -> MessageExtBatch:
    items = [
        BatchItem(draw(st.integers(0, 5)), draw(st.binary(max_size=200)), draw(properties_strings()))
        for _ in range(draw(st.integers(1, 5)))
    ]
    bprops = draw(st.dictionaries(st.sampled_from(["CLUSTER", "TAGS", "KEYS", "Y"]), _text, max_size=3))
    return MessageExtBatch(
        topic=draw(_topics),
        items=items,
        queue_id=draw(st.integers(0, 3)),
        born_timestamp=draw(st.integers(0, 2**41)),
        born_host=draw(_hosts),
        store_host=draw(_hosts),
        properties=bprops,
    )


def reference(raw: bytes) -> DispatchRequest:
    """What dispatch must produce, from the full decoder (RocketMQ's checkMessageAndReturnSize)."""
    m = decode_record(raw, check_crc=True)
    props = m.properties
    tags = props.get("TAGS")
    tags_code = java_hash(tags) if tags else 0
    if m.topic == SCHEDULE_TOPIC and props.get("DELAY") is not None:
        try:
            level = int(props["DELAY"])
        except ValueError:
            level = 0
        level = min(level, len(LEVELS))
        if level > 0:
            tags_code = compute_deliver_timestamp(level, m.store_timestamp, LEVELS)
    return DispatchRequest(
        m.topic,
        m.queue_id,
        m.commit_log_offset,
        m.store_size,
        tags_code,
        m.store_timestamp,
        m.queue_offset,
        props.get("KEYS"),
        props.get("UNIQ_KEY"),
        m.sys_flag,
        m.prepared_transaction_offset,
    )


def parsed(cl: CommitLog, req: DispatchRequest) -> tuple[DispatchRequest | None, bytes]:
    mf = cl.mfq.find_mapped_file_by_offset(req.commit_log_offset)
    pos = req.commit_log_offset - mf.file_from_offset
    size, got = check_message_and_return_size(mf.mm, pos, True, LEVELS)
    assert size == req.msg_size
    return got, bytes(mf.mm[pos : pos + size])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(single_messages(), batches()), min_size=1, max_size=12))
def test_ready_request_equals_parsed_record(puts) -> None:
    with tempfile.TemporaryDirectory() as d:
        cl = CommitLog(d, FILE_SIZE, 32 * 1024, LEVELS)  # no loop: every append commits
        now = 1_700_000_000_000
        appended = 0
        for i, p in enumerate(puts):
            if isinstance(p, MessageExtBatch):
                r = cl.put_messages(p, now + i)
            else:
                r = cl.put_message(p, now + i)
            if r.status is PutMessageStatus.PUT_OK:
                appended += r.msg_num
            else:
                assert r.status is PutMessageStatus.MESSAGE_ILLEGAL
        ready = list(cl.dispatch_ready)
        assert len(ready) == appended
        assert cl.uncommitted_bytes == 0
        for req in ready:
            got, raw = parsed(cl, req)
            assert got == req
            assert reference(raw) == req
        cl.shutdown()


@settings(max_examples=1000)
@given(
    st.text(st.sampled_from(list("TAGSKEYUNIQ_\x01\x02xé")), max_size=40),
    st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "A", "AG"]),
)
def test_property_value_is_string_to_properties_get(s: str, name: str) -> None:
    d = string_to_properties(s)
    assert property_value(s, name) == d.get(name)
    assert dispatch_properties(s) == (d.get("TAGS"), d.get("KEYS"), d.get("UNIQ_KEY"))


def test_property_value_examples() -> None:
    s = "TAGS\x01a\x02XTAGS\x01b\x02KEYS\x01k1 k2\x02TAGS\x01\x02"
    assert property_value(s, "TAGS") == "a"  # an empty value does not count
    assert property_value(s, "KEYS") == "k1 k2"
    assert property_value("TAGS\x01x\x01y", "TAGS") == "x\x01y"  # no final separator
    assert property_value("\x02\x02TAGS\x01z\x02TAGS\x01w", "TAGS") == "w"
    assert property_value("", "TAGS") is None
    # the last occurrence does not start a segment / has no value: an earlier one wins
    for s in (
        "TAGS\x01a\x02XTAGS\x01b",
        "TAGS\x01abcXTAGS\x01",
        "TAGS\x01a\x02TAGS\x01",
        "UNIQ_KEY\x01u\x02KEYS\x01k\x02XUNIQ_KEY\x01v\x02KEYS\x01",
    ):
        d = string_to_properties(s)
        assert dispatch_properties(s) == (d.get("TAGS"), d.get("KEYS"), d.get("UNIQ_KEY")), s
    assert dispatch_properties("TAGS\x01abcXTAGS\x01")[0] == "abcXTAGS\x01"
