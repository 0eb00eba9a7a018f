"""ARCHITECTURE.md §2: spark/ is shipped to executors, so it imports only rmq.protocol, the
ground floor rmq.common and the pure unit codecs of rmq.store (cq_codec, index_codec) --
read from the source, every import counting (module level, in functions, TYPE_CHECKING).

One exception: spark/rebuild_consume_queue.py reads broker.conf on the driver into
rmq.store.config.MessageStoreConfig; that module in turn may import only rmq.common.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPARK = sorted((ROOT / "spark").glob("*.py"))
ALLOWED = ("rmq.protocol", "rmq.common", "rmq.store.cq_codec", "rmq.store.index_codec")
DRIVER_ONLY = {"rebuild_consume_queue.py": ("rmq.store.config",)}


def _rmq_imports(path: Path) -> set[str]:
    """Every rmq.* name path imports (a from-import names module.symbol)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return {n for n in out if n.split(".")[0] == "rmq"}


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _module_path(dotted: str) -> Path:
    parts = dotted.split(".")
    while parts:
        cand = ROOT.joinpath(*parts)
        if cand.with_suffix(".py").is_file():
            return cand.with_suffix(".py")
        if (cand / "__init__.py").is_file():
            return cand / "__init__.py"
        parts.pop()
    raise AssertionError(f"{dotted} is not a module of ours")


def test_spark_modules_are_read() -> None:
    names = {p.name for p in SPARK}
    assert {"scan.py", "cq_files.py", "index_files.py", "rebuild_consume_queue.py"} <= names


@pytest.mark.parametrize("path", SPARK, ids=lambda p: p.name)
def test_spark_imports_only_protocol_and_the_unit_codecs(path: Path) -> None:
    allowed = ALLOWED + DRIVER_ONLY.get(path.name, ())
    bad = sorted(n for n in _rmq_imports(path) if not _under(n, allowed))
    assert not bad, f"spark/{path.name} imports {bad}"


@pytest.mark.parametrize("module", ["rmq.store.cq_codec", "rmq.store.index_codec", "rmq.store.config"])
def test_what_spark_may_import_of_the_store_stays_pure(module: str) -> None:
    bad = sorted(n for n in _rmq_imports(_module_path(module)) if not _under(n, ("rmq.protocol", "rmq.common")))
    assert not bad, f"{module} imports {bad}"
