"""Failover controller: elects a new master for a broker group whose master went silent.

Design note
-----------
*Where it runs.* Inside a NameServer started with ``enableControllerInNamesrv=true``,
as RocketMQ 5 can run its controller in the NameServer. This module is the rules
only, no I/O: ``service.py`` feeds it heartbeats and scan ticks, persists what it
decided (a local file, or etcd where several controllers run and one leads; every
write there is a compare-and-swap on the group's revision, fenced by the leader's
key) and answers only once the decision is durable.

*Why pull, through the heartbeats.* Every broker sends BROKER_HEARTBEAT (904) once a
second with its role, epoch, CommitLog max offset and, from a master, each slave's
acked offset. The answer carries the group's current master, its HA address, the
epoch and where it began, and the broker id the asker must register with. A decision
therefore reaches every broker within a heartbeat, with no push channel to keep
open, nothing to retry when a broker was unreachable at the moment of the decision,
and the same path for a broker that comes back a day later: it learns who leads on
its first heartbeat. The elected slave sees itself named master; the others see whom
to follow; a returning old master sees that it is no longer the master.

*Election.* A group's master is silent when its last heartbeat is older than
``controllerMasterTimeout`` (10 s). Candidates are the live slaves of the group's
in-sync set (RocketMQ 5's SyncStateSet), which is persisted with the group: the
master's reports propose it (a slave is in sync when its acked offset is within
``haSlaveFallbehindMax`` of the master's max offset and not behind the epoch's
start) and the controller records every change before answering, so a controller
that takes over knows it without having heard the dead master. The best candidate
has the highest of (last acked offset, own max offset), ties to the lowest broker
id. No candidate, no election (``enableElectUncleanMaster=true`` allows any live
slave, losing what it lacks). The epoch goes up by one and starts at the elected
slave's max offset; the new master's in-sync set is itself until its slaves catch
up. The promoted broker reports the offset its epoch really starts at
(``epochStartOffset``) in its heartbeats; the controller records that.

*The master lease.* The answer to the master's heartbeat carries
``masterLeaseMillis`` (``controllerMasterLease``, shorter than the timeout): the
broker counts it from when it sent that heartbeat and stops acknowledging writes when
it runs out, so an isolated master has stopped before anyone may replace it. A master
named by hand while the old one is alive is told it leads only once every lease the
old one holds has run out (``lease_until``); a controller that just took over
assumes the recorded master was granted a lease the moment before.

*The epoch file.* Each broker keeps its own history in
``<storePathRootDir>/epochFileCheckpoint`` (``ha.epoch.EpochFile``): epoch N began at
CommitLog offset S, written by that epoch's one master. The promoted broker appends
(new epoch, its max offset) before taking writes; a slave appends an epoch when it
receives data of it. Two logs with the same epoch starting at the same offset hold the
same bytes there.

*A returning old master* heartbeats with its old epoch and role; the answer names the
new master and a broker id > 0. It must: become a SLAVE (refuse writes), send its
epoch history (``EpochFile.entries(max_offset)``, ``rmq.protocol.epoch`` codec) to the
new master in the HA handshake and get the master's, compute
``find_consistent_point(local, remote)`` (both closed with their max offsets),
``await store.truncate_to(point)`` and ``await epoch_file.truncate_suffix(point)``,
then catch up from there like any slave and re-register with its new id.

*Routes.* The promoted broker re-registers with brokerId 0; RouteInfoManager drops
its old id and replaces the dead master's address at id 0. While the controller
knows another master, a broker that still registers as id 0 is registered under the
id the controller assigned it, so clients are not routed to a fenced master.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import msgpack

from nameserver.controller.config import ControllerConfig
from nameserver.controller.state import HISTORY_KEPT, GroupRecord
from rmq.common.clock import now_ms
from rmq.protocol.codes import ResponseCode
from rmq.protocol.controller import (
    MASTER_ROLES,
    ROLE_SLAVE,
    BrokerHeartbeatRequestHeader,
    EpochRecord,
    GroupStatus,
    HeartbeatBody,
    MemberStatus,
)

__all__ = ["Controller", "ControllerError", "Assignment", "CONTROLLER_FILE_NAME"]

log = logging.getLogger("rmq.nameserver.controller")

CONTROLLER_FILE_NAME = "controller.msgpack"
_FILE_VERSION = 1


class ControllerError(Exception):
    """A request the controller cannot honour; ``code`` is the response code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Assignment:
    """The answer to a heartbeat: who leads the group, and the asker's broker id."""

    master_addr: str | None
    master_ha_addr: str | None
    epoch: int
    epoch_start_offset: int
    broker_id: int
    lease_ms: int | None = None  # to the master only
    sync_state: tuple[str, ...] = ()
    unclean: bool = False


@dataclass(slots=True)
class _Member:
    addr: str
    broker_id: int
    role: str
    epoch: int
    max_offset: int
    ha_addr: str | None
    last_heartbeat_ms: int
    acks: dict[str, int] = field(default_factory=dict)  # a master's report, by addr
    acks_master_max: int = 0  # its max offset in that report


@dataclass(slots=True)
class _Group(GroupRecord):
    """A group's persisted record plus what the controller only keeps in memory."""

    members: dict[str, _Member] = field(default_factory=dict)
    since_ms: int = 0  # monotonic time the controller started watching it
    # the broker last granted a master lease, and until when (monotonic) it may run:
    # another broker named master is told so only after that
    lease_holder: str = ""
    lease_until: int = 0
    warned: str = ""  # last "cannot elect" reason logged

    def record(self) -> GroupRecord:
        return GroupRecord(
            self.cluster,
            self.name,
            self.epoch,
            self.epoch_start_offset,
            self.master_addr,
            self.master_ha_addr,
            dict(self.ids),
            list(self.history[-HISTORY_KEPT:]),
            list(self.sync_state),
        )

    def load(self, r: GroupRecord) -> None:
        self.cluster, self.epoch, self.epoch_start_offset = r.cluster, r.epoch, r.epoch_start_offset
        self.master_addr, self.master_ha_addr = r.master_addr, r.master_ha_addr
        self.ids, self.history, self.sync_state = dict(r.ids), list(r.history), list(r.sync_state)


class Controller:
    """The controller's state and rules; no I/O. The server feeds it heartbeats and
    scan ticks with a monotonic ``now_ms``, and persists ``snapshot()`` whenever
    ``version`` moved, before answering."""

    def __init__(self, config: ControllerConfig, wall_clock: Callable[[], int] = now_ms) -> None:
        config.validate()
        self.config = config
        self._wall = wall_clock
        self.groups: dict[str, _Group] = {}
        self.version = 0  # bumped by every change worth persisting
        self.dirty: set[str] = set()  # groups changed since take_dirty()
        # (cluster, brokerName) on every new master after the first: the NameServer
        # counts failovers with it (rocketmq_namesrv failover metric)
        self.on_failover: Callable[[str, str], None] | None = None

    # ------------------------------------------------------------------ persistence
    def _changed(self, g: _Group) -> None:
        self.version += 1
        self.dirty.add(g.name)

    def take_dirty(self) -> list[GroupRecord]:
        """The records changed since the last call (to persist before answering)."""
        out = [self.groups[n].record() for n in sorted(self.dirty) if n in self.groups]
        self.dirty.clear()
        return out

    def records(self) -> list[GroupRecord]:
        return [g.record() for g in self.groups.values()]

    def adopt(self, records: Iterable[GroupRecord], now_ms: int, outstanding_lease_ms: int | None = None) -> None:
        """Take these records as the truth (start, takeover, or a write that failed).
        Members heard so far stay (a standby observed them). ``outstanding_lease_ms``:
        how long a master may still hold a lease granted before (the embedded
        controller restarted: a whole lease; a takeover on etcd: none, the previous
        leader's leases ended with its leadership)."""
        held = self.config.master_lease_ms if outstanding_lease_ms is None else outstanding_lease_ms
        for r in records:
            g = self.groups.get(r.name)
            if g is None:
                g = self.groups[r.name] = _Group(r.cluster, r.name)
            g.load(r)
            g.since_ms = now_ms
            g.lease_holder, g.lease_until = g.master_addr or "", now_ms + held
            self.dirty.discard(r.name)
            log.info(
                "controller: group %s (cluster %s): epoch %d from offset %d, master %s, in sync %s",
                g.name,
                g.cluster,
                g.epoch,
                g.epoch_start_offset,
                g.master_addr,
                ",".join(g.sync_state) or "-",
            )

    def forget(self, name: str) -> None:
        """Drop a group whose record could not be written (it is re-read before use)."""
        self.groups.pop(name, None)
        self.dirty.discard(name)

    def snapshot(self) -> bytes:
        return self.snapshot_of(g.record() for g in self.groups.values())

    @staticmethod
    def snapshot_of(records: Iterable[GroupRecord]) -> bytes:
        groups = {r.name: r.to_obj() for r in records}
        return msgpack.packb({"version": _FILE_VERSION, "groups": groups}, use_bin_type=True)

    @staticmethod
    def parse_snapshot(raw: bytes) -> list[GroupRecord]:
        """ValueError if it is not a snapshot: a controller must not start from a file
        it cannot read and hand out epochs again."""
        try:
            obj = msgpack.unpackb(raw, raw=False)
        except Exception as e:  # msgpack raises several types
            raise ValueError(f"controller file is damaged: {type(e).__name__}: {e}") from None
        if not isinstance(obj, dict) or obj.get("version") != _FILE_VERSION or not isinstance(obj.get("groups"), dict):
            raise ValueError("controller file is damaged: not a version-1 controller snapshot")
        try:
            return [GroupRecord.from_obj(str(n), d) for n, d in obj["groups"].items()]
        except ValueError as e:
            raise ValueError(f"controller file is damaged: {e}") from None

    def restore(self, raw: bytes, now_ms: int) -> None:
        """Adopt a snapshot (start-up)."""
        self.groups = {}
        self.adopt(self.parse_snapshot(raw), now_ms)

    # ------------------------------------------------------------------ heartbeats
    def observe(self, hb: BrokerHeartbeatRequestHeader, body: HeartbeatBody, now_ms: int) -> _Member:
        """Record what a heartbeat says about its broker, deciding nothing. A standby
        controller does only this: when it takes over it already knows who has been
        silent, and elects at once instead of waiting a whole timeout."""
        g = self.groups.get(hb.broker_name)
        if g is None:
            g = self.groups[hb.broker_name] = _Group(hb.cluster_name, hb.broker_name, since_ms=now_ms)
        m = g.members.get(hb.broker_addr)
        if m is None:
            m = g.members[hb.broker_addr] = _Member(
                hb.broker_addr, hb.broker_id, hb.role, hb.epoch, hb.max_offset, body.ha_server_addr, now_ms
            )
        m.broker_id, m.role, m.epoch, m.max_offset = hb.broker_id, hb.role, hb.epoch, hb.max_offset
        m.ha_addr = body.ha_server_addr or m.ha_addr
        m.last_heartbeat_ms = now_ms
        if hb.role in MASTER_ROLES:
            m.acks = self._resolve_acks(g, body.slave_ack_offsets)
            m.acks_master_max = hb.max_offset
        return m

    def on_heartbeat(
        self, hb: BrokerHeartbeatRequestHeader, body: HeartbeatBody, now_ms: int, lease_cap_ms: int | None = None
    ) -> Assignment:
        """``lease_cap_ms``: how much longer this controller is sure to lead; no master
        lease outlives it, so a controller taking over finds none outstanding."""
        g = self.groups.get(hb.broker_name)
        if g is not None and g.cluster != hb.cluster_name and g.warned != f"cluster:{hb.broker_addr}":
            g.warned = f"cluster:{hb.broker_addr}"
            log.warning(
                "controller: broker %s of group %s says cluster %s, the group is in %s",
                hb.broker_addr,
                g.name,
                hb.cluster_name,
                g.cluster,
            )
        if g is None or hb.broker_addr not in g.members:
            log.info(
                "controller: group %s: broker %s (id %d, %s, epoch %d, max offset %d) heard for the first time",
                hb.broker_name,
                hb.broker_addr,
                hb.broker_id,
                hb.role,
                hb.epoch,
                hb.max_offset,
            )
        m = self.observe(hb, body, now_ms)
        g = self.groups[hb.broker_name]

        addr, ha_addr = hb.broker_addr, m.ha_addr
        if g.master_addr is None:
            if hb.role in MASTER_ROLES and hb.broker_id == 0:
                self._adopt_first_master(g, hb, ha_addr)
        elif addr == g.master_addr:
            self._master_report(g, hb, ha_addr)
        elif hb.role in MASTER_ROLES and hb.broker_id == 0 and g.warned != f"stale:{addr}":
            g.warned = f"stale:{addr}"
            log.warning(
                "controller: group %s: %s still acts as master (epoch %d) but %s leads "
                "epoch %d; it is told to step down",
                g.name,
                addr,
                hb.epoch,
                g.master_addr,
                g.epoch,
            )
        if addr == g.master_addr:
            self._propose_sync_state(g)
        return self._assignment(g, addr, hb.broker_id, now_ms, lease_cap_ms)

    def _resolve_acks(self, g: _Group, acks: dict[str, int]) -> dict[str, int]:
        """Slave names to addresses: "ip:port" as is, a decimal id via the members."""
        out: dict[str, int] = {}
        for key, off in acks.items():
            if key.isdigit():
                bid = int(key)
                addr = next(
                    (a for a, mem in g.members.items() if mem.broker_id == bid and mem.role == ROLE_SLAVE), None
                )
                if addr is None:
                    continue
                key = addr
            out[key] = off
        return out

    def _adopt_first_master(self, g: _Group, hb: BrokerHeartbeatRequestHeader, ha_addr: str | None) -> None:
        if hb.epoch > 0:
            epoch, start = hb.epoch, max(hb.epoch_start_offset, 0)
            why = f"adopted running master reporting epoch {hb.epoch}"
        else:
            # Epoch 1 covers everything this master wrote before the controller knew it:
            # its slaves copied the same bytes, so they share it from offset 0.
            epoch, start = max(g.epoch + 1, 1), 0
            why = "adopted first master"
        self._decide(g, hb.broker_addr, ha_addr, epoch, start, why)

    def _master_report(self, g: _Group, hb: BrokerHeartbeatRequestHeader, ha_addr: str | None) -> None:
        if ha_addr and ha_addr != g.master_ha_addr:
            g.master_ha_addr = ha_addr
            self._changed(g)
        if hb.epoch > g.epoch:
            # the controller's file is older than the broker's history (lost, restored
            # from a backup): never hand out an epoch the broker already has
            self._decide(
                g,
                hb.broker_addr,
                ha_addr,
                hb.epoch,
                max(hb.epoch_start_offset, 0),
                f"master reports newer epoch {hb.epoch}",
            )
        elif hb.epoch == g.epoch and hb.epoch_start_offset >= 0 and hb.epoch_start_offset != g.epoch_start_offset:
            log.info(
                "controller: group %s: epoch %d starts at %d on master %s (recorded %d)",
                g.name,
                g.epoch,
                hb.epoch_start_offset,
                hb.broker_addr,
                g.epoch_start_offset,
            )
            g.epoch_start_offset = hb.epoch_start_offset
            if g.history and g.history[-1].epoch == g.epoch:
                h = g.history[-1]
                g.history[-1] = EpochRecord(h.epoch, hb.epoch_start_offset, h.master_addr, h.reason, h.time_ms)
            self._changed(g)

    def _propose_sync_state(self, g: _Group) -> None:
        """The master's report decides the in-sync set (recorded before the answer)."""
        master = g.members.get(g.master_addr or "")
        if master is None:
            return
        fallbehind = self.config.haSlaveFallbehindMax
        wanted = [g.master_addr or ""] + sorted(
            a
            for a, ack in master.acks.items()
            if a != g.master_addr and master.acks_master_max - ack < fallbehind and ack >= g.epoch_start_offset
        )
        if wanted == g.sync_state:
            return
        before = set(g.sync_state)
        joined = [a for a in wanted if a not in before]
        left = sorted(before - set(wanted))
        g.sync_state = wanted
        self._changed(g)
        log.info(
            "controller: group %s epoch %d: in-sync set %s (joined %s, left %s)",
            g.name,
            g.epoch,
            ",".join(wanted),
            ",".join(joined) or "-",
            ",".join(left) or "-",
        )

    def _assignment(
        self, g: _Group, addr: str, reported_id: int, now_ms: int, lease_cap_ms: int | None = None
    ) -> Assignment:
        unclean = self.config.enableElectUncleanMaster
        if g.master_addr is None or (addr == g.master_addr != g.lease_holder and now_ms < g.lease_until):
            # no master yet, or a successor named while its predecessor may still
            # hold a lease: it learns it leads once that lease has run out
            return Assignment(
                None, None, g.epoch, g.epoch_start_offset, reported_id, None, tuple(g.sync_state), unclean
            )
        bid = self._id_for(g, addr, reported_id)
        lease = None
        if addr == g.master_addr:
            lease = (
                self.config.master_lease_ms if lease_cap_ms is None else min(self.config.master_lease_ms, lease_cap_ms)
            )
            if lease > 0:
                g.lease_holder, g.lease_until = addr, max(g.lease_until, now_ms + lease)
            else:
                lease = None
        return Assignment(
            g.master_addr, g.master_ha_addr, g.epoch, g.epoch_start_offset, bid, lease, tuple(g.sync_state), unclean
        )

    def _id_for(self, g: _Group, addr: str, reported_id: int) -> int:
        """0 for the master; else the broker's id, or a free one if it has none that is
        not the master's (a returning master gets the id its successor left)."""
        if addr == g.master_addr:
            if g.ids.get(addr) != 0:
                g.ids[addr] = 0
                self._changed(g)
            return 0
        taken = {i for a, i in g.ids.items() if a != addr}
        mine = g.ids.get(addr)
        if mine is not None and mine > 0 and mine not in taken:
            return mine
        bid = reported_id if reported_id > 0 and reported_id not in taken else 1
        while bid in taken:
            bid += 1
        g.ids[addr] = bid
        self._changed(g)
        return bid

    def registration_id(self, broker_name: str, addr: str, broker_id: int) -> int:
        """The id a REGISTER_BROKER should be recorded under: a broker that registers
        as master (0) while the controller knows another master gets its assigned id."""
        g = self.groups.get(broker_name)
        if broker_id != 0 or g is None or g.master_addr is None or g.master_addr == addr:
            return broker_id
        return self._id_for(g, addr, 0)

    # ------------------------------------------------------------------ election
    def scan(self, now_ms: int) -> list[EpochRecord]:
        """Elect for every group whose master has been silent too long."""
        out = []
        for g in self.groups.values():
            if g.master_addr is None:
                continue
            silent = now_ms - self._last_master_heartbeat(g)
            if silent <= self.config.controllerMasterTimeout:
                continue
            chosen = self._best_candidate(g, now_ms, self.config.enableElectUncleanMaster)
            if chosen is None:
                why = "no live in-sync slave"
                if g.warned != why:
                    g.warned = why
                    log.warning(
                        "controller: group %s: master %s silent for %d ms, %s to elect (enableElectUncleanMaster=%s)",
                        g.name,
                        g.master_addr,
                        silent,
                        why,
                        self.config.enableElectUncleanMaster,
                    )
                continue
            out.append(self._elect(g, chosen, f"master {g.master_addr} silent for {silent} ms"))
        return out

    def _last_master_heartbeat(self, g: _Group) -> int:
        m = g.members.get(g.master_addr or "")
        return m.last_heartbeat_ms if m is not None else g.since_ms

    def _alive(self, m: _Member, now_ms: int) -> bool:
        return now_ms - m.last_heartbeat_ms <= self.config.controllerMasterTimeout

    def _in_sync(self, g: _Group, m: _Member) -> tuple[bool, int | None]:
        """(in the recorded in-sync set, acked offset by the master's last report)."""
        master = g.members.get(g.master_addr or "")
        ack = master.acks.get(m.addr) if master is not None else None
        return m.addr in g.sync_state and m.addr != g.master_addr, ack

    def _best_candidate(self, g: _Group, now_ms: int, unclean: bool) -> _Member | None:
        best: tuple[int, int, str] | None = None
        chosen = None
        for m in g.members.values():
            if m.addr == g.master_addr or m.role != ROLE_SLAVE or not self._alive(m, now_ms):
                continue
            in_sync, ack = self._in_sync(g, m)
            if not in_sync and not unclean:
                continue
            reach = max(ack if ack is not None else -1, m.max_offset)
            key = (-reach, g.ids.get(m.addr, m.broker_id), m.addr)
            if best is None or key < best:
                best, chosen = key, m
        return chosen

    def _elect(self, g: _Group, chosen: _Member, why: str) -> EpochRecord:
        ack = self._in_sync(g, chosen)[1]
        start = max(chosen.max_offset, ack if ack is not None else 0)
        old = g.master_addr
        if old is not None:
            g.ids.pop(old, None)
            prev = g.members.get(old)
            if prev is not None:
                prev.acks = {}
        return self._decide(g, chosen.addr, chosen.ha_addr, g.epoch + 1, start, why)

    def _decide(self, g: _Group, master: str, ha_addr: str | None, epoch: int, start: int, why: str) -> EpochRecord:
        rec = EpochRecord(epoch, start, master, why, self._wall())
        failover = g.master_addr is not None and g.master_addr != master
        g.master_addr, g.master_ha_addr = master, ha_addr
        g.epoch, g.epoch_start_offset = epoch, start
        g.ids[master] = 0
        g.history.append(rec)
        del g.history[:-HISTORY_KEPT]
        g.sync_state = [master]
        g.warned = ""
        self._changed(g)
        log.warning("controller: group %s: epoch %d from offset %d, master %s (%s)", g.name, epoch, start, master, why)
        if failover and self.on_failover is not None:
            self.on_failover(g.cluster, g.name)
        return rec

    def elect_master(self, broker_name: str, broker_addr: str | None, now_ms: int) -> EpochRecord:
        """Manual switch (CONTROLLER_ELECT_MASTER). With broker_addr: promote that
        live, in-sync slave, even over a live master (which steps down on its next
        heartbeat; what it wrote past the new epoch's start is truncated when it
        rejoins). Without: elect as the scan would, but now; refused while the master
        is alive."""
        g = self.groups.get(broker_name)
        if g is None:
            raise ControllerError(
                ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST, f"the controller knows no broker group {broker_name}"
            )
        unclean = self.config.enableElectUncleanMaster
        if broker_addr is None:
            master = g.members.get(g.master_addr or "")
            if master is not None and self._alive(master, now_ms):
                raise ControllerError(
                    ResponseCode.CONTROLLER_INVALID_REQUEST,
                    f"master {g.master_addr} of {broker_name} is alive; name the broker to promote with --brokerAddr",
                )
            chosen = self._best_candidate(g, now_ms, unclean)
            if chosen is None:
                raise ControllerError(
                    ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE, f"no live in-sync slave in {broker_name} to elect"
                )
            return self._elect(g, chosen, "electMaster (controller's choice)")
        if broker_addr == g.master_addr:
            raise ControllerError(
                ResponseCode.CONTROLLER_INVALID_REQUEST,
                f"{broker_addr} is already the master of {broker_name} (epoch {g.epoch})",
            )
        m = g.members.get(broker_addr)
        if m is None or not self._alive(m, now_ms):
            raise ControllerError(
                ResponseCode.CONTROLLER_BROKER_NOT_ALIVE, f"{broker_addr} is not a live broker of {broker_name}"
            )
        if m.role != ROLE_SLAVE:
            raise ControllerError(ResponseCode.CONTROLLER_INVALID_REQUEST, f"{broker_addr} is a {m.role}, not a slave")
        in_sync, ack = self._in_sync(g, m)
        if not in_sync and not unclean:
            raise ControllerError(
                ResponseCode.CONTROLLER_INVALID_REPLICAS,
                f"{broker_addr} is not in sync with master {g.master_addr} "
                f"(acked {ack if ack is not None else 'nothing'})",
            )
        return self._elect(g, m, f"electMaster -b {broker_addr}")

    # ------------------------------------------------------------------ status
    def status(self, now_ms: int, broker_name: str | None = None) -> list[GroupStatus]:
        out = []
        names = sorted(self.groups) if broker_name is None else [broker_name]
        for name in names:
            g = self.groups.get(name)
            if g is None:
                continue
            members = []
            for m in sorted(g.members.values(), key=lambda m: (g.ids.get(m.addr, m.broker_id), m.addr)):
                in_sync, ack = self._in_sync(g, m)
                members.append(
                    MemberStatus(
                        m.addr,
                        g.ids.get(m.addr, m.broker_id),
                        m.role,
                        m.epoch,
                        m.max_offset,
                        ack,
                        m.addr == g.master_addr or in_sync,
                        self._alive(m, now_ms),
                        now_ms - m.last_heartbeat_ms,
                    )
                )
            master = g.members.get(g.master_addr or "")
            out.append(
                GroupStatus(
                    g.cluster,
                    g.name,
                    g.epoch,
                    g.epoch_start_offset,
                    g.master_addr,
                    master is not None and self._alive(master, now_ms),
                    members,
                    list(g.history),
                )
            )
        return out

    def live_members(self, broker_name: str, now_ms: int) -> list[str]:
        g = self.groups.get(broker_name)
        return [] if g is None else [a for a, m in g.members.items() if self._alive(m, now_ms)]

    def group_names(self) -> Iterable[str]:
        return list(self.groups)
