"""Spark tests: one local[2] SparkContext per module (start-up costs seconds)."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator

import pytest

from spark.rebuild_consume_queue import main, start_spark


@pytest.fixture(scope="module")
def sc() -> Iterator[object]:
    context, _created = start_spark("local[2]")
    try:
        yield context
    finally:
        context.stop()


@pytest.fixture(scope="module")
def rebuild(sc) -> Callable[..., tuple[int, str]]:
    """Run `rmq rebuild-cq ARGS` in this process on the module's SparkContext:
    (exit code, report)."""

    def run(*args: str) -> tuple[int, str]:
        out = io.StringIO()
        code = main(["--quiet", *args], out=out)
        return code, out.getvalue()

    return run
