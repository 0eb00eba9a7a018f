"""nameserver.controller: election rules with a fake clock, ids, persistence."""

from __future__ import annotations

import msgpack
import pytest

from nameserver.controller import Controller, ControllerConfig, ControllerError
from rmq.protocol.codes import ResponseCode
from rmq.protocol.controller import (
    BrokerHeartbeatRequestHeader,
    HeartbeatBody,
    decode_group_statuses,
    encode_group_statuses,
)

M, S1, S2, S3 = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911", "10.0.0.4:10911"
TIMEOUT = 10_000
MiB = 1024 * 1024


class Ctl(Controller):
    def on_heartbeat(self, hb, now_ms):  # (header, body) pairs, as built below
        return super().on_heartbeat(hb[0], hb[1], now_ms)


def ctl(**kw) -> Ctl:
    return Ctl(ControllerConfig(enableControllerInNamesrv=True, **kw), wall_clock=lambda: 1_700_000_000_000)


def hb(addr, broker_id, role, epoch=0, max_offset=0, start=-1, acks=None):
    return (
        BrokerHeartbeatRequestHeader("C", "broker-a", addr, broker_id, role, epoch, max_offset, start),
        HeartbeatBody(addr.replace("10911", "10912"), dict(acks or {})),
    )


def master_hb(addr=M, max_offset=1000, acks=None, epoch=0, start=-1, role="SYNC_MASTER", broker_id=0):
    return hb(addr, broker_id, role, epoch, max_offset, start, acks)


def slave_hb(addr, broker_id, max_offset, epoch=1):
    return hb(addr, broker_id, "SLAVE", epoch, max_offset)


def group(c: Ctl, now: int = 0):
    return c.status(now)[0]


def test_first_master_is_adopted_at_epoch_1():
    c = ctl()
    a = c.on_heartbeat(slave_hb(S1, 1, 0, epoch=0), 0)
    assert a.master_addr is None and a.broker_id == 1
    v = c.version
    a = c.on_heartbeat(master_hb(), 0)
    assert (a.master_addr, a.master_ha_addr, a.epoch, a.epoch_start_offset, a.broker_id) == (
        M,
        "10.0.0.1:10912",
        1,
        0,
        0,
    )
    assert c.version > v
    a = c.on_heartbeat(slave_hb(S1, 1, 0, epoch=0), 10)
    assert (a.master_addr, a.master_ha_addr, a.epoch, a.broker_id) == (M, "10.0.0.1:10912", 1, 1)
    # a slave claiming id 0 is not taken for a master
    c2 = ctl()
    c2.on_heartbeat(hb(S1, 0, "SLAVE"), 0)
    assert c2.groups["broker-a"].master_addr is None


def test_running_master_with_history_keeps_its_epoch():
    c = ctl()
    a = c.on_heartbeat(master_hb(epoch=7, start=5000, max_offset=9000), 0)
    assert (a.epoch, a.epoch_start_offset) == (7, 5000)


def _cluster(c: Ctl, t: int, acks: dict[str, int], slaves: dict[str, tuple[int, int]], master_max: int = 1000) -> None:
    c.on_heartbeat(master_hb(max_offset=master_max, acks=acks), t)
    for addr, (bid, mx) in slaves.items():
        c.on_heartbeat(slave_hb(addr, bid, mx), t)


def _slaves_beat(c: Ctl, t: int, slaves: dict[str, tuple[int, int]]) -> None:
    for addr, (bid, mx) in slaves.items():
        c.on_heartbeat(slave_hb(addr, bid, mx), t)


def test_election_after_master_timeout_picks_highest_offset():
    c = ctl()
    slaves = {S1: (1, 900), S2: (2, 1000)}
    _cluster(c, 0, {S1: 900, S2: 1000}, slaves)
    _slaves_beat(c, TIMEOUT, slaves)
    assert c.scan(TIMEOUT) == []  # silent exactly the timeout: not yet
    _slaves_beat(c, TIMEOUT + 1, slaves)
    [rec] = c.scan(TIMEOUT + 1)
    assert (rec.epoch, rec.start_offset, rec.master_addr) == (2, 1000, S2)
    assert "silent for 10001 ms" in rec.reason
    assert c.scan(TIMEOUT + 2) == []  # decided once
    a = c.on_heartbeat(slave_hb(S2, 2, 1000), TIMEOUT + 3)
    assert (a.master_addr, a.master_ha_addr, a.epoch, a.epoch_start_offset, a.broker_id) == (
        S2,
        "10.0.0.3:10912",
        2,
        1000,
        0,
    )
    a = c.on_heartbeat(slave_hb(S1, 1, 900), TIMEOUT + 3)
    assert (a.master_addr, a.broker_id) == (S2, 1)


def test_ack_beats_a_stale_own_report_and_ties_go_to_the_lowest_id():
    c = ctl()
    # S2's own last report says 700 but the master saw it ack 1000
    slaves = {S1: (1, 1000), S2: (2, 700), S3: (3, 1000)}
    _cluster(c, 0, {S1: 1000, S2: 1000, S3: 1000}, slaves)
    _slaves_beat(c, TIMEOUT + 1, slaves)
    [rec] = c.scan(TIMEOUT + 1)
    assert rec.master_addr == S1  # 1000 each: lowest broker id
    c = ctl()
    slaves = {S1: (1, 700), S2: (2, 700)}
    _cluster(c, 0, {S1: 800, S2: 1000}, slaves)
    _slaves_beat(c, TIMEOUT + 1, slaves)
    [rec] = c.scan(TIMEOUT + 1)
    assert (rec.master_addr, rec.start_offset) == (S2, 1000)


def test_only_live_in_sync_slaves_are_candidates():
    c = ctl(haSlaveFallbehindMax=256 * MiB)
    slaves = {S1: (1, 10), S2: (2, 5000 * MiB), S3: (3, 1000 * MiB)}
    _cluster(c, 0, {S1: 10, S3: 1000 * MiB}, slaves, master_max=1000 * MiB + 50)
    # S1 lags 1000 MiB (out of sync), S2 was never acked by the master (unknown), S3 dies
    _slaves_beat(c, TIMEOUT + 1, {S1: (1, 10), S2: (2, 5000 * MiB)})
    assert c.scan(TIMEOUT + 1) == []
    assert c.groups["broker-a"].master_addr == M
    st = group(c, TIMEOUT + 1)
    assert {m.addr: (m.in_sync, m.alive) for m in st.members} == {
        M: (True, False),
        S1: (False, True),
        S2: (False, True),
        S3: (True, False),
    }
    # unclean election takes the live slave with the most data
    c.config.enableElectUncleanMaster = True
    [rec] = c.scan(TIMEOUT + 2)
    assert rec.master_addr == S2


def test_slave_behind_the_epoch_start_is_not_in_sync():
    c = ctl()
    c.on_heartbeat(master_hb(epoch=4, start=2000, max_offset=2100, acks={S1: 1990}), 0)
    c.on_heartbeat(slave_hb(S1, 1, 1990), 0)
    c.on_heartbeat(slave_hb(S1, 1, 1990), TIMEOUT + 1)
    assert c.scan(TIMEOUT + 1) == []


def test_acks_named_by_broker_id():
    c = ctl()
    c.on_heartbeat(slave_hb(S1, 1, 1000), 0)
    c.on_heartbeat(slave_hb(S2, 2, 400), 0)
    c.on_heartbeat(master_hb(acks={"1": 1000, "2": 400, "9": 5}), 0)
    st = group(c)
    assert {m.addr: m.ack_offset for m in st.members} == {M: None, S1: 1000, S2: 400}


def test_returning_master_is_fenced_and_gets_a_slave_id():
    c = ctl()
    slaves = {S1: (1, 1000)}
    _cluster(c, 0, {S1: 1000}, slaves)
    _slaves_beat(c, TIMEOUT + 1, slaves)
    c.scan(TIMEOUT + 1)
    # the promoted broker switches and reports where its epoch really starts
    a = c.on_heartbeat(master_hb(S1, max_offset=1010, epoch=2, start=1010), TIMEOUT + 2)
    assert (a.broker_id, a.epoch_start_offset) == (0, 1010)
    assert group(c).history[-1].start_offset == 1010
    # the old master comes back still believing it leads epoch 1
    a = c.on_heartbeat(master_hb(M, max_offset=1500, epoch=1, start=0), TIMEOUT + 5)
    assert (a.master_addr, a.epoch, a.epoch_start_offset, a.broker_id) == (S1, 2, 1010, 1)
    assert c.registration_id("broker-a", M, 0) == 1
    assert c.registration_id("broker-a", S1, 0) == 0
    assert c.registration_id("broker-a", M, 1) == 1
    assert c.registration_id("other", M, 0) == 0


def test_master_reporting_a_newer_epoch_wins():
    c = ctl()
    c.on_heartbeat(master_hb(), 0)
    a = c.on_heartbeat(master_hb(epoch=9, start=777), 1)
    assert (a.epoch, a.epoch_start_offset) == (9, 777)
    assert [h.epoch for h in group(c).history] == [1, 9]


def test_snapshot_restore_keeps_epochs():
    c = ctl()
    slaves = {S1: (1, 1000), S2: (2, 990)}
    _cluster(c, 0, {S1: 1000, S2: 990}, slaves)
    _slaves_beat(c, TIMEOUT + 1, slaves)
    c.scan(TIMEOUT + 1)
    raw = c.snapshot()
    r = ctl()
    r.restore(raw, 50_000)
    g = r.groups["broker-a"]
    assert (g.epoch, g.epoch_start_offset, g.master_addr, g.master_ha_addr) == (2, 1000, S1, "10.0.0.2:10912")
    assert g.ids == {S1: 0, S2: 2}
    assert [h.epoch for h in g.history] == [1, 2]
    # the master has until the timeout after the restart to be heard
    assert r.scan(50_000 + TIMEOUT) == []
    a = r.on_heartbeat(master_hb(S1, max_offset=2000, epoch=2, start=1000, acks={S2: 2000}), 50_000 + TIMEOUT)
    assert (a.epoch, a.broker_id) == (2, 0)
    r.on_heartbeat(slave_hb(S2, 2, 2000, epoch=2), 50_000 + 2 * TIMEOUT + 1)
    [rec] = r.scan(50_000 + 2 * TIMEOUT + 1)
    assert (rec.epoch, rec.master_addr) == (3, S2)  # never 2 again


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x00\x01garbage",
        msgpack.packb({"version": 99}),
        msgpack.packb({"version": 1, "groups": {"a": {"epoch": 1}}}),
    ],
)
def test_restore_refuses_a_damaged_file(raw):
    with pytest.raises(ValueError, match="controller file is damaged"):
        ctl().restore(raw, 0)


def test_manual_elect_rules():
    c = ctl()
    with pytest.raises(ControllerError) as ei:
        c.elect_master("broker-a", None, 0)
    assert ei.value.code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST
    slaves = {S1: (1, 1000), S2: (2, 10)}
    _cluster(c, 0, {S1: 1000, S2: 10}, slaves, master_max=1000 + 300 * MiB)
    for addr, code in [
        (M, ResponseCode.CONTROLLER_INVALID_REQUEST),
        (S3, ResponseCode.CONTROLLER_BROKER_NOT_ALIVE),
        (S2, ResponseCode.CONTROLLER_INVALID_REPLICAS),
    ]:
        with pytest.raises(ControllerError) as ei:
            c.elect_master("broker-a", addr, 5)
        assert ei.value.code == code, addr
    with pytest.raises(ControllerError) as ei:
        c.elect_master("broker-a", None, 5)
    assert ei.value.code == ResponseCode.CONTROLLER_INVALID_REQUEST
    assert "is alive" in str(ei.value)
    assert c.groups["broker-a"].epoch == 1
    c.on_heartbeat(master_hb(max_offset=1000, acks={S1: 1000, S2: 10}), 5)
    rec = c.elect_master("broker-a", S1, 6)  # over a live master
    assert (rec.epoch, rec.master_addr, rec.start_offset) == (2, S1, 1000)
    a = c.on_heartbeat(master_hb(max_offset=1200, epoch=1), 7)  # the old master hears it
    assert (a.master_addr, a.broker_id) == (S1, 1)


def test_manual_elect_without_address_when_master_is_gone():
    c = ctl()
    slaves = {S1: (1, 1000)}
    _cluster(c, 0, {S1: 1000}, slaves)
    _slaves_beat(c, TIMEOUT + 1, slaves)
    rec = c.elect_master("broker-a", None, TIMEOUT + 1)
    assert rec.master_addr == S1 and rec.epoch == 2
    # S1 went silent too, and no other slave is left
    with pytest.raises(ControllerError) as ei:
        c.elect_master("broker-a", None, 3 * TIMEOUT)
    assert ei.value.code == ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE


def test_status_body_roundtrip():
    c = ctl()
    _cluster(c, 0, {S1: 1000}, {S1: (1, 1000)})
    groups = c.status(100)
    assert decode_group_statuses(encode_group_statuses(groups)) == groups
    g = groups[0]
    assert (g.cluster, g.broker_name, g.epoch, g.master_addr, g.master_alive) == ("C", "broker-a", 1, M, True)
    assert [(m.addr, m.broker_id, m.role, m.last_heartbeat_ago_ms) for m in g.members] == [
        (M, 0, "SYNC_MASTER", 100),
        (S1, 1, "SLAVE", 100),
    ]


def test_config_validation():
    with pytest.raises(ValueError, match="controllerMasterTimeout"):
        Controller(ControllerConfig(controllerMasterTimeout=0))


def test_failovers_are_reported_but_the_first_master_is_not():
    c = ctl()
    events: list[tuple[str, str]] = []
    c.on_failover = lambda cluster, name: events.append((cluster, name))
    slaves = {S1: (1, 900), S2: (2, 1000)}
    _cluster(c, 0, {S1: 900, S2: 1000}, slaves)
    assert events == []  # adopting the first master
    _slaves_beat(c, TIMEOUT + 1, slaves)
    c.scan(TIMEOUT + 1)
    assert events == [("C", "broker-a")]


def test_in_sync_set_is_recorded_and_a_new_leader_elects_from_it():
    c = ctl()
    top = 300 * MiB
    slaves = {S1: (1, top - 100), S2: (2, top), S3: (3, 10)}
    _cluster(c, 0, {S1: top - 100, S2: top, S3: 10}, slaves, master_max=top)
    # S3 lags beyond haSlaveFallbehindMax: not in the set
    assert [r.sync_state for r in c.take_dirty()] == [[M, S1, S2]]
    # another controller takes over from the records alone: it never heard the master
    n = ctl()
    n.adopt(c.records(), 100_000)
    _slaves_beat(n, 100_000, slaves)
    assert n.scan(100_000 + TIMEOUT) == []  # the master gets the full timeout
    _slaves_beat(n, 100_000 + TIMEOUT + 1, slaves)
    [rec] = n.scan(100_000 + TIMEOUT + 1)
    assert (rec.master_addr, rec.epoch) == (S2, 2)  # highest own offset among S1, S2
    assert n.groups["broker-a"].sync_state == [S2]  # the new master alone until reports


def test_in_sync_set_shrinks_and_grows_with_the_masters_reports():
    c = ctl()
    _cluster(c, 0, {S1: 1000, S2: 1000}, {S1: (1, 1000), S2: (2, 1000)})
    c.take_dirty()
    c.on_heartbeat(master_hb(max_offset=1000, acks={S1: 1000}), 1)  # S2 left
    [r] = c.take_dirty()
    assert r.sync_state == [M, S1]
    c.on_heartbeat(master_hb(max_offset=1000, acks={S1: 1000}), 2)
    assert c.take_dirty() == []  # no change, nothing to write
    c.on_heartbeat(master_hb(max_offset=1000, acks={S1: 1000, S2: 1000}), 3)
    [r] = c.take_dirty()
    assert r.sync_state == [M, S1, S2]


def test_master_gets_a_lease_and_slaves_the_set():
    c = ctl()
    _cluster(c, 0, {S1: 1000}, {S1: (1, 1000)})
    a = c.on_heartbeat(master_hb(acks={S1: 1000}), 1)
    assert a.lease_ms == TIMEOUT * 4 // 5 and a.sync_state == (M, S1) and not a.unclean
    a = c.on_heartbeat(slave_hb(S1, 1, 1000), 1)
    assert a.lease_ms is None and a.sync_state == (M, S1)


def test_successor_named_by_hand_waits_for_the_old_masters_lease():
    c = ctl()
    _cluster(c, 0, {S1: 1000}, {S1: (1, 1000)})
    c.on_heartbeat(master_hb(acks={S1: 1000}), 5)  # lease until 5 + 8000
    c.elect_master("broker-a", S1, 6)
    a = c.on_heartbeat(slave_hb(S1, 1, 1000), 7)
    assert a.master_addr is None  # not yet: M may still write
    a = c.on_heartbeat(master_hb(acks={S1: 1000}), 8)
    assert (a.master_addr, a.lease_ms) == (S1, None)  # M hears it must step down
    a = c.on_heartbeat(slave_hb(S1, 1, 1000), 5 + 8000)
    assert (a.master_addr, a.broker_id, a.lease_ms) == (S1, 0, 8000)


def test_lease_is_shorter_than_the_master_timeout():
    assert ControllerConfig(controllerMasterTimeout=3000).master_lease_ms == 2400
    assert ControllerConfig(controllerMasterTimeout=500).master_lease_ms == 300
    assert ControllerConfig(controllerMasterTimeout=3000, controllerMasterLease=1000).master_lease_ms == 1000
    with pytest.raises(ValueError, match="controllerMasterLease"):
        ControllerConfig(controllerMasterTimeout=3000, controllerMasterLease=3000).validate()
