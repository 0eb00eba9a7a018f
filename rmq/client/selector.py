"""Message queue selectors for ``Producer.send(msg, selector=..., arg=...)``.

A selector is ``fn(mqs, msg, arg) -> MessageQueue`` (Java ``MessageQueueSelector``):
``mqs`` are the topic's writable queues in route order. Sending every message of one
business key through the same queue is what ordered consumption relies on.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Sequence
from typing import Any

from rmq.client.message import Message
from rmq.protocol.bodies import MessageQueue
from rmq.protocol.message import java_hash

__all__ = ["MessageQueueSelector", "select_by_hash", "select_by_random", "java_hash_code"]

MessageQueueSelector = Callable[[Sequence[MessageQueue], Message, Any], MessageQueue]


def _int32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - 0x100000000 if v & 0x80000000 else v


def java_hash_code(arg: Any) -> int:
    """``arg.hashCode()`` as Java computes it for the common key types.

    str -> String.hashCode; bool -> Boolean.hashCode; int -> Integer.hashCode when it
    fits 32 bits, else Long.hashCode; float -> Double.hashCode; bytes -> Arrays.hashCode.
    Anything else falls back to Python's ``hash`` (stable only within one process).
    """
    if isinstance(arg, str):
        return java_hash(arg)
    if isinstance(arg, bool):
        return 1231 if arg else 1237
    if isinstance(arg, int):
        if -(1 << 31) <= arg < (1 << 31):
            return arg
        v = arg & 0xFFFFFFFFFFFFFFFF
        return _int32(v ^ (v >> 32))
    if isinstance(arg, float):
        (bits,) = struct.unpack(">q", struct.pack(">d", arg))
        v = bits & 0xFFFFFFFFFFFFFFFF
        return _int32(v ^ (v >> 32))
    if isinstance(arg, (bytes, bytearray)):
        h = 1
        for b in arg:
            h = (31 * h + (b - 256 if b > 127 else b)) & 0xFFFFFFFF
        return _int32(h)
    return _int32(hash(arg))


def select_by_hash(mqs: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    """SelectMessageQueueByHash: ``|arg.hashCode() % n|``."""
    if not mqs:
        raise ValueError("no message queue to select from")
    return mqs[abs(java_hash_code(arg)) % len(mqs)]


def select_by_random(mqs: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    """SelectMessageQueueByRandom."""
    if not mqs:
        raise ValueError("no message queue to select from")
    return mqs[random.randrange(len(mqs))]
