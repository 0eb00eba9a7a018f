"""``rmq.common.properties``: java.util.Properties text onto config dataclasses."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import pytest

from rmq.common.properties import PropertiesError, apply_properties, convert, parse_properties_text


def test_parse_properties_text() -> None:
    text = "# comment\n! also a comment\n\n  listenPort = 9877  \nkvConfigPath: /a/b=c\nurl=http://x:1\nempty=\n"
    assert parse_properties_text(text) == {
        "listenPort": "9877",
        "kvConfigPath": "/a/b=c",
        "url": "http://x:1",
        "empty": "",
    }
    with pytest.raises(PropertiesError, match="^line 2: expected key=value"):
        parse_properties_text("a=1\njustakey\n")
    with pytest.raises(PropertiesError, match="^line 1: empty key"):
        parse_properties_text("=1\n")


class Role(enum.Enum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SLAVE = "SLAVE"


@dataclass
class Sample:
    flag: bool = False
    count: int = 0
    ratio: float = 0.0
    name: str = ""
    role: Role = Role.ASYNC_MASTER


def test_convert_and_apply() -> None:
    s = Sample()
    unknown = apply_properties(
        s, {"flag": "TRUE", "count": " -12 ", "ratio": "0.5", "name": " x ", "role": "slave", "other": "1"}
    )
    assert unknown == ["other"]
    assert (s.flag, s.count, s.ratio, s.name, s.role) == (True, -12, 0.5, "x", Role.SLAVE)
    for key, raw, msg in [
        ("flag", "yes", "flag: expected true or false, got 'yes'"),
        ("count", "1.5", "count: expected an integer, got '1.5'"),
        ("ratio", "half", "ratio: expected a number, got 'half'"),
        ("role", "boss", "role: expected one of ASYNC_MASTER, SLAVE, got 'boss'"),
    ]:
        with pytest.raises(PropertiesError) as ei:
            apply_properties(Sample(), {key: raw})
        assert str(ei.value) == msg
    assert convert("k", "7", int) == 7 and convert("k", "v", str) == "v"
