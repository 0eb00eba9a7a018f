"""The NameServer's side of the controller: leadership, persistence, forwarding.

Every NameServer with ``enableControllerInNamesrv=true`` runs one. Whether it decides
is ``Leadership``'s call: the embedded controller always leads (one per cluster, state
in a local file); with etcd endpoints one controller leads through an etcd lease and
the others stand by (``etcd_store.EtcdLeadership``).

*The leader* serialises every operation (heartbeat, scan, manual election) under one
lock: the rules (``election.Controller``) change the in-memory groups, the changed
records are written to the store, and only then is the answer sent — a broker never
hears of a decision that is not durable. A write that fails (etcd unreachable, or a
compare-and-swap that lost because another controller wrote: the store conditions
every write on the group's revision and on this controller's leader key) is answered
with an error and the groups are re-read before the next decision.

*A standby* records every broker heartbeat it gets (brokers send theirs to every
controller, as RocketMQ 5's do) without deciding anything, and answers
CONTROLLER_NOT_LEADER naming the leader it reads from etcd. When it takes over it
therefore knows which master has been silent and for how long, and elects at once
rather than after a whole ``controllerMasterTimeout`` of its own. That is safe because
no master lease outlives the leadership that granted it (``lease_cap_ms``): when the
new leader starts, every lease of the old one has run out. CONTROLLER_ELECT_MASTER
and CONTROLLER_GET_SYNC_STATE_DATA are forwarded to the leader and its answer relayed;
a forwarded request keeps its ext fields and body (a signed request stays verifiable
at the leader), and the frame's remark says it was forwarded, so a request is never
forwarded twice.

*Routes.* While the controller knows another master, a broker that registers as id 0
is recorded under the id the controller gave it (``registration_id``); a standby does
this from the records it reads from the store every scan.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from nameserver.controller.config import ControllerConfig
from nameserver.controller.election import Assignment, Controller, ControllerError
from nameserver.controller.state import GroupRecord
from rmq.auth.credentials import Credential
from rmq.common.clock import monotonic_ms
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.controller import (
    BrokerHeartbeatRequestHeader,
    BrokerHeartbeatResponseHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseHeader,
    GetSyncStateDataRequestHeader,
    HeartbeatBody,
    encode_group_statuses,
)
from rmq.protocol.frame import RemotingCommand
from rmq.remoting.client import RemotingClient
from rmq.remoting.errors import RemotingError
from rmq.runtime.service import ServiceLoop, TaskSet

__all__ = ["StateStore", "Leadership", "StaticLeadership", "ControllerService", "FORWARDED_REMARK"]

log = logging.getLogger("rmq.nameserver.controller")

FORWARDED_REMARK = "rmq-controller-forwarded"
_FORWARDED_CODES = frozenset({RequestCode.CONTROLLER_ELECT_MASTER, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA})


class StateStore(Protocol):
    def describe(self) -> str: ...

    async def load(self) -> list[GroupRecord]:
        """Read every group to lead from (may migrate older state: leaders only)."""

    async def peek(self) -> list[GroupRecord]:
        """Read every group, for a standby's view; changes nothing."""

    async def save(self, records: list[GroupRecord]) -> None:
        """Durable when it returns; raises when it is not (nothing to answer from)."""

    async def close(self) -> None: ...


class Leadership(Protocol):
    @property
    def is_leader(self) -> bool: ...

    def leader_addr(self) -> str | None: ...

    def lease_cap_ms(self) -> int | None:
        """How much longer this controller is sure to lead (None: for good)."""

    @property
    def outstanding_lease_ms(self) -> int | None:
        """How long a master lease granted before this controller led may still run
        (None: a whole lease)."""

    async def start(self, on_elected: Callable[[], Coroutine[Any, Any, None]], on_lost: Callable[[], None]) -> None: ...

    async def stop(self) -> None: ...

    async def status(self) -> dict[str, Any]: ...


class StaticLeadership:
    """The embedded controller: the only one, so always the leader."""

    def __init__(self, addr: Callable[[], str]) -> None:
        self._addr = addr

    @property
    def is_leader(self) -> bool:
        return True

    def leader_addr(self) -> str | None:
        return self._addr()

    def lease_cap_ms(self) -> int | None:
        return None

    @property
    def outstanding_lease_ms(self) -> int | None:
        # the process that ran before this one may have granted one just before dying
        return None

    async def start(self, on_elected: Callable[[], Coroutine[Any, Any, None]], on_lost: Callable[[], None]) -> None:
        await on_elected()

    async def stop(self) -> None:
        return None

    async def status(self) -> dict[str, Any]:
        return {"mode": "embedded"}


class ControllerService:
    def __init__(
        self,
        config: ControllerConfig,
        store: StateStore,
        leadership: Leadership,
        self_addr: Callable[[], str],
        *,
        on_failover: Callable[[str, str], None] | None = None,
        client: RemotingClient | None = None,
        credential: Credential | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.leadership = leadership
        self._self_addr = self_addr
        self._on_failover = on_failover
        self.controller: Controller | None = None  # while leading, once the state is loaded
        # while standing by: the brokers' heartbeats, recorded without deciding
        self._observer = self._new_controller()
        self._peeked: dict[str, GroupRecord] = {}
        self._lock = asyncio.Lock()
        self._scan = _ControllerScan(self, config.controllerScanInterval)
        self._client = client
        self._own_client = False
        # TLS for forwarding to the leader (set when the NameServers' links are TLS)
        self.forward_ssl: ssl.SSLContext | None = None
        # signs what this controller itself sends (role-change notices to brokers with ACL)
        self._credential = credential
        self._notices = TaskSet(log)
        self.takeovers = 0
        self._starting = False

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """The embedded controller refuses to start from a state it cannot read (epochs
        handed out again would let two masters write one epoch); on etcd a takeover
        that cannot read is retried."""
        self._starting = True
        try:
            await self.leadership.start(self._elected, self._lost)
        finally:
            self._starting = False
        self._scan.start()

    async def stop(self) -> None:
        await self._scan.stop()
        await self._notices.close()
        await self.leadership.stop()
        async with self._lock:
            self.controller = None
        await self.store.close()
        if self._own_client and self._client is not None:
            await self._client.close()

    async def _elected(self) -> None:
        async with self._lock:
            await self._load_locked()

    def _new_controller(self) -> Controller:
        ctl = Controller(self.config)
        ctl.on_failover = self._on_failover
        return ctl

    def _lost(self) -> None:
        if self.controller is not None:
            log.warning("controller %s: no longer leading; standing by", self._self_addr())
            # what it heard stays useful if it leads again
            self._observer = self.controller
        self.controller = None

    async def _load_locked(self) -> bool:
        """Read every group from the store and lead from it (takeover, or after a write
        that failed). False while the store cannot be read (retried by the scan)."""
        if not self.leadership.is_leader:
            self.controller = None
            return False
        try:
            records = await self.store.load()
        except Exception as e:
            if self._starting and isinstance(self.leadership, StaticLeadership):
                raise
            log.error("controller %s: cannot read its state from %s: %s", self._self_addr(), self.store.describe(), e)
            self.controller = None
            return False
        ctl, self._observer = self._observer, self._new_controller()
        ctl.adopt(records, monotonic_ms(), self.leadership.outstanding_lease_ms)
        self.controller = ctl
        self.takeovers += 1
        log.warning(
            "controller %s leads (%s): %d broker groups, %d brokers heard while standing by",
            self._self_addr(),
            self.store.describe(),
            len(records),
            sum(len(g.members) for g in ctl.groups.values()),
        )
        # a master that went silent while no controller led is replaced now
        before = {n: g.epoch for n, g in ctl.groups.items()}
        ctl.scan(monotonic_ms())
        if await self._persist_locked(ctl) is None:
            self._notify(ctl, before)
        return True

    def _leading(self) -> Controller | None:
        return self.controller if self.leadership.is_leader else None

    async def _persist_locked(self, ctl: Controller) -> str | None:
        """Write what changed; the reason it could not be written, else None."""
        dirty = ctl.take_dirty()
        if not dirty:
            return None
        try:
            await self.store.save(dirty)
        except Exception as e:
            names = ",".join(r.name for r in dirty)
            log.error("controller %s: could not record groups %s: %s", self._self_addr(), names, e)
            self.controller = None
            await self._load_locked()
            return f"the controller could not record its decision for {names}: {e}"
        return None

    # ------------------------------------------------------------------ scan
    async def scan(self) -> None:
        async with self._lock:
            ctl = self._leading()
            if ctl is None:
                if self.leadership.is_leader:
                    await self._load_locked()
                else:
                    self.controller = None
                    await self._peek()
                return
            before = {n: g.epoch for n, g in ctl.groups.items()}
            ctl.scan(monotonic_ms())
            if await self._persist_locked(ctl) is None:
                self._notify(ctl, before)

    async def _peek(self) -> None:
        try:
            self._peeked = {r.name: r for r in await self.store.peek()}
        except Exception as e:
            log.debug("controller %s: standby could not read the groups: %s", self._self_addr(), e)

    # ------------------------------------------------------------------ requests
    async def heartbeat(self, cmd: RemotingCommand) -> RemotingCommand:
        h = BrokerHeartbeatRequestHeader.from_ext_fields(cmd.ext_fields)
        h.check()
        body = HeartbeatBody.from_json(cmd.body)
        async with self._lock:
            ctl = self._leading()
            if ctl is not None:
                a = ctl.on_heartbeat(h, body, monotonic_ms(), self.leadership.lease_cap_ms())
                failed = await self._persist_locked(ctl)
                if failed is not None:
                    return cmd.create_response(ResponseCode.SYSTEM_ERROR, failed)
                return self._answer(cmd, a)
            self._observer.observe(h, body, monotonic_ms())
        leader = self.leadership.leader_addr()
        if leader == self._self_addr():
            leader = None  # our own key, not yet expired: nobody leads for now
        return self._not_leader(
            cmd, f"controller {self._self_addr()} stands by; the leader is {leader or 'not known'}", leader
        )

    def _answer(self, cmd: RemotingCommand, a: Assignment) -> RemotingCommand:
        leader = self._self_addr()
        if a.master_addr is None:
            hdr = BrokerHeartbeatResponseHeader(
                broker_id=a.broker_id,
                sync_state_set=";".join(a.sync_state) or None,
                enable_elect_unclean_master=a.unclean,
                controller_leader_addr=leader,
            )
        else:
            hdr = BrokerHeartbeatResponseHeader(
                a.master_addr,
                a.master_ha_addr,
                0,
                a.epoch,
                a.epoch_start_offset,
                a.broker_id,
                a.lease_ms,
                ";".join(a.sync_state) or None,
                a.unclean,
                leader,
            )
        return cmd.create_response(ResponseCode.SUCCESS, ext_fields=hdr.to_ext_fields())

    async def elect_master(self, cmd: RemotingCommand, requester: str) -> RemotingCommand:
        h = ElectMasterRequestHeader.from_ext_fields(cmd.ext_fields)
        async with self._lock:
            ctl = self._leading()
            if ctl is not None:
                before = {n: g.epoch for n, g in ctl.groups.items()}
                try:
                    rec = ctl.elect_master(h.broker_name, h.broker_addr or None, monotonic_ms())
                except ControllerError as e:
                    log.warning(
                        "electMaster %s %s from %s refused: %s", h.broker_name, h.broker_addr or "", requester, e
                    )
                    return cmd.create_response(e.code, str(e))
                failed = await self._persist_locked(ctl)
                if failed is not None:
                    return cmd.create_response(ResponseCode.SYSTEM_ERROR, failed)
                self._notify(ctl, before)
                log.info(
                    "electMaster from %s: group %s epoch %d master %s",
                    requester,
                    h.broker_name,
                    rec.epoch,
                    rec.master_addr,
                )
                return cmd.create_response(
                    ResponseCode.SUCCESS,
                    ext_fields=ElectMasterResponseHeader(
                        0, rec.master_addr, rec.epoch, rec.start_offset
                    ).to_ext_fields(),
                )
        return await self._forward(cmd)

    async def sync_state_data(self, cmd: RemotingCommand) -> RemotingCommand:
        h = GetSyncStateDataRequestHeader.from_ext_fields(cmd.ext_fields)
        ctl = self._leading()
        if ctl is None:
            return await self._forward(cmd)
        groups = ctl.status(monotonic_ms(), h.broker_name or None)
        return cmd.create_response(ResponseCode.SUCCESS, body=encode_group_statuses(groups))

    async def registration_id(self, broker_name: str, addr: str, broker_id: int) -> int:
        ctl = self._leading()
        if ctl is not None:
            return ctl.registration_id(broker_name, addr, broker_id)
        if broker_id != 0:
            return broker_id
        r = self._peeked.get(broker_name)
        if r is not None and r.master_addr not in (None, addr):
            # a view up to a scan old: a master promoted since then registers first
            await self._peek()
            r = self._peeked.get(broker_name)
        if r is None or not r.master_addr or r.master_addr == addr:
            return broker_id
        taken = {i for a, i in r.ids.items() if a != addr}
        mine = r.ids.get(addr)
        return mine if mine is not None and mine > 0 else max(taken | {0}) + 1

    async def status(self) -> dict[str, Any]:
        """This controller's view (GET_CONTROLLER_METADATA_INFO's body)."""
        ctl = self._leading()
        return {
            "controller": self._self_addr(),
            "isLeader": ctl is not None,
            "leader": self.leadership.leader_addr(),
            "store": self.store.describe(),
            "groups": sorted(ctl.group_names()) if ctl is not None else sorted(self._peeked),
            "takeovers": self.takeovers,
            "leadership": await self.leadership.status(),
        }

    # ------------------------------------------------------------------ notices
    def _remoting(self) -> RemotingClient:
        client = self._client
        if client is None:
            client = self._client = RemotingClient(
                name="controller-client", connect_timeout=1.0, ssl=self.forward_ssl, request_hook=self._sign
            )
            self._own_client = True
        return client

    def _sign(self, addr: str, cmd: RemotingCommand) -> None:
        # a forwarded request keeps its sender's signature
        if self._credential is not None and "AccessKey" not in (cmd.ext_fields or {}):
            self._credential.sign(addr, cmd)

    def _notify(self, ctl: Controller, before: dict[str, int]) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED (RocketMQ 5's 1008, oneway) to the live members of
        every group whose epoch moved: they heartbeat at once instead of at their next
        interval, and learn the decision from that answer (the notice itself decides
        nothing)."""
        for name, g in ctl.groups.items():
            if g.epoch == before.get(name, g.epoch) or g.master_addr is None:
                continue
            ext = {
                "brokerName": name,
                "masterAddress": g.master_addr,
                "masterEpoch": str(g.epoch),
                "masterBrokerId": "0",
            }
            for addr in ctl.live_members(name, monotonic_ms()):
                cmd = RemotingCommand(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, ext_fields=dict(ext))
                self._notices.spawn(self._send_notice(addr, cmd), name=f"notify {addr}")

    async def _send_notice(self, addr: str, cmd: RemotingCommand) -> None:
        try:
            await asyncio.wait_for(self._remoting().invoke_oneway(addr, cmd), 1.0)
        except (RemotingError, OSError, TimeoutError) as e:
            log.debug("controller: role-change notice to %s not sent: %s", addr, e)

    # ------------------------------------------------------------------ forwarding
    def _not_leader(self, cmd: RemotingCommand, why: str, leader: str | None = None) -> RemotingCommand:
        ext = {"controllerLeaderAddr": leader} if leader else {}
        return cmd.create_response(ResponseCode.CONTROLLER_NOT_LEADER, why, ext_fields=ext)

    async def _forward(self, cmd: RemotingCommand) -> RemotingCommand:
        me = self._self_addr()
        leader = self.leadership.leader_addr()
        if cmd.code not in _FORWARDED_CODES or (cmd.remark or "").startswith(FORWARDED_REMARK):
            return self._not_leader(cmd, f"controller {me} does not lead (leader: {leader or 'none'})", leader)
        if not leader or leader == me:
            return self._not_leader(cmd, f"no controller leads now (asked {me}); {self.store.describe()}")
        client = self._remoting()
        fwd = RemotingCommand(
            cmd.code, ext_fields=dict(cmd.ext_fields or {}), body=cmd.body, remark=f"{FORWARDED_REMARK} by {me}"
        )
        try:
            resp = await client.invoke(leader, fwd, 1.0)
        except (RemotingError, OSError) as e:
            return self._not_leader(cmd, f"controller {me} stands by; the leader {leader} is unreachable: {e}", leader)
        return cmd.create_response(resp.code, resp.remark, ext_fields=dict(resp.ext_fields or {}), body=resp.body)


class _ControllerScan(ServiceLoop):
    """The controller's tick (controllerScanInterval): elections, takeover retries."""

    def __init__(self, service: ControllerService, interval_ms: int) -> None:
        super().__init__("namesrv-controller", log)
        self._service = service
        self._interval = interval_ms / 1000

    def interval(self) -> float:
        return self._interval

    async def run_once(self) -> None:
        await self._service.scan()
