"""Module-scoped process fixtures the integration test files share.

A test file names its fixture and its scratch directory in one line,

    cluster = ns_and_broker("broker-send")          # yields (ns, br)
    cluster = module_cluster("orderly", CONF)       # yields start_cluster's namespace

so that each file still gets its own NameServer and broker (module scope), started once
for the file and stopped after its last test.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from tests.harness import BrokerProcess, NameServerProcess, start_broker, start_cluster, start_namesrv


def ns_and_broker(dirname: str, conf: dict[str, object] | None = None) -> Any:
    """A fixture yielding (NameServer, broker registered with it), one pair per test module."""

    @pytest.fixture(scope="module")
    def fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NameServerProcess, BrokerProcess]]:
        d = tmp_path_factory.mktemp(dirname)
        with start_namesrv(d) as ns, start_broker(d, ns.addr, conf=conf) as br:
            yield ns, br

    return fixture


def module_cluster(dirname: str, conf: dict[str, object] | None = None) -> Any:
    """A fixture yielding harness.start_cluster's namespace, one cluster per test module."""

    @pytest.fixture(scope="module")
    def fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
        with start_cluster(tmp_path_factory.mktemp(dirname), conf) as c:
            yield c

    return fixture
