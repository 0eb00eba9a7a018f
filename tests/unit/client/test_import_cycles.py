"""No import cycle among the client's modules, TYPE_CHECKING imports included (issue 11:
the consume services see the push consumer through a Protocol, the instance gets its
inner producer from a factory)."""

from __future__ import annotations

import ast
from pathlib import Path

import rmq.client

PKG = "rmq.client"


def _imports() -> dict[str, set[str]]:
    root = Path(rmq.client.__file__).parent
    graph: dict[str, set[str]] = {}
    for f in root.glob("*.py"):
        if f.stem == "__init__":
            continue  # the package's re-exports import everything
        deps: set[str] = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                deps.add(node.module)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
        graph[f"{PKG}.{f.stem}"] = {d for d in deps if d.startswith(PKG + ".")}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                found.append(stack[stack.index(d) :] + [d])
            elif d in graph and not state.get(d):
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if not state.get(m):
            visit(m)
    return found


def test_the_cycle_finder_finds_one():
    assert _cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b", "a"]]


def test_no_import_cycle_in_the_client():
    graph = _imports()
    assert f"{PKG}.consumer_base" in graph and f"{PKG}.consume_concurrently" in graph
    assert _cycles(graph) == []
