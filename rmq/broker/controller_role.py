"""Controller mode: the broker's side of automatic failover (RocketMQ 5's
ReplicasManager, on our controller in a NameServer: nameserver/controller/).

Enabled by ``enableControllerMode=true`` or a ``controllerAddr``; off by default (classic
static roles). Then ``brokerRole`` names the role the broker takes while it leads
(SYNC_MASTER or ASYNC_MASTER) and the controller decides whether it leads:

* Every ``brokerHeartbeatInterval`` (1 s) the broker sends BROKER_HEARTBEAT (904) with
  its role, epoch, CommitLog max offset and epoch start; a master adds its confirmed
  in-sync slaves' acks and its HA address. The answer names the group's master, its HA
  address, the epoch and this broker's id, the in-sync set and, to the master, its
  lease. As RocketMQ 5's, it goes to every controller (a standby records it, so after a
  takeover it knows who went silent, and answers CONTROLLER_NOT_LEADER); the broker acts
  on the leader's SUCCESS as soon as it comes, so a controller that does not answer
  costs nothing but its own request, and a round is bounded well under the lease.
* The master lease (rmq/broker/master_lease.py): counted from when the answered
  heartbeat was sent; the send path refuses writes once it runs out, before the
  controller may elect a successor. While no controller answers at all, the master's
  failsafe asks its in-sync slaves (RMQ_FAILSAFE_CHECK, ``failsafe_round``); a slave
  confirms only if it cannot reach a controller either, asked then (``failsafe_check``).
* Until the first answer the broker is *pending*: its store refuses writes. It
  heartbeats as its master role with brokerId 0 when configured with brokerId 0 (the
  controller adopts such a broker as a new group's first master), else as a SLAVE.
* Named master while not leading -> ``become_master``: stop the HA client, cut an
  incomplete replicated tail, finish dispatch, record the epoch's entry (epoch, max
  offset) durably in the epoch file, start the HA service, then take writes with
  brokerId 0 and re-register with every NameServer at once.
* Another broker named master -> ``become_slave``: refuse writes first (waiting
  SYNC_MASTER puts are answered FLUSH_SLAVE_TIMEOUT when the HA service stops),
  re-register with the id the controller gave, replicate from the new master.

This module only decides: ``ControllerRole`` heartbeats and acts on the answers by
calling the one role-change routine (rmq/broker/roles.py); ``FailoverEpochs`` keeps the
epoch file and is what the broker hands the HA service and client as their handshake
hooks.

The HA handshake carries both epoch histories (ha/protocol.py). The slave takes
``find_consistent_point`` of the two, each closed with its broker's max offset; if its
log goes further it truncates the store and its epoch file there (what it wrote that
no one else has). It then records the master's later epochs one by one *as its log
passes their start offsets*, not the whole list at once: an entry (epoch, start) says
"my bytes from start on were written by that epoch's master", which is true only once
the bytes are here; recorded early, a slave promoted before reaching start would hold
an entry beyond its own end, and its new epoch would start before the last one. An
entry recorded late (crash in between) only makes the next handshake truncate a few
bytes that were in fact the same.
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import time
from collections.abc import Callable
from typing import Any

from ha.client import HandshakeRefused
from ha.epoch import EpochFile
from ha.protocol import MasterAccept, SlaveHello
from ha.service import HAService
from rmq.broker.config import BrokerConfig, ha_address
from rmq.broker.master_lease import MasterLease
from rmq.broker.roles import RoleServices
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.controller import (
    ROLE_SLAVE,
    BrokerHeartbeatRequestHeader,
    BrokerHeartbeatResponseHeader,
    FailsafeCheckRequestHeader,
    HeartbeatBody,
)
from rmq.protocol.epoch import EpochEntry, close_last, find_consistent_point
from rmq.protocol.errors import ProtocolError
from rmq.protocol.frame import RemotingCommand
from rmq.remoting.client import RemotingClient
from rmq.remoting.errors import RemotingError
from rmq.runtime.service import ServiceLoop, TaskSet
from rmq.store.config import BrokerRole, MessageStoreConfig
from rmq.store.message_store import MessageStore

__all__ = ["PENDING", "MASTER", "SLAVE", "FailoverError", "FailoverEpochs", "ControllerRole"]

log = logging.getLogger("rmq.broker.role")

PENDING, MASTER, SLAVE = "PENDING", "MASTER", "SLAVE"
# newest epoch entries a handshake carries (one per failover; the frame holds ~3000)
HANDSHAKE_EPOCHS = 1024
# a master heartbeats this long after its lease ended when that comes before the next
# round (seconds)
LEASE_END_SLACK = 0.01


class FailoverError(HandshakeRefused):
    """The HA handshake cannot go on (no common history, a stale master...)."""


class FailoverEpochs:
    """This broker's epoch history (ha/epoch.py's file) and the HA handshake hooks over
    it: the histories exchanged, the slave's truncation to the consistent point, the
    master's epochs recorded as the slave's log passes their starts."""

    def __init__(self, store: MessageStore, root_dir: str) -> None:
        self.store = store
        self.root_dir = root_dir
        self.epoch_file: EpochFile | None = None
        self.truncations = 0  # handshakes that cut this broker's log
        # the master this slave follows (for messages); set by the controller's decision
        self.master = "?"
        # the HA service's in-sync set shrank: the controller is told at once
        self.on_shrink: Callable[[], None] = lambda: None
        self._pending: list[EpochEntry] = []
        # one store/epoch-file change at a time: a handshake's truncation, a role
        # change, recording passed epochs
        self.lock = asyncio.Lock()

    async def load(self) -> None:
        self.epoch_file = await asyncio.to_thread(EpochFile.load, self.root_dir)

    @property
    def file(self) -> EpochFile:
        assert self.epoch_file is not None, "FailoverEpochs.load() first"
        return self.epoch_file

    # ------------------------------------------------------------------ ReplicationHooks
    def epoch_and_start(self) -> tuple[int, int]:
        ef = self.epoch_file
        return ef.epoch_and_start() if ef is not None else (0, -1)

    def ha_service_options(self) -> dict[str, Any]:
        return {
            "epochs_provider": self.epochs_for_handshake,
            "hello_check": self.hello_check,
            "confirm_reads": True,
            "on_shrink": self._shrunk,
        }

    def ha_client_options(self) -> dict[str, Any]:
        return {"epochs_provider": self.epochs_for_handshake, "accept_hook": self.on_accept}

    def _shrunk(self) -> None:
        self.on_shrink()

    # ------------------------------------------------------------------ HA handshake
    def epochs_for_handshake(self) -> list[EpochEntry]:
        return self.file.entries()[-HANDSHAKE_EPOCHS:]

    def hello_check(self, h: SlaveHello) -> str | None:
        """Master side: a slave that knows a newer epoch than ours follows the real
        master; we are the stale one."""
        mine = max(self.file.last_epoch(), 0)
        if h.epoch > mine:
            return f"the slave is at epoch {h.epoch}, this master only at {mine}: this master is stale"
        return None

    async def on_accept(self, accept: MasterAccept) -> None:
        """Slave side, before the first report: compare histories, truncate what the
        master does not have, then take the master's later epochs as the log reaches
        them."""
        async with self.lock:
            await self._truncate_to_master(accept, self.master)

    async def _truncate_to_master(self, accept: MasterAccept, master: str) -> None:
        st = self.store
        ef = self.file
        if accept.epochs is None:
            raise FailoverError(f"master {master} sent no epoch history (not in controller mode?)")
        theirs = list(accept.epochs)
        mine = ef.entries()
        my_max = st.max_phy_offset
        their_max = accept.master_max_offset
        if mine and accept.epoch < mine[-1].epoch:
            raise FailoverError(
                f"master {master} is at epoch {accept.epoch}, this broker at {mine[-1].epoch}: that master is stale"
            )
        if not mine:
            # a new replica (or one from before controller mode): its log is taken as
            # a prefix of the master's, as RocketMQ 5 does
            if my_max > their_max:
                raise FailoverError(
                    f"no epoch history here and the CommitLog ({my_max}) is beyond master "
                    f"{master}'s ({their_max}): cannot tell what to keep; clear this store"
                )
            point = my_max
        else:
            point = find_consistent_point(close_last(mine, my_max), close_last(theirs, their_max))
            if point < 0:
                raise FailoverError(
                    f"no epoch in common with master {master} (here: "
                    f"{', '.join(map(str, mine))}; master: {', '.join(map(str, theirs))})"
                )
        if my_max > point:
            log.warning(
                "HA handshake with master %s: this log (end %d, epochs %s) and the "
                "master's (end %d, epochs %s) agree up to offset %d; truncating the "
                "%d bytes after it that no one else has",
                master,
                my_max,
                ", ".join(map(str, mine)),
                their_max,
                ", ".join(map(str, theirs)),
                point,
                my_max - point,
            )
            await st.truncate_to(point)
            dropped = await ef.truncate_suffix(point)
            self.truncations += 1
            log.warning(
                "truncated this broker's store to CommitLog offset %d (epochs dropped: %s)",
                point,
                ", ".join(map(str, dropped)) or "none",
            )
        # what is left is the master's: a limit kept from leading is lifted
        st.set_dispatch_limit(None)
        last = ef.last_epoch()
        self._pending = [EpochEntry(e.epoch, e.start_offset) for e in theirs if e.epoch > last]
        await self.record_passed_epochs_locked()

    async def record_passed_epochs(self) -> None:
        async with self.lock:
            await self.record_passed_epochs_locked()

    async def record_passed_epochs_locked(self) -> None:
        """Record the master's epochs whose start this slave's log has reached."""
        st = self.store
        ef = self.file
        while self._pending and self._pending[0].start_offset <= st.max_phy_offset:
            e = self._pending.pop(0)
            if e.epoch > ef.last_epoch():
                await ef.append(e.epoch, e.start_offset)

    def forget_pending(self) -> None:
        self._pending = []


class ControllerHeartbeatService(ServiceLoop):
    """BROKER_HEARTBEAT every brokerHeartbeatInterval, or at once when kicked; a master
    whose lease ends sooner heartbeats just after it ends (a controller that capped the
    lease at the end of its leadership is asked at once whether anyone leads)."""

    def __init__(self, role: ControllerRole) -> None:
        super().__init__("controller-heartbeat", log)
        self.role = role

    def interval(self) -> float:
        every = self.role.broker_config.brokerHeartbeatInterval / 1000
        left = self.role.lease_left()
        return every if left is None or left <= 0 or left >= every else left + LEASE_END_SLACK

    async def run_once(self) -> None:
        try:
            await self.role.heartbeat_round()
        except Exception:
            log.exception("controller heartbeat round failed")


class ControllerRole:
    """Decides this broker's role from the controller's answers; the switching itself is
    rmq/broker/roles.py's. ``lead_role`` is broker.conf's brokerRole: the role taken
    while leading. The broker's store starts as a SLAVE (refusing writes) until the
    controller has decided."""

    def __init__(
        self,
        broker_config: BrokerConfig,
        store_config: MessageStoreConfig,
        lead_role: BrokerRole,
        listen_host: str,
        store: MessageStore,
        roles: RoleServices,
        epochs: FailoverEpochs,
        client: RemotingClient,
        register: Callable[[], Any],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.broker_config = broker_config
        self.store_config = store_config
        self.master_role = lead_role
        self.listen_host = listen_host
        self.store = store
        self.roles = roles
        self.epochs = epochs
        self.client = client
        self.register = register
        self.configured_id = broker_config.brokerId
        self.state = PENDING
        self.master_addr: str | None = None
        self.master_ha_addr: str | None = None
        self.role_changes = 0
        self._answer: BrokerHeartbeatResponseHeader | None = None
        self._transition: asyncio.Task[None] | None = None
        self._heartbeat = ControllerHeartbeatService(self)
        self._kicked = False
        self._tasks = TaskSet(log)
        self._reserved: socket.socket | None = None
        self._warned: dict[str, str] = {}
        epochs.on_shrink = self.kick
        # the lease this broker writes under while it leads (the send path's WriteFence)
        self._clock = clock
        self.lease = MasterLease(broker_config.brokerName, clock, lambda: ";".join(broker_config.controller_addrs))
        self.controller: str | None = None  # the controller that answered SUCCESS last
        self.last_success_at = -math.inf  # (monotonic) when a controller last answered SUCCESS
        # the last SUCCESS answer that named this broker master (in-sync set, unclean flag)
        self._master_answer: BrokerHeartbeatResponseHeader | None = None
        # slaves (broker ids) this master reported in sync: in the report the last SUCCESS
        # answered, and in every report sent since (answered by no controller)
        self._reported_at_success: frozenset[str] = frozenset()
        self._reported_since: set[str] = set()
        self._failsafe_said: tuple[object, ...] = ()
        self._unleased_warned = False
        self._lapsed = False  # (logged)
        self.lease.on_refused = self._log_lapse
        # one heartbeat round at a time (the loop's, and a slave's answer to a failsafe
        # check); when the last one started and whether a controller answered SUCCESS
        self._beat_lock = asyncio.Lock()
        self.last_round: tuple[float, bool] = (-math.inf, False)

    @property
    def truncations(self) -> int:
        return self.epochs.truncations

    @property
    def broker_addr(self) -> str:
        return self.broker_config.broker_addr

    @property
    def ha_addr(self) -> str:
        return ha_address(self.broker_config, self.store_config)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Load the epoch file, ask the controller once and act on the answer, then
        keep heartbeating. The broker starts pending if no controller answers."""
        bc = self.broker_config
        await self.epochs.load()
        if len(self.epochs.file):
            # it may have confirmed a master's failsafe just before it stopped: elected
            # soon, it keeps that promise (MasterLease.lead)
            self.lease.promise(self._clock(), "(possibly) the previous master, before this broker started")
        self._reserve_ha_port()
        await self._beat()
        if self._transition is not None:
            await asyncio.shield(self._transition)
        self._heartbeat.start()
        if self._kicked:
            self._heartbeat.wakeup()
        log.info(
            "controller mode: broker %s (%s, HA %s) is %s (leads as %s; controllers %s)",
            bc.brokerName,
            self.broker_addr,
            self.ha_addr,
            self.state,
            self.master_role.value,
            ";".join(bc.controller_addrs),
        )

    async def shutdown(self) -> None:
        await self._heartbeat.stop(cancel=True)
        await self._tasks.close()
        self._transition = None
        self._release_reserved()

    def _reserve_ha_port(self) -> None:
        """An ephemeral haListenPort is chosen now and held, so the HA address a slave
        reports (the one it will listen on when promoted) does not change."""
        cfg = self.store_config
        if cfg.haListenPort:
            return
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((self.listen_host, 0))
        cfg.haListenPort = s.getsockname()[1]
        self._reserved = s

    def _release_reserved(self) -> None:
        if self._reserved is not None:
            self._reserved.close()
            self._reserved = None

    # ------------------------------------------------------------------ heartbeats
    async def heartbeat_round(self) -> None:
        ok = await self._beat()
        if not ok and self.state == MASTER and self.lease.leading:
            if self.lease.remaining(self._clock()) <= self._failsafe_horizon():
                await self.failsafe_round()
        self._log_lapse()
        if self.state == SLAVE:
            await self.epochs.record_passed_epochs()

    def _log_lapse(self) -> None:
        """Once when the lease lapses, once when writes are taken again."""
        left = self.lease_left()
        lapsed = left is not None and left <= 0
        if lapsed == self._lapsed:
            return
        self._lapsed = lapsed  # first: lease.refusal() below calls back here
        if lapsed:
            log.warning("controller: %s; sends are answered SERVICE_NOT_AVAILABLE", self.lease.refusal())
        elif left is not None:  # (not when it stepped down)
            log.warning(
                "controller: master lease of %s held again (%s): taking writes", self.lease.group, self.lease.source
            )

    def lease_left(self) -> float | None:
        """Seconds of lease left while this broker leads under one, else None."""
        if self.state != MASTER or not self.lease.leading:
            return None
        return self.lease.remaining(self._clock())

    def kick(self) -> None:
        """Heartbeat now (after a role change: the controller learns it at once)."""
        self._kicked = True
        self._heartbeat.wakeup()

    def _role_now(self) -> str:
        if self.state == MASTER:
            return self.master_role.value
        if self.state == PENDING and self.configured_id == 0:
            return self.master_role.value
        return ROLE_SLAVE

    def _request(self) -> tuple[RemotingCommand, frozenset[str]]:
        """The heartbeat, and the slaves (ids) it reports in sync."""
        bc = self.broker_config
        epoch, start = self.epochs.file.epoch_and_start()
        h = BrokerHeartbeatRequestHeader(
            bc.brokerClusterName,
            bc.brokerName,
            self.broker_addr,
            bc.brokerId,
            self._role_now(),
            max(epoch, 0),
            self.store.max_phy_offset,
            start,
        )
        svc = self.roles.ha_service
        acks = svc.synced_acks() if self.state == MASTER and svc else {}
        cmd = RemotingCommand(
            RequestCode.BROKER_HEARTBEAT, ext_fields=h.to_ext_fields(), body=HeartbeatBody(self.ha_addr, acks).to_json()
        )
        return cmd, frozenset(acks)

    def round_budget(self) -> float:
        """Seconds one heartbeat round may take: the heartbeat timeout, at most one
        interval and a third of the lease time."""
        bc = self.broker_config
        ms: float = min(bc.sendHeartbeatTimeoutMillis, bc.brokerHeartbeatInterval)
        if self.lease.lease_ms:
            ms = min(ms, self.lease.lease_ms / 3)
        return ms / 1000

    def _failsafe_horizon(self) -> float:
        """A lease ending within this many seconds would lapse before the next round."""
        return self.broker_config.brokerHeartbeatInterval / 1000 + self.round_budget()

    async def _beat(self) -> bool:
        async with self._beat_lock:
            return await self._beat_locked()

    async def _beat_locked(self) -> bool:
        """One heartbeat round: to every controller at once (a standby records it and
        answers CONTROLLER_NOT_LEADER; a NameServer without the controller answers
        REQUEST_CODE_NOT_SUPPORTED), acted on as soon as the leader answers SUCCESS,
        without waiting for the others (a controller that does not answer costs
        nothing but its own request). True when a controller answered SUCCESS."""
        started = self._clock()
        ok = await self._round()
        self.last_round = (started, ok)
        return ok

    async def _round(self) -> bool:
        svc = self.roles.ha_service if self.state == MASTER else None
        generation = svc.shrink_generation if svc is not None else 0
        cmd, reported = self._request()
        clock = self._clock
        sent_at = clock()
        timeout = self.round_budget()
        pending = {
            self._tasks.spawn(self._try(addr, cmd, timeout), name=f"controller-heartbeat {addr}"): addr
            for addr in self.broker_config.controller_addrs
        }
        not_leading: list[str] = []
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                addr = pending.pop(t)
                resp = t.result()
                if resp is None:
                    continue
                if resp.code == ResponseCode.CONTROLLER_NOT_LEADER:  # (a standby: it recorded the heartbeat)
                    not_leading.append(f"{addr} (leader: {(resp.ext_fields or {}).get('controllerLeaderAddr') or '-'})")
                    continue
                try:
                    a = BrokerHeartbeatResponseHeader.from_ext_fields(resp.ext_fields or {})
                except ProtocolError as e:
                    self._warn_once(addr, f"controller {addr}: bad heartbeat answer: {e}")
                    continue
                # the leader answered: act now; the other answers come in on their own
                self.last_success_at = clock()
                if self.controller != addr or self._warned.pop("leader", None) is not None:
                    log.info("controller %s leads and answers", addr)
                self.controller = addr
                self._reported_at_success, self._reported_since = reported, set()
                if self._failsafe_said:
                    self._failsafe_said = ()
                    log.warning("failsafe over: controller %s answers again", addr)
                self._on_success(a, addr, sent_at, svc, generation)
                return True
        if not_leading:
            self._warn_once(
                "leader", f"no controller leads: {', '.join(sorted(not_leading))} answered CONTROLLER_NOT_LEADER"
            )
        self._reported_since |= reported
        return False

    async def _try(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand | None:
        try:
            resp = await self.client.invoke(addr, cmd, timeout)
        except (RemotingError, OSError) as e:
            self._warn_once(addr, f"controller {addr} unreachable: {e}", type(e).__name__)
            return None
        if resp.code in (ResponseCode.SUCCESS, ResponseCode.CONTROLLER_NOT_LEADER):
            if self._warned.pop(addr, None) is not None:
                log.info("controller %s answers again", addr)
            return resp
        if resp.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED:  # (a NameServer without the controller)
            self._warn_once(addr, f"controller {addr} answered code {resp.code}: {resp.remark}", str(resp.code))
        return None

    def _on_success(
        self, a: BrokerHeartbeatResponseHeader, addr: str, sent_at: float, svc: HAService | None, generation: int
    ) -> None:
        """A controller's SUCCESS answer to the heartbeat sent at ``sent_at``: renew or
        revoke the lease at once, then act on the answer (role changes run in a task)."""
        if not a.master_addr:
            return  # the group has no master yet
        if a.master_addr == self.broker_addr:
            self._master_answer = a
            if a.master_lease_millis is not None:
                self.lease.granted(sent_at, a.master_lease_millis, f"controller {addr}")
                if self.state == MASTER and not self.lease.leading:
                    self.lease.lead(new_epoch=False)
            if svc is not None and self.state == MASTER and self.roles.ha_service is svc:
                # the controller saw the in-sync set this report named and keeps us
                svc.release_departed(generation)
        elif self.state == MASTER:
            self.lease.revoke(f"controller {addr} named {a.master_addr} master (epoch {a.master_epoch})")
        self._on_answer(a)

    def _warn_once(self, key: str, msg: str, kind: str | None = None) -> None:
        """Warn when what ``key`` reports changes (``kind``, else the message)."""
        what = msg if kind is None else kind
        if self._warned.get(key) != what:
            self._warned[key] = what
            log.warning("%s", msg)

    # ------------------------------------------------------------------ failsafe
    async def failsafe_round(self) -> None:
        """Master, no controller answered this round and the lease ends before the next:
        ask every other member of the last in-sync set (RMQ_FAILSAFE_CHECK, concurrently);
        if all confirm, extend the lease from when the checks were sent. See
        rmq/broker/master_lease.py for why this is safe and when it does not apply."""
        a = self._master_answer
        # the lease time itself, not the last grant: a controller losing its leadership
        # grants less, up to its end
        lease_ms = self.lease.longest_ms
        if a is None or not lease_ms:
            return
        group = self.broker_config.brokerName
        epoch = self.epochs.file.last_epoch()
        members = [m for m in a.sync_state_members() if m != self.broker_addr]
        head = f"failsafe: group {group} epoch {epoch}, in-sync set {a.sync_state_set or self.broker_addr}:"
        if a.enable_elect_unclean_master:
            self._failsafe_decided(
                ("unclean", epoch),
                f"{head} the controller may elect a master outside the in-sync set "
                "(enableElectUncleanMaster): no failsafe, the lease lapses",
            )
            return
        # The controller records the set a report proposes before answering it: a
        # report no answer came back for may have grown the set by slaves this master
        # cannot name (its reports name slaves by id, the set by address). So: no
        # failsafe when a slave reported since was not in the answered report, or when
        # more slaves were reported than the answered set holds.
        reported = self._reported_since | self._reported_at_success
        if not self._reported_since <= self._reported_at_success or len(reported) > len(members):
            ids = ", ".join(sorted(reported))
            self._failsafe_decided(
                ("grown", epoch, ids),
                f"{head} this master reported slave(s) with id {ids} in sync, more than the set it "
                "was told names, or after the last controller answer; the controller may count "
                "them in the set and this master cannot ask them: no failsafe, the lease lapses",
            )
            return
        sent_at = self._clock()
        if not members:
            self.lease.extend_failsafe(sent_at, lease_ms)
            self._failsafe_decided(
                ("alone", epoch),
                f"{head} this master is the whole set, nobody can be elected in its place: "
                "it keeps taking writes while no controller answers",
            )
            return
        timeout = 2 * self.round_budget()  # (a slave heartbeats before it answers)
        answers = await asyncio.gather(*(self._failsafe_ask(m, epoch, timeout) for m in members))
        refused = [(m, why) for m, why in zip(members, answers, strict=True) if why is not None]
        if not refused:
            self.lease.extend_failsafe(sent_at, lease_ms, ";".join(members))
            self._failsafe_decided(
                ("held", epoch, tuple(members)),
                f"{head} every other member ({', '.join(members)}) follows this master and cannot "
                f"reach a controller either: this master keeps taking writes (lease extended "
                f"{lease_ms} ms from each check)",
            )
            return
        self._failsafe_decided(
            ("refused", epoch, tuple(m for m, _ in refused)),
            f"{head} {'; '.join(f'{m}: {why}' for m, why in refused)}: no failsafe, the lease lapses",
        )
        # a slave that refused because a controller answers it: that controller is likely
        # back for this master too; ask it now rather than at the lease's end
        self.kick()

    async def _failsafe_ask(self, member: str, epoch: int, timeout: float) -> str | None:
        h = FailsafeCheckRequestHeader(self.broker_config.brokerName, self.broker_addr, epoch, self.lease.longest_ms)
        cmd = RemotingCommand(RequestCode.RMQ_FAILSAFE_CHECK, ext_fields=h.to_ext_fields())
        try:
            resp = await self.client.invoke(member, cmd, timeout)
        except (RemotingError, OSError) as e:
            return f"no answer ({e})"
        if resp.code == ResponseCode.SUCCESS:
            return None
        return f"refused ({resp.remark or f'code {resp.code}'})"

    def _failsafe_decided(self, key: tuple[object, ...], msg: str) -> None:
        if key != self._failsafe_said:
            self._failsafe_said = key
            log.warning("%s", msg)

    async def failsafe_check(self, h: FailsafeCheckRequestHeader) -> str | None:
        """Slave side of RMQ_FAILSAFE_CHECK: None (confirm) iff this broker is a slave
        following ``h.master_addr`` in epoch ``h.epoch`` and a heartbeat round begun
        after the check arrived got no SUCCESS from any controller (it runs one if
        none has begun since); else why not. A confirmation is a promise: elected
        later, this broker takes no write within a lease time of it.

        Why ask the controllers now rather than count the time since the last answer:
        a controller that loses its leadership caps the leases it grants at that
        moment, so the master's lease ends as the last SUCCESS answers come; a slave
        that had to be silent for a while first would let the master lapse at the
        start of every outage. Safety rests not on this but on every member having to
        confirm and on the promise (``MasterLease.promise``)."""
        why = self._failsafe_refusal(h)
        if why is not None:
            return why
        asked = self._clock()
        async with self._beat_lock:
            started, reached = self.last_round
            if started < asked:
                reached = await self._beat_locked()
        why = self._failsafe_refusal(h)  # (the round may have changed the role)
        if why is not None:
            return why
        if reached:
            return f"controller {self.controller} answers this slave: the controllers are reachable"
        # promised for as long as the master will hold the extension (a slave never
        # sees an uncapped grant of the master's)
        self.lease.longest_ms = max(self.lease.longest_ms, h.lease_millis or 0)
        self.lease.promise(self._clock(), f"master {h.master_addr}")
        return None

    def _failsafe_refusal(self, h: FailsafeCheckRequestHeader) -> str | None:
        bc = self.broker_config
        if h.broker_name != bc.brokerName:
            return f"this broker is in group {bc.brokerName}, not {h.broker_name}"
        if self.state != SLAVE:
            return f"this broker is {self.state}, not a slave"
        # (the last answer too: a role change it asks for may be under way)
        named = self._answer.master_addr if self._answer is not None else None
        if self.master_addr != h.master_addr or named != h.master_addr:
            return f"this slave follows {named or self.master_addr}, not {h.master_addr}"
        mine = self.epochs.file.last_epoch()
        if mine != h.epoch:
            return f"this slave is at epoch {mine}, not {h.epoch}"
        return None

    # ------------------------------------------------------------------ decisions
    def _on_answer(self, a: BrokerHeartbeatResponseHeader) -> None:
        self._answer = a
        if self._transition is None or self._transition.done():
            self._transition = self._tasks.spawn(self._apply_answers(), name="role-change")

    async def _apply_answers(self) -> None:
        """Act on the newest answer until this broker's state matches it (answers
        that come in meanwhile are only remembered)."""
        while True:
            a = self._answer
            if a is None:
                return
            try:
                changed = await self._apply(a)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception(
                    "role change after controller answer (master %s, epoch %s) failed; retrying on the next heartbeat",
                    a.master_addr,
                    a.master_epoch,
                )
                return
            if not changed and self._answer is a:
                return

    async def _apply(self, a: BrokerHeartbeatResponseHeader) -> bool:
        bc = self.broker_config
        epoch = a.master_epoch or 0
        if a.master_addr == self.broker_addr:
            if self.state != MASTER or epoch > self.epochs.file.last_epoch():
                await self.become_master(epoch, a.epoch_start_offset)
                return True
            return False
        bid = a.broker_id if a.broker_id is not None and a.broker_id > 0 else None
        if bid is None:
            log.error(
                "controller named %s master of %s but gave this broker no id > 0 (%s)",
                a.master_addr,
                bc.brokerName,
                a.broker_id,
            )
            return False
        if self.state != SLAVE or bid != bc.brokerId or a.master_addr != self.master_addr:
            await self.become_slave(a.master_addr or "", a.master_ha_addr or "", bid)
            return True
        if (a.master_ha_addr or "") != (self.master_ha_addr or ""):
            self._follow_ha(a.master_ha_addr or "")
            client = self.roles.ha_client
            if client is not None:
                client.update_master_address(self.master_ha_addr or "")
        return False

    def _follow_ha(self, master_ha_addr: str) -> None:
        self.master_ha_addr = master_ha_addr
        self.epochs.master = master_ha_addr or "?"

    # ------------------------------------------------------------------ become master
    async def become_master(self, epoch: int, announced_start: int | None = None) -> None:
        bc = self.broker_config
        st = self.store
        ef = self.epochs.file
        t0 = time.perf_counter()
        was = self.state
        log.warning(
            "controller: %s (%s) leads group %s in epoch %d (was %s); taking over",
            self.broker_addr,
            self.master_role.value,
            bc.brokerName,
            epoch,
            was,
        )
        if was == MASTER:
            # a new epoch while leading (the controller re-adopted this master): no
            # write may land between the old epoch's end and the new one's record
            st.switch_to_slave()
        await self.roles.stop_ha_client()
        async with self.epochs.lock:
            dropped = await st.prepare_to_lead()
            await self.epochs.record_passed_epochs_locked()
            self.epochs.forget_pending()
            start = st.max_phy_offset
            last = ef.last_entry()
            new_epoch = last is None or epoch > last.epoch
            if last is None and was == PENDING and announced_start is not None:
                # adopted as a new group's first master: the epoch covers what it wrote
                # before (the controller says from 0), which its slaves copied too
                start = min(max(announced_start, 0), start)
            if last is None or epoch > last.epoch:
                # durable before the first write of the epoch
                await ef.append(epoch, start)
            elif epoch < last.epoch:
                log.warning(
                    "controller announced epoch %d but this broker's history is at "
                    "epoch %d already; keeping it (the controller adopts it on the "
                    "next heartbeat)",
                    epoch,
                    last.epoch,
                )
            epoch_now, start_now = ef.epoch_and_start()
        self.master_addr = self.broker_addr
        self._follow_ha(self.ha_addr)
        self._release_reserved()
        # fenced before the store takes writes: from the heartbeat that named it master
        if self.lease.lease_ms is not None:
            self.lease.lead(new_epoch)
            wait = self.lease.not_before - self._clock()
            if wait > 0:
                log.warning(
                    "controller: %s takes writes in %d ms only: it confirmed the failsafe check "
                    "of %s, whose lease may run that long",
                    self.broker_addr,
                    round(wait * 1000),
                    self.lease.promised_to,
                )
        elif not self._unleased_warned:
            self._unleased_warned = True
            log.warning(
                "controller: the controller grants no master lease (masterLeaseMillis): "
                "this master is not fenced when it loses the controllers"
            )
        await self.roles.change_to_master(self.master_role, drop_slaves=was == MASTER)
        self.state = MASTER
        self.role_changes += 1
        log.warning(
            "controller: %s is master of %s: epoch %d from offset %d (%d bytes of "
            "incomplete tail dropped), writable after %.1f ms",
            self.broker_addr,
            bc.brokerName,
            epoch_now,
            start_now,
            dropped,
            (time.perf_counter() - t0) * 1000,
        )
        self.kick()
        await self.register()

    # ------------------------------------------------------------------ become slave
    async def become_slave(self, master_addr: str, master_ha_addr: str, broker_id: int) -> None:
        bc = self.broker_config
        was = self.state
        log.warning(
            "controller: %s (id %d, %s) follows master %s (HA %s) as broker id %d",
            self.broker_addr,
            bc.brokerId,
            was,
            master_addr,
            master_ha_addr or "?",
            broker_id,
        )
        if was == MASTER:
            await self.roles.step_down()
            self._reserve_ha_port_again()
        self.lease.drop()  # (after the store stopped taking writes)
        self._master_answer = None
        await self.roles.stop_ha_client()
        async with self.epochs.lock:
            self.epochs.forget_pending()
        self.roles.follow(broker_id, master_addr)
        self.master_addr = master_addr
        self._follow_ha(master_ha_addr)
        self.state = SLAVE
        self.role_changes += 1
        self.kick()
        await self.register()
        await self.roles.change_to_slave(master_ha_addr)

    def _reserve_ha_port_again(self) -> None:
        """Hold the HA port we listened on while a slave (it stays our HA address)."""
        if self._reserved is not None:
            return
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((self.listen_host, self.store_config.haListenPort))
        except OSError:
            s.close()
            return
        self._reserved = s
