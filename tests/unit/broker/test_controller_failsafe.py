"""ControllerRole's failsafe decisions on an injected clock: the slave's answer to
RMQ_FAILSAFE_CHECK (each refusal names its condition; it heartbeats before it confirms;
a confirmation is a promise), the master's choice of whom to ask (unclean elections, a
grown in-sync set, a master alone in its set), an unanswered check, and the controller's
role-change notice.

No servers: of the broker's store and role services only what a heartbeat reads is
given; the controllers and an unanswered check are closed ports of this host."""

from __future__ import annotations

import logging
import math
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest

from rmq.broker.config import BrokerConfig
from rmq.broker.controller_role import MASTER, SLAVE, ControllerRole, FailoverEpochs
from rmq.broker.processors.role_notice import RoleChangeNoticeProcessor
from rmq.protocol.codes import RequestCode
from rmq.protocol.controller import BrokerHeartbeatResponseHeader, FailsafeCheckRequestHeader
from rmq.protocol.frame import RemotingCommand
from rmq.remoting.client import RemotingClient
from rmq.store.config import BrokerRole, MessageStoreConfig

ME, OTHER, MASTER_ADDR = "127.0.0.1:10911", "127.0.0.1:10921", "127.0.0.1:10931"


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


CONTROLLERS = ";".join(closed_port() for _ in range(3))  # nobody listens there


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


async def _role(tmp_path: Path, clock: Clock) -> ControllerRole:
    bc = BrokerConfig(
        brokerName="broker-a",
        brokerIP1="127.0.0.1",
        listenPort=10911,
        controllerAddr=CONTROLLERS,
        brokerHeartbeatInterval=200,
        sendHeartbeatTimeoutMillis=200,
    )
    sc = MessageStoreConfig(storePathRootDir=str(tmp_path))
    epochs = FailoverEpochs(None, str(tmp_path))  # type: ignore[arg-type]  # (the store is not read here)
    await epochs.load()
    await epochs.file.append(3, 0)
    return ControllerRole(
        bc,
        sc,
        BrokerRole.ASYNC_MASTER,
        "127.0.0.1",
        SimpleNamespace(max_phy_offset=0),  # type: ignore[arg-type]  # (what a heartbeat reads)
        SimpleNamespace(ha_service=None),  # type: ignore[arg-type]
        epochs,
        RemotingClient(),
        lambda: None,
        clock,
    )


def _check(master: str = MASTER_ADDR, epoch: int = 3, group: str = "broker-a") -> FailsafeCheckRequestHeader:
    return FailsafeCheckRequestHeader(group, master, epoch)


async def test_slave_confirms_only_when_every_condition_holds(tmp_path: Path) -> None:
    clock = Clock()
    r = await _role(tmp_path, clock)
    try:
        assert "PENDING, not a slave" in (await r.failsafe_check(_check()) or "")
        r.state, r.master_addr, r.controller = SLAVE, MASTER_ADDR, "127.0.0.1:9876"
        r._answer = BrokerHeartbeatResponseHeader(OTHER, broker_id=1)  # a change of master under way
        assert f"follows {OTHER}, not {MASTER_ADDR}" in (await r.failsafe_check(_check()) or "")
        r._answer = BrokerHeartbeatResponseHeader(MASTER_ADDR, broker_id=1)
        assert "group broker-a, not broker-b" in (await r.failsafe_check(_check(group="broker-b")) or "")
        assert f"follows {MASTER_ADDR}, not {OTHER}" in (await r.failsafe_check(_check(OTHER)) or "")
        assert "epoch 3, not 4" in (await r.failsafe_check(_check(epoch=4)) or "")
        # a round begun after the check arrived reached a controller
        r.last_round = (clock.now + 0.001, True)
        why = await r.failsafe_check(_check())
        assert why == "controller 127.0.0.1:9876 answers this slave: the controllers are reachable"
        assert r.lease.promised_at == -math.inf
        # no round since the check arrived: it heartbeats now (no controller listens)
        clock.now += 1
        assert await r.failsafe_check(_check()) is None
        assert r.last_round == (clock.now, False)
        assert r.lease.promised_at == clock.now and r.lease.promised_to == f"master {MASTER_ADDR}"
        r.state = MASTER
        assert "MASTER, not a slave" in (await r.failsafe_check(_check()) or "")
    finally:
        await r.client.close()


def _as_master(r: ControllerRole, clock: Clock, sync_state_set: str, unclean: bool = False) -> None:
    r.state, r.master_addr = MASTER, ME
    r._master_answer = BrokerHeartbeatResponseHeader(
        ME, "127.0.0.1:10912", 0, 3, 0, 0, 1000, sync_state_set, unclean, "127.0.0.1:9876"
    )
    r.lease.granted(clock.now, 1000, "controller 127.0.0.1:9876")
    r.lease.lead()


async def test_master_alone_in_its_set_extends_from_the_check(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    r = await _role(tmp_path, clock)
    _as_master(r, clock, ME)
    clock.now += 0.8
    with caplog.at_level(logging.WARNING, "rmq.broker.role"):
        await r.failsafe_round()
        await r.failsafe_round()
    assert r.lease.remaining(clock.now) == pytest.approx(1.0)
    said = [m for m in caplog.messages if "failsafe" in m]
    assert len(said) == 1 and "this master is the whole set, nobody can be elected" in said[0]


async def test_no_failsafe_with_unclean_elections(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    r = await _role(tmp_path, clock)
    _as_master(r, clock, ME, unclean=True)
    clock.now += 0.8
    with caplog.at_level(logging.WARNING, "rmq.broker.role"):
        await r.failsafe_round()
    assert r.lease.remaining(clock.now) == pytest.approx(0.2)
    assert any("enableElectUncleanMaster" in m and "the lease lapses" in m for m in caplog.messages)


@pytest.mark.parametrize(
    "answered, since",
    [
        ({"1"}, {"1", "2"}),  # an unanswered report named slave 2 too
        ({"1"}, {"1"}),  # the set answered holds no slave: slave 1 may have joined since
    ],
)
async def test_no_failsafe_when_the_set_may_have_grown_unseen(
    tmp_path: Path, answered: set[str], since: set[str]
) -> None:
    clock = Clock()
    r = await _role(tmp_path, clock)
    _as_master(r, clock, ME)
    r._reported_at_success, r._reported_since = frozenset(answered), since
    clock.now += 0.8
    await r.failsafe_round()
    assert r.lease.remaining(clock.now) == pytest.approx(0.2)


async def test_an_unanswered_check_lets_the_lease_lapse(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    closed = closed_port()
    clock = Clock()
    r = await _role(tmp_path, clock)
    _as_master(r, clock, f"{ME};{closed}")
    clock.now += 0.8
    try:
        with caplog.at_level(logging.WARNING, "rmq.broker.role"):
            await r.failsafe_round()
    finally:
        await r.client.close()
    assert r.lease.remaining(clock.now) == pytest.approx(0.2)
    assert any(f"{closed}: no answer" in m and "the lease lapses" in m for m in caplog.messages)


async def test_a_round_fits_a_third_of_the_lease(tmp_path: Path) -> None:
    r = await _role(tmp_path, Clock())
    assert r.round_budget() == pytest.approx(0.2)
    r.lease.granted(0, 300)
    assert r.round_budget() == pytest.approx(0.1)


async def test_a_role_change_notice_makes_the_broker_heartbeat_now(tmp_path: Path) -> None:
    r = await _role(tmp_path, Clock())
    notice = RemotingCommand(
        RequestCode.NOTIFY_BROKER_ROLE_CHANGED, ext_fields={"brokerName": "broker-a", "masterEpoch": "4"}
    )
    assert not r._kicked
    assert RoleChangeNoticeProcessor(r.kick).process(None, notice) is None  # (oneway: no answer)
    assert r._kicked
