"""Topic attributes (RocketMQ 5's ``TopicAttributes`` / ``AttributeUtil``), pure.

UPDATE_AND_CREATE_TOPIC carries them as one header string, ``+key=value`` to set and
``-key`` to remove, comma separated (``mqadmin updateTopic -a +message.type=FIFO``). rmq
knows the one a 5.x client's behaviour depends on: ``message.type`` (which message types
the proxy's route offers, and which sends it takes). A topic without it accepts every
type (issue 16; RocketMQ 5 reads a missing attribute as NORMAL).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = ["MESSAGE_TYPE", "MESSAGE_TYPES", "TopicAttributeError", "alter_attributes", "parse_attribute_changes"]

MESSAGE_TYPE: Final = "message.type"
MESSAGE_TYPES: Final = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")
# key -> the values it takes
_SUPPORTED: Final[Mapping[str, tuple[str, ...]]] = {MESSAGE_TYPE: MESSAGE_TYPES}


class TopicAttributeError(ValueError):
    """A change refused; the text names the attribute."""


def parse_attribute_changes(text: str | None) -> dict[str, str | None]:
    """``+k=v,-k2`` -> {k: v, k2: None} (None: remove). Empty or None: no change."""
    changes: dict[str, str | None] = {}
    if not text or not text.strip():
        return changes
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        sign, rest = item[0], item[1:]
        if sign == "+":
            key, eq, value = rest.partition("=")
            if not eq or not key or not value:
                raise TopicAttributeError(f"attributes: {item!r} is not +key=value")
        elif sign == "-":
            key, value = rest, ""
            if not key or "=" in key:
                raise TopicAttributeError(f"attributes: {item!r} is not -key")
        else:
            raise TopicAttributeError(f"attributes: {item!r} must start with + (set) or - (remove)")
        if key in changes:
            raise TopicAttributeError(f"attributes: {key} given twice")
        changes[key] = value if sign == "+" else None
    return changes


def alter_attributes(
    create: bool, current: Mapping[str, str] | None, changes: Mapping[str, str | None]
) -> dict[str, str] | None:
    """The topic's attributes after ``changes`` (AttributeUtil.alterCurrentAttributes):
    unknown keys and values refused, removal refused when creating; no change keeps the
    current ones. None: the topic has none (stored and sent as 4.9.8 does, without them)."""
    out = dict(current or {})
    for key, value in changes.items():
        allowed = _SUPPORTED.get(key)
        if allowed is None:
            raise TopicAttributeError(f"attributes: unsupported key {key} (supported: {', '.join(_SUPPORTED)})")
        if value is None:
            if create:
                raise TopicAttributeError(f"attributes: -{key} when creating the topic: only + is allowed")
            out.pop(key, None)
            continue
        value = value.upper()
        if value not in allowed:
            raise TopicAttributeError(f"attributes: {key}={value} is not one of {', '.join(allowed)}")
        out[key] = value
    return out or None
