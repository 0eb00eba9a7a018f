"""The cached Java key order of the encoders gives the bytes the general path gives."""

from hypothesis import given, settings
from hypothesis import strategies as st

from rmq.protocol import frame
from rmq.protocol.codes import SerializeType
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
