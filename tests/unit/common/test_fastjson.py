"""rmq.common.fastjson: the dialect on its own (no protocol types), and the one escape
table the frame codec and the bodies share."""

from __future__ import annotations

import json

import pytest

from rmq.common import fastjson
from rmq.common.fastjson import FastjsonError


def test_reader_raises_its_own_value_error() -> None:
    with pytest.raises(FastjsonError) as e:
        fastjson.loads(b"{0:")
    assert isinstance(e.value, ValueError)
    with pytest.raises(FastjsonError):
        fastjson.loads(b"\xff")
    with pytest.raises(FastjsonError):
        fastjson.loads_object_keyed_map(b'{"offsetTable":{1:2}}', "offsetTable")


def test_bare_int_keys_both_ways() -> None:
    assert fastjson.dumps({1: "a", 0: {2: True}}) == b'{0:{2:true},1:"a"}'
    assert fastjson.dumps({1: "a"}, standard=True) == b'{"1":"a"}'
    assert fastjson.loads(b'{0:{2:true},1:"a"}') == {"0": {"2": True}, "1": "a"}


def test_nulls_are_left_out_and_keys_sorted() -> None:
    assert fastjson.dumps({"b": None, "a": [None, 1], "c": {"x": None}}) == b'{"a":[null,1],"c":{}}'


@pytest.mark.parametrize("ch", [chr(c) for c in range(0, 0xA0)] + ["\u2028", "\u2029", "é", "/"])
def test_quote_is_the_escape_table(ch: str) -> None:
    # the C-encoder fast path and the table agree on every character
    assert fastjson.quote(ch) == '"' + ch.translate(fastjson.LEGACY_ESCAPES) + '"'
    assert json.loads(fastjson.quote(ch)) == ch
    std = fastjson.quote_standard(ch)
    assert std.isascii() and json.loads(std) == ch


def test_frame_codec_uses_the_common_table() -> None:
    from rmq.protocol import frame

    assert frame._json_str is fastjson.quote
    assert frame._FASTJSON_ONLY is fastjson.FASTJSON_ONLY


def test_type_names() -> None:
    assert [fastjson.type_name(v) for v in ({}, [], "", True, 1, 1.5, None, b"")] == [
        "an object",
        "an array",
        "a string",
        "a boolean",
        "a number",
        "a number",
        "null",
        "a bytes",
    ]
