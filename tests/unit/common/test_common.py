"""rmq.common: clock, names, files, addresses; and that it imports nothing of ours."""

from __future__ import annotations

import ast
import os
import pathlib
import time

from rmq.common import mixall
from rmq.common.clock import now_ms
from rmq.common.fs import atomic_write
from rmq.common.net import local_ip

COMMON = pathlib.Path(mixall.__file__).parent


def test_now_ms_is_wall_clock_milliseconds() -> None:
    a = int(time.time() * 1000)
    b = now_ms()
    assert abs(b - a) < 1000


def test_names() -> None:
    assert mixall.retry_topic("g") == "%RETRY%g" and mixall.is_retry_topic("%RETRY%g")
    assert mixall.dlq_topic("g") == "%DLQ%g" and mixall.is_dlq_topic("%DLQ%g")
    assert mixall.is_sys_topic("TBW102") and mixall.is_sys_topic("rmq_sys_x")
    assert not mixall.is_sys_topic("OrderEvents")
    assert mixall.NOT_ALLOWED_SEND_TOPICS <= mixall.SYSTEM_TOPICS


def test_atomic_write_replaces(tmp_path: pathlib.Path) -> None:
    p = tmp_path / "sub" / "f"
    atomic_write(str(p), b"one")
    atomic_write(str(p), b"two")
    assert p.read_bytes() == b"two"
    assert os.listdir(p.parent) == ["f"]


def test_local_ip_is_an_address() -> None:
    assert local_ip().count(".") == 3


def test_common_imports_nothing_of_ours() -> None:
    for f in COMMON.glob("*.py"):
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for n in names:
                top = n.split(".")[0]
                assert top not in {"ha", "nameserver", "spark"}, f"{f.name} imports {n}"
                assert top != "rmq" or n.startswith("rmq.common"), f"{f.name} imports {n}"
