"""Queue selectors: Java hashCode of the key, modulo the queue count."""

from __future__ import annotations

from collections import Counter

import pytest

from rmq.client.message import Message
from rmq.client.selector import java_hash_code, select_by_hash, select_by_random
from rmq.protocol.bodies import MessageQueue

MQS = [MessageQueue("T", "b", i) for i in range(8)]
MSG = Message("T", b"x")


@pytest.mark.parametrize(
    "arg,expected",
    [
        ("abc", 96354),  # "abc".hashCode()
        ("", 0),
        ("order-42", "order-42"),  # computed below
        (7, 7),
        (-7, -7),
        (True, 1231),
        (False, 1237),
        (1 << 40, 256),  # Long.hashCode(2^40) = (int)(v ^ v >>> 32)
        (-1, -1),
        (b"\x01\x02", 994),  # Arrays.hashCode(byte[]{1,2}) = (31+1)*31+2
    ],
)
def test_java_hash_code(arg, expected):
    if expected == "order-42":
        h = 0
        for ch in arg:
            h = (31 * h + ord(ch)) & 0xFFFFFFFF
        expected = h - (1 << 32) if h >= 1 << 31 else h
    assert java_hash_code(arg) == expected


def test_long_hash_of_negative_long():
    # Long.hashCode(-(2^40)) = (int)(v ^ (v >>> 32))
    v = (-(1 << 40)) & 0xFFFFFFFFFFFFFFFF
    h = (v ^ (v >> 32)) & 0xFFFFFFFF
    assert java_hash_code(-(1 << 40)) == (h - (1 << 32) if h >= 1 << 31 else h)


def test_select_by_hash_is_stable_and_java_like():
    for key in ("a", "order-1", "order-2", 12345, -99):
        q = select_by_hash(MQS, MSG, key)
        assert q == select_by_hash(list(MQS), MSG, key)
        assert q.queue_id == abs(java_hash_code(key) % 8 if java_hash_code(key) >= 0 else -((-java_hash_code(key)) % 8))
    assert select_by_hash(MQS, MSG, "abc").queue_id == 96354 % 8


def test_select_by_hash_spreads_keys():
    c = Counter(select_by_hash(MQS, MSG, f"order-{i}").queue_id for i in range(800))
    assert len(c) == 8 and min(c.values()) > 50


def test_select_by_random_and_empty():
    assert select_by_random(MQS, MSG, None) in MQS
    with pytest.raises(ValueError):
        select_by_hash([], MSG, "k")
    with pytest.raises(ValueError):
        select_by_random([], MSG, "k")
