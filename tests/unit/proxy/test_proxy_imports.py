"""ARCHITECTURE.md: the proxy talks to brokers like any client; it never imports the store, the
broker or HA (every import counts: module level and inside functions)."""

from __future__ import annotations

import ast
from pathlib import Path

PROXY = Path(__file__).resolve().parents[3] / "rmq" / "proxy"
FORBIDDEN = ("rmq.store", "rmq.broker", "ha", "nameserver", "spark")


def test_proxy_imports_no_store_broker_or_ha() -> None:
    bad = []
    for path in sorted(PROXY.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            bad += [f"{path.name}: {n}" for n in names if any(n == f or n.startswith(f + ".") for f in FORBIDDEN)]
    assert not bad, bad
    assert len(list(PROXY.rglob("*.py"))) >= 10
