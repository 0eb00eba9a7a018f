"""RocketMQ's configuration files: ``java.util.Properties`` text onto config dataclasses.

``parse_properties_text`` reads ``key=value`` / ``key: value`` lines (``#`` and ``!``
comments); ``apply_properties`` sets the dataclass fields named by the keys, converting
the text to each field's type the way ``MixAll.properties2Object`` does (``true``/``false``
in any case, decimal numbers, enum names), and returns the keys it does not know. Every
error is a ``PropertiesError`` whose message starts with the key (or the line). Pure: the
caller reads the file and decides what an unknown key means (RocketMQ ignores it; rmq
warns about it).
"""

from __future__ import annotations

import dataclasses
import enum
import re
import typing
from collections.abc import Collection, Iterable, Mapping
from typing import Any

__all__ = [
    "PropertiesError",
    "KeyValueError",
    "key_value_words",
    "parse_properties_text",
    "convert",
    "apply_properties",
    "format_value",
    "properties_text",
    "rewrite_properties",
    "rewrite_properties_file",
    "public_properties",
    "ConfigUpdate",
]


class PropertiesError(ValueError):
    """A configuration line or value that cannot be accepted; the message names the key."""


class KeyValueError(PropertiesError):
    """A command-line word that is not ``KEY=VALUE``; ``word`` is that word (each command
    words its own complaint)."""

    def __init__(self, word: str) -> None:
        super().__init__(f"{word!r}: expected KEY=VALUE")
        self.word = word


def key_value_words(words: Iterable[str], *, strip: bool = False) -> dict[str, str]:
    """``KEY=VALUE`` words of a command line (``rmq broker -D``, ``rmq produce --property``)
    as a dict, split at the first ``=``; ``strip`` trims both sides. A word without ``=``
    raises ``KeyValueError``."""
    out: dict[str, str] = {}
    for word in words:
        k, sep, v = word.partition("=")
        if not sep:
            raise KeyValueError(word)
        if strip:
            k, v = k.strip(), v.strip()
        out[k] = v
    return out


def parse_properties_text(text: str) -> dict[str, str]:
    """A java.util.Properties-style text: key=value or key: value, # and ! comments."""
    out: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s[0] in "#!":
            continue
        cut = min((i for i in (s.find("="), s.find(":")) if i >= 0), default=-1)
        if cut < 0:
            raise PropertiesError(f"line {lineno}: expected key=value, got {s!r}")
        key, value = s[:cut].strip(), s[cut + 1 :].strip()
        if not key:
            raise PropertiesError(f"line {lineno}: empty key")
        out[key] = value
    return out


def convert(key: str, raw: str, typ: Any) -> Any:
    """``raw`` as a value of ``typ`` (bool, int, float, str or an Enum of upper-case names)."""
    raw = raw.strip()
    if typ is bool:
        low = raw.lower()
        if low in ("true", "false"):
            return low == "true"
        raise PropertiesError(f"{key}: expected true or false, got {raw!r}")
    if typ is int:
        try:
            return int(raw)
        except ValueError:
            raise PropertiesError(f"{key}: expected an integer, got {raw!r}") from None
    if typ is float:
        try:
            return float(raw)
        except ValueError:
            raise PropertiesError(f"{key}: expected a number, got {raw!r}") from None
    if isinstance(typ, type) and issubclass(typ, enum.Enum):
        try:
            return typ(raw.upper())
        except ValueError:
            allowed = ", ".join(str(m.value) for m in typ)
            raise PropertiesError(f"{key}: expected one of {allowed}, got {raw!r}") from None
    return raw


def apply_properties(obj: Any, props: Mapping[str, str]) -> list[str]:
    """Set every dataclass field of ``obj`` named in ``props``; returns the keys it does
    not know. A wrong value raises ``PropertiesError`` naming the key, before any later
    key is applied."""
    hints = typing.get_type_hints(type(obj))
    names = {f.name for f in dataclasses.fields(obj)}
    unknown: list[str] = []
    for key, raw in props.items():
        if key not in names:
            unknown.append(key)
            continue
        setattr(obj, key, convert(key, raw, hints[key]))
    return unknown


_KEY_LINE = re.compile(r"\s*([^=:#!\s][^=:]*?)\s*[=:]")


def format_value(v: Any) -> str:
    """A config value as a properties file spells it (enums by value, booleans lower-case)."""
    if isinstance(v, enum.Enum):
        return str(v.value)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def properties_text(props: Mapping[str, str]) -> str:
    """MixAll.properties2String: one ``key=value`` line each (sorted here)."""
    return "".join(f"{k}={props[k]}\n" for k in sorted(props))


def rewrite_properties(text: str, changes: Mapping[str, str]) -> str:
    """A properties file's text with changes applied: a key's (first) line rewritten in
    place, later duplicates dropped, new keys appended; comments and other lines kept."""
    out: list[str] = []
    done: set[str] = set()
    for line in text.splitlines():
        m = _KEY_LINE.match(line)
        key = m.group(1) if m else None
        if key is not None and key in changes:
            if key not in done:
                out.append(f"{key}={changes[key]}")
                done.add(key)
            continue
        out.append(line)
    out += [f"{k}={v}" for k, v in changes.items() if k not in done]
    return "\n".join(out) + "\n"


def rewrite_properties_file(path: str, changes: Mapping[str, str]) -> None:
    """Blocking: ``rewrite_properties`` on the file at ``path`` (created if missing),
    replaced atomically (``rmq.common.fs.atomic_write``)."""
    from rmq.common.fs import atomic_write

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        text = ""
    atomic_write(path, rewrite_properties(text, changes).encode("utf-8"))


def public_properties(objects: Iterable[Any]) -> dict[str, str]:
    """Every field of these config dataclasses with its value as a properties file spells
    it, except secrets (``metadata={"secret": True}``): what GET_*_CONFIG shows."""
    out: dict[str, str] = {}
    for obj in objects:
        for f in dataclasses.fields(obj):
            if not f.metadata.get("secret"):
                out[f.name] = format_value(getattr(obj, f.name))
    return out


@dataclasses.dataclass
class ConfigUpdate:
    """A checked runtime config update (broker or NameServer): the converted values,
    split by when they take effect, and their text as written to the file."""

    values: dict[str, Any]
    at_once: list[str]
    on_restart: list[str]
    text: dict[str, str]  # key -> value as written to the file

    @property
    def remark(self) -> str | None:
        """What an answer says of the keys that wait for a restart (None: all live)."""
        return "takes effect after a restart: " + ", ".join(self.on_restart) if self.on_restart else None

    @classmethod
    def split(cls, values: Mapping[str, Any], runtime_keys: Collection[str]) -> ConfigUpdate:
        """``runtime_keys``: read by the running process where it uses them (at once)."""
        return cls(
            dict(values),
            [k for k in values if k in runtime_keys],
            [k for k in values if k not in runtime_keys],
            {k: format_value(v) for k, v in values.items()},
        )
