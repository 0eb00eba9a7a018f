"""Text renderings shared by the admin commands: mqadmin's tables and its JSON.

* ``Table``: mqadmin's printf layouts (``%-16s  %-22s  %-4s ...``) as column specs:
  ``#``-prefixed headers, columns left-aligned unless mqadmin right-aligns them, each
  column as wide as mqadmin makes it or as its widest cell (a long broker name widens
  its column instead of pushing the rest of the row out of line).
* ``fastjson_pretty``: what ``JSON.toJSONString(obj, true)`` prints (``topicRoute``):
  tab indents, integer map keys bare, fastjson's quirk of not starting a new line
  before a non-string key.
* Small formatters: ``human_time``
  (UtilAll.timeMillisToHumanString2), ``topic_config_string`` (TopicConfig.toString).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rmq.protocol.bodies import TopicConfig, dumps_fastjson
from rmq.protocol.codes import PermName

__all__ = [
    "property_line",
    "Col",
    "Table",
    "fastjson_pretty",
    "without_nulls",
    "human_time",
    "topic_config_string",
    "mq_version_desc",
]


def property_line(width: int, sep: str, with_addr: bool = False) -> Callable[[str, str, str], str]:
    """mqadmin's ``%-<width>s<sep>%s`` line of one property of a server (``addr``), the
    address first (``%-24s``) when several servers' properties interleave."""
    if with_addr:
        return lambda addr, k, v: f"{addr:<24} {k:<{width}}{sep}{v}"
    return lambda addr, k, v: f"{k:<{width}}{sep}{v}"


# =========================================================================== tables
@dataclass(frozen=True)
class Col:
    """One column: header text, mqadmin's width, alignment, and the gap before it."""

    header: str
    width: int = 0
    right: bool = False
    gap: str = "  "


class Table:
    """Rows of strings under ``#`` headers, aligned; ``str(table)`` renders it.

    The last column is not padded (no trailing blanks).
    """

    def __init__(self, *cols: Col) -> None:
        self.cols = cols
        self.rows: list[list[str]] = []

    def add(self, *cells: Any) -> None:
        if len(cells) != len(self.cols):
            raise ValueError(f"{len(cells)} cells for {len(self.cols)} columns")
        self.rows.append(["" if c is None else str(c) for c in cells])

    def render(self) -> str:
        widths = [max([c.width, len(c.header)] + [len(r[i]) for r in self.rows]) for i, c in enumerate(self.cols)]
        lines = [self._line([c.header for c in self.cols], widths)]
        lines += [self._line(r, widths) for r in self.rows]
        return "\n".join(lines)

    def _line(self, cells: Sequence[str], widths: Sequence[int]) -> str:
        parts = []
        last = len(cells) - 1
        for i, (col, cell, w) in enumerate(zip(self.cols, cells, widths, strict=True)):
            if i:
                parts.append(col.gap)
            if col.right:
                parts.append(cell.rjust(w))
            elif i == last:
                parts.append(cell)
            else:
                parts.append(cell.ljust(w))
        return "".join(parts).rstrip()

    def __str__(self) -> str:
        return self.render()


# =========================================================================== fastjson pretty
def fastjson_pretty(obj: Any) -> str:
    """``obj`` (the ``to_obj()`` of a body) as fastjson's PrettyFormat writes it.

    Objects: ``{``, each property on its own line one tab deeper, ``}`` on a line of its
    own; keys sorted (fastjson's bean order; map order is not significant). Integer
    keys (``brokerAddrs``) are written bare and, like fastjson's MapSerializer, without
    a line break before them. Empty objects and arrays stay ``{}`` / ``[]``. Null
    properties are left out.
    """
    out: list[str] = []
    _pretty(obj, 0, out)
    return "".join(out)


def _pretty(v: Any, depth: int, out: list[str]) -> None:
    if isinstance(v, dict):
        items = [(k, x) for k, x in sorted(v.items(), key=lambda kv: _key_order(kv[0])) if x is not None]
        if not items:
            out.append("{}")
            return
        out.append("{")
        for i, (k, x) in enumerate(items):
            if i:
                out.append(",")
            if isinstance(k, int) and not isinstance(k, bool):
                out.append(str(k))
            else:
                out.append("\n" + "\t" * (depth + 1))
                out.append(dumps_fastjson(str(k)).decode())
            out.append(":")
            _pretty(x, depth + 1, out)
        out.append("\n" + "\t" * depth + "}")
    elif isinstance(v, (list, tuple)):
        if not v:
            out.append("[]")
            return
        out.append("[")
        for i, x in enumerate(v):
            if i:
                out.append(",")
            out.append("\n" + "\t" * (depth + 1))
            _pretty(x, depth + 1, out)
        out.append("\n" + "\t" * depth + "]")
    else:
        out.append(dumps_fastjson(v).decode())


def without_nulls(obj: Any) -> Any:
    """``obj`` with null properties left out at every depth (as fastjson writes a body),
    for ``--json`` documents made from ``to_obj()``."""
    if isinstance(obj, dict):
        return {k: without_nulls(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [without_nulls(v) for v in obj]
    return obj


def _key_order(k: Any) -> tuple[int, Any]:
    if isinstance(k, int) and not isinstance(k, bool):
        return (0, k)
    return (1, str(k))


# =========================================================================== small formatters
def human_time(ms: int) -> str:
    """UtilAll.timeMillisToHumanString2: local ``yyyy-MM-dd HH:mm:ss,SSS``."""
    t = time.localtime(ms // 1000)
    return time.strftime("%Y-%m-%d %H:%M:%S", t) + f",{ms % 1000:03d}"


def topic_config_string(tc: TopicConfig) -> str:
    """TopicConfig.toString() of RocketMQ 4.9.8 (what ``mqadmin updateTopic`` prints)."""
    return (
        f"TopicConfig [topicName={tc.topic_name}, readQueueNums={tc.read_queue_nums}, "
        f"writeQueueNums={tc.write_queue_nums}, perm={PermName.perm_to_string(tc.perm)}, "
        f"topicFilterType={tc.topic_filter_type}, topicSysFlag={tc.topic_sys_flag}, "
        f"order={'true' if tc.order else 'false'}]"
    )


def _mq_versions() -> tuple[str, ...]:
    """MQVersion.Version's constants in ordinal order (what client versions count)."""
    names = ["V3_0_0_SNAPSHOT", "V3_0_0_ALPHA1"] + [f"V3_0_0_BETA{i}" for i in range(1, 6)]
    for i in range(6, 10):
        names += [f"V3_0_0_BETA{i}_SNAPSHOT", f"V3_0_0_BETA{i}"]
    names.append("V3_0_0_FINAL")
    series = [(3, 0, range(1, 16)), (3, 1, range(10)), (3, 2, range(10))]
    series += [(3, minor, range(1, 10)) for minor in range(3, 10)]
    series += [(major, minor, range(10)) for major in (4, 5) for minor in range(10)]
    for major, minor, patches in series:
        for p in patches:
            names += [f"V{major}_{minor}_{p}_SNAPSHOT", f"V{major}_{minor}_{p}"]
    names.append("HIGHER_VERSION")
    return tuple(names)


MQ_VERSIONS = _mq_versions()


def mq_version_desc(version: int) -> str:
    """MQVersion.getVersionDesc: the name of a client's version ordinal (409 -> V4_9_8)."""
    if version < 0:
        return str(version)
    return MQ_VERSIONS[min(version, len(MQ_VERSIONS) - 1)]
