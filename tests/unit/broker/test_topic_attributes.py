"""RocketMQ 5's topic attribute changes (+k=v / -k), pure."""

from __future__ import annotations

import re

import pytest

from rmq.broker.topic_attributes import TopicAttributeError, alter_attributes, parse_attribute_changes


def test_parse_set_and_remove() -> None:
    assert parse_attribute_changes("+message.type=FIFO, -x") == {"message.type": "FIFO", "x": None}
    assert parse_attribute_changes(None) == {} and parse_attribute_changes("  ") == {}


@pytest.mark.parametrize(
    "text, words",
    [
        ("message.type=FIFO", "must start with +"),
        ("+message.type", "+key=value"),
        ("-k=v", "-key"),
        ("+a=1,+a=2", "twice"),
    ],
)
def test_parse_refuses_naming_the_item(text: str, words: str) -> None:
    with pytest.raises(TopicAttributeError, match=re.escape(words)):
        parse_attribute_changes(text)


def test_alter_keeps_updates_and_removes() -> None:
    assert alter_attributes(True, None, {"message.type": "fifo"}) == {"message.type": "FIFO"}
    assert alter_attributes(False, {"message.type": "FIFO"}, {}) == {"message.type": "FIFO"}
    assert alter_attributes(False, {"message.type": "FIFO"}, {"message.type": "DELAY"}) == {"message.type": "DELAY"}
    assert alter_attributes(False, {"message.type": "FIFO"}, {"message.type": None}) is None
    assert alter_attributes(True, None, {}) is None


@pytest.mark.parametrize(
    "create, changes, words",
    [
        (True, {"queue.type": "BatchCQ"}, "unsupported key queue.type"),
        (True, {"message.type": "LIFO"}, "LIFO is not one of"),
        (True, {"message.type": None}, "when creating"),
    ],
)
def test_alter_refuses_naming_the_key(create: bool, changes: dict[str, str | None], words: str) -> None:
    with pytest.raises(TopicAttributeError, match=re.escape(words)):
        alter_attributes(create, None, changes)
