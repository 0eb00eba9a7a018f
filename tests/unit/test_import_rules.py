"""The dependency rules of ARCHITECTURE.md, read from the source (every import counts:
module level, inside functions, under TYPE_CHECKING).

* no import cycle between modules of rmq/, ha/, nameserver/;
* only the two CLIs import the assembled Broker (rmq.broker.broker);
* rmq.common imports nothing of ours;
* rmq.common, rmq.protocol and rmq.auth (the sans-IO floors) never import asyncio; the
  background-loop base that does lives one floor up, in rmq.runtime (it imports only rmq.common);
* rmq.store imports nothing from rmq.remoting, rmq.broker, ha, rmq.client;
* rmq.client never imports rmq.store or rmq.broker.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("rmq", "ha", "nameserver")
OURS = PACKAGES


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The deepest module of ours that name (a.b.c or a.b.c.Symbol) refers to."""
    parts = name.split(".")
    while parts:
        cand = ".".join(parts)
        if cand in MODULES:
            return cand
        parts.pop()
    return None


def _imports(module: str) -> Iterator[str]:
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in OURS:
                    target = _resolve(alias.name)
                    if target is not None:
                        yield target
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module.split(".") if is_pkg else module.split(".")[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join([*pkg, base] if base else pkg)
            if base.split(".")[0] not in OURS:
                continue
            for alias in node.names:
                target = _resolve(f"{base}.{alias.name}")
                if target is not None:
                    yield target


GRAPH: dict[str, set[str]] = {m: {t for t in _imports(m) if t != m} for m in MODULES}


def _importers(prefixes: tuple[str, ...], of: tuple[str, ...]) -> list[str]:
    """'a imports b' for every module a under prefixes importing a module under of."""

    def under(m: str, ps: tuple[str, ...]) -> bool:
        return any(m == p or m.startswith(p + ".") for p in ps)

    return sorted(f"{m} imports {t}" for m, ts in GRAPH.items() if under(m, prefixes) for t in ts if under(t, of))


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for m in sorted(GRAPH):
        if m not in index:
            visit(m)
    return out


def test_the_graph_is_read() -> None:
    assert "rmq.broker.broker" in GRAPH
    assert "rmq.broker.seams" in GRAPH["rmq.broker.broker"] or "rmq.broker.roles" in GRAPH["rmq.broker.broker"]


def test_no_import_cycles() -> None:
    cycles = _cycles()
    assert not cycles, "import cycles (TYPE_CHECKING and function-level imports count):\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


def test_only_the_clis_import_the_assembled_broker() -> None:
    allowed = {"rmq.cli", "rmq.broker.cli"}
    bad = [line for line in _importers(PACKAGES, ("rmq.broker.broker",)) if line.split(" ")[0] not in allowed]
    assert not bad, bad


def test_common_imports_nothing_of_ours() -> None:
    bad = [
        line
        for line in _importers(("rmq.common",), PACKAGES)
        if not line.split(" imports ")[1].startswith("rmq.common")
    ]
    assert not bad, bad


def _stdlib_imports(module: str) -> Iterator[str]:
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module.split(".")[0]


def test_the_sans_io_floors_never_import_asyncio() -> None:
    floors = ("rmq.common", "rmq.protocol", "rmq.auth")
    bad = [m for m in MODULES if m.startswith(floors) and "asyncio" in set(_stdlib_imports(m))]
    assert not bad, bad
    bad = _importers(floors, ("rmq.runtime",))
    assert not bad, bad


def test_runtime_imports_only_common() -> None:
    bad = [
        line
        for line in _importers(("rmq.runtime",), PACKAGES)
        if not line.split(" imports ")[1].startswith(("rmq.common", "rmq.runtime"))
    ]
    assert not bad, bad


def test_store_knows_nothing_of_the_network_or_the_broker() -> None:
    bad = _importers(("rmq.store",), ("rmq.remoting", "rmq.broker", "ha", "rmq.client"))
    assert not bad, bad


def test_client_never_imports_store_or_broker() -> None:
    bad = _importers(("rmq.client",), ("rmq.store", "rmq.broker"))
    assert not bad, bad


def test_nameserver_never_imports_the_broker_or_ha():
    # the ACL guard they share lives in rmq.remoting (rmq/remoting/acl_guard.py)
    bad = _importers(("nameserver",), ("rmq.broker", "ha", "rmq.store"))
    assert not bad, bad


def test_remoting_and_auth_import_no_server_side():
    bad = _importers(("rmq.remoting", "rmq.auth"), ("rmq.broker", "nameserver", "ha", "rmq.store", "rmq.client"))
    assert not bad, bad
