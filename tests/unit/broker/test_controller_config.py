"""Controller-mode keys of broker.conf: what they switch on and what they refuse."""

from __future__ import annotations

import pytest

from rmq.broker.config import load_broker_config
from rmq.store.config import BrokerRole, ConfigError


def _load(**keys: object):
    return load_broker_config(None, "127.0.0.1:9876", {k: str(v) for k, v in keys.items()})


def test_off_by_default_and_classic_rules_hold():
    c = _load()
    assert not c.broker.controller_mode
    with pytest.raises(ConfigError, match="brokerId"):
        _load(brokerRole="SYNC_MASTER", brokerId=1)


def test_controller_mode_takes_the_namesrv_or_its_own_addresses():
    c = _load(enableControllerMode="true", brokerRole="SYNC_MASTER", brokerId=1)
    assert c.broker.controller_mode and c.broker.controller_addrs == ["127.0.0.1:9876"]
    assert c.store.brokerRole == BrokerRole.SYNC_MASTER and c.broker.brokerId == 1
    c = _load(controllerAddr="10.0.0.1:9876;10.0.0.2:9876")
    assert c.broker.controller_mode
    assert c.broker.controller_addrs == ["10.0.0.1:9876", "10.0.0.2:9876"]
    assert (c.broker.brokerHeartbeatInterval, c.broker.sendHeartbeatTimeoutMillis) == (1000, 1000)


@pytest.mark.parametrize(
    "keys, match",
    [
        (dict(brokerRole="SLAVE", brokerId=1), "role this broker takes while it leads"),
        (dict(controllerAddr="nohost"), "controllerAddr"),
        (dict(brokerHeartbeatInterval=0), "brokerHeartbeatInterval"),
    ],
)
def test_controller_mode_refuses(keys, match):
    with pytest.raises(ConfigError, match=match):
        _load(enableControllerMode="true", **keys)
