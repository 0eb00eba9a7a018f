"""rmq.auth sits between protocol and remoting (ARCHITECTURE.md): it imports only
rmq.common, rmq.protocol and itself, and no I/O or event-loop machinery."""

from __future__ import annotations

import ast
from pathlib import Path

AUTH = Path(__file__).resolve().parents[3] / "rmq" / "auth"
ALLOWED_OURS = ("rmq.common", "rmq.protocol", "rmq.auth")
FORBIDDEN = {"asyncio", "socket", "uvloop", "ssl", "threading"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_auth_imports_only_common_protocol_and_itself() -> None:
    files = sorted(AUTH.glob("*.py"))
    assert len(files) >= 5
    for path in files:
        for name in _imports(path):
            top = name.split(".")[0]
            if top in ("rmq", "ha", "nameserver", "spark"):
                assert name.startswith(ALLOWED_OURS), f"{path.name} imports {name}"
            assert top not in FORBIDDEN, f"{path.name} imports {name}"
