"""Message filters the read path applies (tag filtering by ConsumeQueue tag code)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from rmq.protocol.message import java_hash


class MessageFilter(Protocol):
    def is_matched_by_consume_queue(self, tags_code: int) -> bool: ...

    def is_matched_by_commit_log(self, record: bytes) -> bool: ...


class TagsMessageFilter:
    """`*` (None) matches everything; otherwise the unit's tag code must be one of the
    subscription's tag hashes. Hash collisions pass here; the client re-checks the
    tag string, as RocketMQ's does."""

    __slots__ = ("codes",)

    def __init__(self, codes: Iterable[int] | None) -> None:
        self.codes = None if codes is None else frozenset(codes)

    @classmethod
    def from_tags(cls, tags: Iterable[str] | None) -> TagsMessageFilter:
        return cls(None if tags is None else (java_hash(t) for t in tags))

    @classmethod
    def from_expression(cls, expression: str | None) -> TagsMessageFilter:
        """`*`, empty or None -> everything; else `a || b || c` (FilterAPI rules)."""
        if expression is None or expression.strip() in ("", "*"):
            return cls(None)
        tags = [t.strip() for t in expression.split("||")]
        return cls.from_tags(t for t in tags if t)

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        return self.codes is None or tags_code in self.codes

    def is_matched_by_commit_log(self, record: bytes) -> bool:
        return True
