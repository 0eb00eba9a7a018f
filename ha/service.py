"""HAService (master, spec 5): accepts slaves on haListenPort and keeps their acks.

One object per master role, no global state: ``start()``/``stop()`` are idempotent
coroutines, so a broker can start or stop the service at runtime (role changes after
a failover). Per-slave work is in ``HAConnection``; waiting SYNC_MASTER puts are in
``GroupTransferService``. One timer (every second, or half the heartbeat interval when
that is shorter) does heartbeats, housekeeping and the transfer rates for every
connection.

The failover side plugs in through callables: ``epoch_provider() -> (epoch, start
offset)`` (what the master announces), ``epochs_provider() -> [EpochEntry]`` (the
history sent in the ACCEPT; a slave that sends its own compares and truncates, so it
may say hello from beyond this master's end) and ``hello_check(hello) -> reason |
None`` (an extra reason to refuse a slave, e.g. a newer epoch than this master's).

``credential`` (broker.conf innerClientAuthenticationCredentials): every connection is
challenged first and only a slave whose HELLO proves the credential is let in
(ha/protocol.py); refusals are counted in ``auth_failures`` by reason (the broker's
``rocketmq_auth_failures_total``; a dict the broker keeps across role changes) and
logged naming the peer and the AccessKey. Without it any slave that reaches the port
is served, as in 4.9.8.

``confirm_reads`` (controller mode) keeps an in-sync set, RocketMQ 5's SyncStateSet
on a small scale: a slave joins once it has what dispatch shows consumers now or had
shown at its previous report, is *confirmed* once it has what dispatch had shown when
it joined, and leaves when its connection ends. While the set is not empty the store dispatches
(shows consumers) only up to the lowest ack in it, so whichever confirmed slave the
controller elects holds every message a consumer may have seen; ``synced_acks()``
(confirmed slaves only) is what the master reports to the controller. A slave that
left keeps holding dispatch at its last ack until the controller has heard the
smaller set and still names this broker master (``release_departed``, called by the
broker after such a heartbeat answer): it may have left because it was promoted. A
member that stops acking holds dispatch back until its connection is closed
(housekeeping).

In-sync replica rules (RocketMQ 5's keys, MessageStoreConfig; a SYNC_MASTER's puts
that wait, i.e. WAIT != false). ``inSyncReplicas`` unset: a put waits for one slave's
ack, SLAVE_NOT_AVAILABLE at once when no slave is connected within
haSlaveFallbehindMax (``is_slave_ok``, RocketMQ 4's rule, the path it always was).
Otherwise the copies a put needs, this master counted (``need_ack_nums``), are
``inSyncReplicas``, or with ``enableAutoInSyncReplicas`` max(min(inSyncReplicas, in-sync
set size), minInSyncReplicas): 1 = answered without waiting for a slave; n = acks from
n-1 different slaves (brokerIds), SLAVE_NOT_AVAILABLE at once when fewer are connected
within haSlaveFallbehindMax. ``allAckInSyncStateSet`` (controller mode): every member of
the in-sync set acks. ``minInSyncReplicas`` > 1: a put is refused before it is stored
(IN_SYNC_REPLICAS_NOT_ENOUGH, through the store's ``replica_gate``) while the in-sync set
is smaller. The in-sync set's size (``in_sync_set_size``, this master counted): with
confirm_reads the members above plus the departed slaves the controller has not yet
released (RocketMQ 5 takes the larger of the old and new set while a shrink is being
confirmed: a put racing a shrink waits for the departed one and times out, or completes
once the controller confirmed the smaller set, rather than being acked by too few);
without, the slaves (distinct brokerIds) connected within haSlaveFallbehindMax.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from typing import Any

from ha.connection import HAConnection
from ha.group_transfer import GroupTransferService
from ha.peer import EpochsProvider, HAPeer
from ha.protocol import NONCE_SIZE, EpochProvider, SlaveHello, verify_hello
from rmq.auth.credentials import Credential
from rmq.common.clock import monotonic_ms
from rmq.remoting.listener import TlsListener
from rmq.remoting.tls import TlsSettings
from rmq.runtime.service import ServiceLoop
from rmq.store.message_store import MessageStore
from rmq.store.results import PutMessageResult, PutMessageStatus

log = logging.getLogger("rmq.ha")

HelloCheck = Callable[[SlaveHello], "str | None"]


class HAService(HAPeer):
    def __init__(
        self,
        store: MessageStore,
        *,
        cluster: str,
        broker_name: str,
        host: str = "0.0.0.0",
        port: int = 0,
        epoch_provider: EpochProvider | None = None,
        hello_check: HelloCheck | None = None,
        epochs_provider: EpochsProvider | None = None,
        confirm_reads: bool = False,
        on_shrink: Callable[[], None] | None = None,
        credential: Credential | None = None,
        auth_failures: dict[str, int] | None = None,
        tls: TlsSettings | None = None,
    ) -> None:
        super().__init__(store, cluster, broker_name, epoch_provider, epochs_provider, credential)
        cfg = self.config
        self.host = host
        self.port = port
        # tls.server.mode on this port too (None: plaintext only)
        self.tls = tls
        # the handshake: checked by hello_check, failures counted per peer
        self.hello_check = hello_check
        self.auth_failures: dict[str, int] = {} if auth_failures is None else auth_failures
        self.confirm_reads = confirm_reads
        # called when a slave leaves the in-sync set (the broker tells the controller)
        self.on_shrink = on_shrink
        # in-sync set (confirm_reads): member -> dispatched offset when it joined
        self._members: dict[HAConnection, int] = {}
        self._confirmed: set[HAConnection] = set()
        self._dispatched_at_report: dict[HAConnection, int] = {}
        # slaves that left the set: (last ack, shrink generation, brokerId) until released
        self._departed: list[tuple[int, int, int]] = []
        # brokerIds of _members and _departed: the in-sync set, this master not counted
        self._in_sync_ids: frozenset[int] = frozenset()
        self._generation = 0
        self.transfer_batch = max(cfg.haTransferBatchSize, 1)
        # enough to keep a fast link busy while the loop does other work, small enough
        # that a slow slave does not pin much memory
        self.write_buffer_high = max(4 * self.transfer_batch, 4 << 20)
        self.group_transfer = GroupTransferService(cfg.slaveTimeout)
        # in-sync replica rules (module docstring)
        self.in_sync_replicas_config = cfg.effective_in_sync_replicas
        self.min_in_sync_replicas = cfg.minInSyncReplicas
        self.auto_in_sync_replicas = cfg.enableAutoInSyncReplicas
        self.all_ack = cfg.allAckInSyncStateSet and confirm_reads
        # the rule a SYNC_MASTER always had: one slave's ack (the fast path)
        self._one_slave = not self.auto_in_sync_replicas and not self.all_ack and self.in_sync_replicas_config == 2
        self.connections: set[HAConnection] = set()  # every accepted socket
        self.slaves: set[HAConnection] = set()  # handshaken
        self.stats_rejected = 0
        self.stats_bad_input = 0
        self._server: asyncio.AbstractServer | TlsListener | None = None
        self._timer = _Housekeeping(self)
        self._not_available: asyncio.Future[PutMessageStatus] | None = None

    # ------------------------------------------------------------------ lifecycle
    @property
    def running(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        """Listen on haListenPort (0 = an ephemeral port; ``port`` tells which)."""
        if self._server is not None:
            return
        if self.tls is None:
            loop = asyncio.get_running_loop()
            self._server = await loop.create_server(
                lambda: HAConnection(self), self.host, self.port, reuse_address=True, backlog=64
            )
        else:
            # plaintext_after: a slave that waits for the master to speak first still gets in
            self._server = TlsListener(
                "HAService", lambda: HAConnection(self), self.host, self.port, self.tls, backlog=64, plaintext_after=1.0
            )
            await self._server.start()
        self.port = self._server.sockets[0].getsockname()[1]
        self.store.add_commit_listener(self._on_commit)
        if self.min_in_sync_replicas > 1:
            self.store.replica_gate = self.refuse_put
        if self.config.allAckInSyncStateSet and not self.confirm_reads:
            log.warning("allAckInSyncStateSet=true is ignored outside controller mode (there is no in-sync set)")
        self._timer.start()
        log.info(
            "HA service of %s listening on %s:%d (haTransferBatchSize %d, slaveTimeout %d ms)",
            self.broker_name,
            self.host,
            self.port,
            self.transfer_batch,
            self.config.slaveTimeout,
        )

    async def stop(self) -> None:
        """Close every slave connection and answer waiting puts (FLUSH_SLAVE_TIMEOUT)."""
        server = self._server
        if server is None:
            return
        self._server = None
        self.store.remove_commit_listener(self._on_commit)
        if self.store.replica_gate == self.refuse_put:
            self.store.replica_gate = None
        server.close()
        await self._timer.stop()
        for c in list(self.connections):
            c.abort()
        self.group_transfer.fail_all(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        if self.confirm_reads:
            self._members.clear()
            self._confirmed.clear()
            self._dispatched_at_report.clear()
            self._departed.clear()
            self._set_changed()
            # the dispatch limit stays: a master stepping down shows nothing more until
            # its new master's history says what of its tail stays (the broker clears
            # it then; the store clears it at shutdown)
        try:
            await asyncio.wait_for(server.wait_closed(), 2)
        except TimeoutError:
            pass
        log.info("HA service of %s stopped", self.broker_name)

    def drop_slaves(self) -> None:
        """Close every slave connection (they reconnect and handshake again: after
        this master recorded a new epoch, so that they learn it)."""
        for c in list(self.connections):
            c.close()

    # ------------------------------------------------------------------ connections
    def on_connection_made(self, conn: HAConnection) -> None:
        if self._server is None:
            conn.abort()
            return
        self.connections.add(conn)
        log.debug("HA connection from %s", conn.addr)

    def on_connection_lost(self, conn: HAConnection) -> None:
        self.connections.discard(conn)
        if conn in self.slaves:
            self.slaves.discard(conn)
            log.info("HA slave %s disconnected (acked %d)", conn.addr, conn.ack)
        self._dispatched_at_report.pop(conn, None)
        if self._members.pop(conn, None) is not None:
            self._confirmed.discard(conn)
            self._generation += 1
            self._departed.append((conn.ack, self._generation, conn.hello.broker_id if conn.hello else -1))
            if self.on_shrink is not None:
                self.on_shrink()
            log.warning(
                "HA slave %s (id %d) left the in-sync set at ack %d",
                conn.addr,
                conn.hello.broker_id if conn.hello else -1,
                conn.ack,
            )
            self._update_limit()
            self._set_changed()

    def challenge(self) -> bytes | None:
        """A fresh nonce for a new connection, None when no proof is asked for."""
        return secrets.token_bytes(NONCE_SIZE) if self.credential is not None else None

    def authenticate(self, h: SlaveHello, nonce: bytes | None) -> str | None:
        """Why the HELLO does not prove the cluster credential (None: it does, or none
        is asked for); the refusal is counted."""
        cred = self.credential
        if cred is None:
            return None
        if h.proof is None:
            reason, why = (
                "ha_no_credential",
                "this master requires the cluster credential (innerClientAuthenticationCredentials) "
                "and the HELLO carries no proof",
            )
        elif nonce is None or not verify_hello(h, nonce, cred):
            # (one answer for a wrong AccessKey and a wrong proof: no key probing)
            reason, why = (
                "ha_signature",
                f"the HELLO's proof for accessKey={h.proof.access_key} does not match this master's credential",
            )
        else:
            return None
        self.auth_failures[reason] = self.auth_failures.get(reason, 0) + 1
        return why

    def check_hello(self, h: SlaveHello) -> str | None:
        if h.cluster != self.cluster:
            return f"cluster {h.cluster!r} is not this master's cluster {self.cluster!r}"
        if h.broker_name != self.broker_name:
            return f"brokerName {h.broker_name!r} is not this master's {self.broker_name!r}"
        if h.broker_id <= 0:
            return f"brokerId {h.broker_id}: a slave's brokerId must be > 0"
        size = self.config.mappedFileSizeCommitLog
        if h.commitlog_file_size != size:
            return f"mappedFileSizeCommitLog {h.commitlog_file_size} differs from the master's {size}"
        if h.max_offset > self.store.max_phy_offset and h.epochs is None:
            # (a slave with an epoch list truncates after the handshake; its first
            # report is checked against this master's end like any other)
            return f"the slave is at offset {h.max_offset}, beyond this master's {self.store.max_phy_offset}"
        if self.hello_check is not None:
            return self.hello_check(h)
        return None

    def current_epoch(self) -> int:
        return self.epoch_provider()[0]

    def on_handshake(self, conn: HAConnection) -> None:
        self.slaves.add(conn)

    def on_ack(self, conn: HAConnection, offset: int) -> None:
        h = conn.hello
        self.group_transfer.on_ack(offset, h.broker_id if h is not None else None)
        if self.confirm_reads:
            self._confirm_ack(conn, offset)

    # ------------------------------------------------------------------ in-sync set
    def _confirm_ack(self, conn: HAConnection, offset: int) -> None:
        dispatched = self.store.dispatched_offset
        joined = self._members.get(conn)
        if joined is None:
            before = self._dispatched_at_report.get(conn)
            self._dispatched_at_report[conn] = dispatched
            if offset < dispatched and (before is None or offset < before):
                return
            self._members[conn] = joined = dispatched
            log.info(
                "HA slave %s (id %d) joined the in-sync set at ack %d (dispatched %d)",
                conn.addr,
                conn.hello.broker_id if conn.hello else -1,
                offset,
                dispatched,
            )
            self._set_changed()
        if conn not in self._confirmed and offset >= joined:
            self._confirmed.add(conn)
            log.info(
                "HA slave %s (id %d) confirmed in sync at ack %d",
                conn.addr,
                conn.hello.broker_id if conn.hello else -1,
                offset,
            )
        self._update_limit()

    def _update_limit(self) -> None:
        if not self.confirm_reads:
            return
        acks = [c.ack for c in self._members] + [a for a, _, _ in self._departed]
        self.store.set_dispatch_limit(min(acks) if acks else None)

    def _set_changed(self) -> None:
        """A slave joined or left the in-sync set, or a departure was released."""
        ids = frozenset(c.hello.broker_id for c in self._members if c.hello is not None)
        self._in_sync_ids = ids | frozenset(b for _, _, b in self._departed)
        self.group_transfer.set_required(self._in_sync_ids)

    @property
    def shrink_generation(self) -> int:
        """Counts departures from the in-sync set (read it before reporting acks)."""
        return self._generation

    def release_departed(self, generation: int) -> None:
        """The controller heard a report made after departures up to generation and
        still names this broker master: those slaves stop holding dispatch back."""
        if any(g <= generation for _, g, _ in self._departed):
            self._departed = [d for d in self._departed if d[1] > generation]
            log.info("HA: the controller keeps this master with the smaller in-sync set; dispatch limit released")
            self._update_limit()
            self._set_changed()

    def synced_acks(self) -> dict[str, int]:
        """Broker id (decimal) -> acked offset of the slaves a successor may be chosen
        from: the confirmed in-sync set with confirm_reads, else every slave that
        reported (what the master tells the controller)."""
        conns = self._confirmed if self.confirm_reads else self.slaves
        return {str(c.hello.broker_id): c.ack for c in conns if c.hello is not None and c.ack >= 0}

    def _on_commit(self) -> None:
        for c in self.slaves:
            c.pump()

    def housekeeping(self, period: float) -> None:
        """One timer tick: transfer rates, heartbeats to quiet slaves, and closing the
        connections of slaves not heard from for haHousekeepingInterval."""
        cfg = self.config
        now = monotonic_ms()
        for c in list(self.connections):
            c.tick(period)
            if now - c.last_read > cfg.haHousekeepingInterval:
                log.warning("HA connection %s: nothing read for %d ms; closing it", c.addr, now - c.last_read)
                c.abort()
            elif now - c.last_write > cfg.haSendHeartbeatInterval:
                c.heartbeat()

    # ------------------------------------------------------------------ SYNC_MASTER
    def is_slave_ok(self, master_put_where: int) -> bool:
        """4.x isSlaveOK: a slave is connected and the acked offset is within
        haSlaveFallbehindMax of the master."""
        return bool(self.slaves) and (master_put_where - self.group_transfer.acked) < self.config.haSlaveFallbehindMax

    def replica_waiter(self, result: PutMessageResult, wait: bool) -> asyncio.Future[PutMessageStatus] | None:
        """The store's hook (SYNC_MASTER): a future answered when the slaves the rules
        ask for have the put (None: no wait)."""
        if not wait:
            return None
        end = result.end_offset
        if self._one_slave:
            if not self.is_slave_ok(end):
                return self._slave_not_available()
            return self.group_transfer.submit(end)
        if self.all_ack:
            return self.group_transfer.submit_all(end)
        slaves = self.need_ack_nums(end) - 1
        if slaves <= 0:
            return None
        if self._slaves_within_reach(end) < slaves:
            return self._slave_not_available()
        return self.group_transfer.submit_n(end, slaves)

    def _slave_not_available(self) -> asyncio.Future[PutMessageStatus]:
        fut = self._not_available
        if fut is None:
            fut = self._not_available = asyncio.get_running_loop().create_future()
            fut.set_result(PutMessageStatus.SLAVE_NOT_AVAILABLE)
        return fut

    def refuse_put(self) -> PutMessageResult | None:
        """The store's gate before the append (installed when minInSyncReplicas > 1):
        IN_SYNC_REPLICAS_NOT_ENOUGH while the in-sync set is smaller."""
        have = self.in_sync_set_size(self.store.max_phy_offset)
        if have >= self.min_in_sync_replicas:
            return None
        return PutMessageResult(
            PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH,
            remark=f"{have} replica(s) in sync, this master counted; minInSyncReplicas is {self.min_in_sync_replicas}",
        )

    def need_ack_nums(self, master_put_where: int) -> int:
        """Copies a put ending at master_put_where needs, this master counted (RocketMQ 5's
        needAckNums; with allAckInSyncStateSet the in-sync set's size)."""
        if self.all_ack:
            return 1 + len(self._in_sync_ids)
        n = self.in_sync_replicas_config
        if self.auto_in_sync_replicas:
            n = max(min(n, self.in_sync_set_size(master_put_where)), self.min_in_sync_replicas)
        return n

    def in_sync_set_size(self, master_put_where: int) -> int:
        """The in-sync set's size, this master counted (module docstring)."""
        if self.confirm_reads:
            return 1 + len(self._in_sync_ids)
        return 1 + self._slaves_within_reach(master_put_where)

    def _slaves_within_reach(self, master_put_where: int) -> int:
        """Slaves (distinct brokerIds) that reported an ack within haSlaveFallbehindMax."""
        gap = self.config.haSlaveFallbehindMax
        return len(
            {
                c.hello.broker_id
                for c in self.slaves
                if c.hello is not None and c.ack >= 0 and master_put_where - c.ack < gap
            }
        )

    # ------------------------------------------------------------------ status
    def slave_ack_offsets(self) -> dict[str, int]:
        """Slave address -> acked offset (slaves that reported at least once)."""
        return {c.addr: c.ack for c in self.slaves if c.ack >= 0}

    def in_sync_replicas(self) -> int:
        """1 (this master) + slaves within haSlaveFallbehindMax."""
        top = self.store.max_phy_offset
        gap = self.config.haSlaveFallbehindMax
        return 1 + sum(1 for c in self.slaves if c.ack >= 0 and top - c.ack < gap)

    def runtime_info(self) -> dict[str, Any]:
        """RocketMQ 5.x HARuntimeInfo (the body of GET_BROKER_HA_STATUS)."""
        top = self.store.max_phy_offset
        gap = self.config.haSlaveFallbehindMax
        conns = []
        for c in sorted(self.slaves, key=lambda c: c.addr):
            ack = max(c.ack, 0)
            conns.append(
                {
                    "addr": c.addr,
                    "slaveAckOffset": c.ack,
                    "diff": top - ack,
                    "inSync": c.ack >= 0 and top - c.ack < gap,
                    "transferredByteInSecond": c.bytes_per_s,
                    "transferFromWhere": c.transfer_from,
                    "brokerId": c.hello.broker_id if c.hello else 0,
                }
            )
        return {
            "master": True,
            "masterCommitLogMaxOffset": top,
            "inSyncSlaveNums": self.in_sync_replicas() - 1,
            # ours: the in-sync set's size (this master counted) and the copies a put
            # needs now (1: no wait for a slave), as the in-sync replica rules count them
            "inSyncReplicasNums": self.in_sync_set_size(top),
            "needAckNums": self.need_ack_nums(top),
            "haConnectionInfo": conns,
            "haClientRuntimeInfo": {},
        }


class _Housekeeping(ServiceLoop):
    """The HA service's one timer: every second, or half the heartbeat interval when that
    is shorter."""

    def __init__(self, service: HAService) -> None:
        super().__init__("HAService-timer", log)
        self._service = service
        self.period = min(1.0, service.config.haSendHeartbeatInterval / 2000)

    def interval(self) -> float:
        return self.period

    async def run_once(self) -> None:
        self._service.housekeeping(self.period)
