"""Fast paths of the frame codecs (cached Java key order, remembered extFields layouts)
give exactly what the general paths give."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq.protocol import frame
from rmq.protocol.codes import SerializeType
from rmq.protocol.errors import ProtocolError
from rmq.protocol.frame import RemotingCommand, decode_frame, encode

_KNOWN = sorted(frame._BIN_KEY)
_values = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)


def _general(ext: dict[str, str], st_: int) -> bytes:
    """The same command encoded with the fast path switched off."""
    saved = frame._fast_order
    frame._fast_order = lambda ext, for_json: None  # type: ignore[assignment]
    try:
        return encode(RemotingCommand(code=0, opaque=7, ext_fields=ext, serialize_type=st_))
    finally:
        frame._fast_order = saved


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(_KNOWN), _values, min_size=1, max_size=12), st.booleans())
def test_cached_order_encodes_like_the_general_path(ext: dict[str, str], binary: bool) -> None:
    st_ = SerializeType.ROCKETMQ if binary else SerializeType.JSON
    cmd = RemotingCommand(code=0, opaque=7, ext_fields=ext, serialize_type=st_)
    first = encode(cmd)  # fills the cache
    assert encode(cmd) == first == _general(ext, st_)
    assert decode_frame(first).ext_fields == ext


def test_same_keys_in_another_insertion_order_get_their_own_order() -> None:
    a = {"msgId": "m", "queueId": "1", "queueOffset": "2"}
    b = dict(reversed(list(a.items())))
    for ext in (a, b, a):
        for st_ in (SerializeType.ROCKETMQ, SerializeType.JSON):
            assert encode(RemotingCommand(code=0, opaque=7, ext_fields=ext, serialize_type=st_)) == _general(ext, st_)


# --- the remembered extFields layouts of the ROCKETMQ header decoder ---------------
_ext_entries = st.lists(
    st.tuples(st.binary(max_size=6), st.binary(max_size=9)).map(
        lambda kv: (kv[0].decode("latin-1").encode(), kv[1].decode("latin-1").encode())
    ),
    max_size=8,
)


def _block(entries: list[tuple[bytes, bytes]]) -> bytes:
    return b"".join(len(k).to_bytes(2, "big") + k + len(v).to_bytes(4, "big", signed=True) + v for k, v in entries)


@settings(max_examples=400, deadline=None)
@given(_ext_entries, _ext_entries)
def test_remembered_layout_decodes_like_the_loop(a: list[tuple[bytes, bytes]], b: list[tuple[bytes, bytes]]) -> None:
    frame._EXT_SHAPES.clear()
    for entries in (a, b, a, b):
        raw = _block(entries)
        expected = frame._decode_ext_entries(raw)
        assert frame._decode_ext_block(raw) == expected
        assert list(frame._decode_ext_block(raw) or ()) == list(expected or ())  # same key order


def test_a_block_of_a_remembered_size_with_other_lengths_is_parsed_afresh() -> None:
    frame._EXT_SHAPES.clear()
    one = _block([(b"a", b"xy"), (b"b", b"z")])
    other = _block([(b"a", b"x"), (b"b", b"yz")])
    assert len(one) == len(other)
    assert frame._decode_ext_block(one) == {"a": "xy", "b": "z"}
    assert frame._decode_ext_block(other) == {"a": "x", "b": "yz"}
    assert frame._decode_ext_block(one) == {"a": "xy", "b": "z"}


def test_bad_utf8_in_a_remembered_layout_raises_the_loops_error() -> None:
    frame._EXT_SHAPES.clear()
    good = _block([(b"k", b"ab")])
    bad = _block([(b"k", b"\xff\xfe")])
    frame._decode_ext_block(good)
    with pytest.raises(ProtocolError, match="ext field is not valid UTF-8"):
        frame._decode_ext_block(bad)
