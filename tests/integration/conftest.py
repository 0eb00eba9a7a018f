"""Fixtures for the integration tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.harness import BrokerProcess, NameServerProcess
from tests.integration.broker_util import BrokerApi


@pytest.fixture
async def api(cluster: tuple[NameServerProcess, BrokerProcess]) -> AsyncIterator[BrokerApi]:
    """A connection to the module's broker, for files whose `cluster` is rigs.ns_and_broker."""
    ns, br = cluster
    async with BrokerApi(br.addr) as api:
        yield api
