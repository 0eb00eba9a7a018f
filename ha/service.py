"""HAService (master, spec 5): accepts slaves on haListenPort and keeps their acks.

One object per master role, no global state: ``start()``/``stop()`` are idempotent
coroutines, so a broker can start or stop the service at runtime (role changes after
a failover). Per-slave work is in ``HAConnection``; waiting SYNC_MASTER puts are in
``GroupTransferService``. One timer (every second, or half the heartbeat interval when
that is shorter) does heartbeats, housekeeping and the transfer rates for every
connection.

The failover side plugs in through two callables: ``epoch_provider() -> (epoch, start
offset)`` (what the master announces) and ``hello_check(hello) -> reason | None`` (an
extra reason to refuse a slave, e.g. an epoch it must truncate first).
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

from ha.connection import HAConnection
from ha.group_transfer import GroupTransferService
from ha.protocol import SlaveHello
from rmq.store.message_store import MessageStore
from rmq.store.results import PutMessageResult, PutMessageStatus

log = logging.getLogger("rmq.ha")

EpochProvider = Callable[[], "tuple[int, int]"]
HelloCheck = Callable[[SlaveHello], "str | None"]


def _no_epoch() -> tuple[int, int]:
    return 0, -1


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class HAService:
    def __init__(self, store: MessageStore, *, cluster: str, broker_name: str,
                 host: str = "0.0.0.0", port: int = 0,
                 epoch_provider: EpochProvider | None = None,
                 hello_check: HelloCheck | None = None) -> None:
        cfg = store.config
        self.store = store
        self.config = cfg
        self.cluster = cluster
        self.broker_name = broker_name
        self.host = host
        self.port = port
        self.epoch_provider = epoch_provider or _no_epoch
        self.hello_check = hello_check
        self.transfer_batch = max(cfg.haTransferBatchSize, 1)
        # enough to keep a fast link busy while the loop does other work, small enough
        # that a slow slave does not pin much memory
        self.write_buffer_high = max(4 * self.transfer_batch, 4 << 20)
        self.group_transfer = GroupTransferService(cfg.slaveTimeout)
        self.connections: set[HAConnection] = set()      # every accepted socket
        self.slaves: set[HAConnection] = set()           # handshaken
        self.stats_rejected = 0
        self.stats_bad_input = 0
        self._server: asyncio.AbstractServer | None = None
        self._timer: asyncio.Task[None] | None = None
        self._not_available: asyncio.Future[PutMessageStatus] | None = None

    # ------------------------------------------------------------------ lifecycle
    @property
    def running(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        """Listen on haListenPort (0 = an ephemeral port; ``port`` tells which)."""
        if self._server is not None:
            return
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: HAConnection(self), self.host,
                                                self.port, reuse_address=True, backlog=64)
        self.port = self._server.sockets[0].getsockname()[1]
        self.store.add_commit_listener(self._on_commit)
        self._timer = loop.create_task(self._tick(), name="HAService-timer")
        log.info("HA service of %s listening on %s:%d (haTransferBatchSize %d, slaveTimeout %d ms)",
                 self.broker_name, self.host, self.port, self.transfer_batch,
                 self.config.slaveTimeout)

    async def stop(self) -> None:
        """Close every slave connection and answer waiting puts (FLUSH_SLAVE_TIMEOUT)."""
        server = self._server
        if server is None:
            return
        self._server = None
        self.store.remove_commit_listener(self._on_commit)
        server.close()
        if self._timer is not None:
            self._timer.cancel()
            try:
                await self._timer
            except asyncio.CancelledError:
                pass
            self._timer = None
        for c in list(self.connections):
            c.abort()
        self.group_transfer.fail_all(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        try:
            await asyncio.wait_for(server.wait_closed(), 2)
        except asyncio.TimeoutError:
            pass
        log.info("HA service of %s stopped", self.broker_name)

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

    def check_hello(self, h: SlaveHello) -> str | None:
        if h.cluster != self.cluster:
            return f"cluster {h.cluster!r} is not this master's cluster {self.cluster!r}"
        if h.broker_name != self.broker_name:
            return f"brokerName {h.broker_name!r} is not this master's {self.broker_name!r}"
        if h.broker_id <= 0:
            return f"brokerId {h.broker_id}: a slave's brokerId must be > 0"
        size = self.config.mappedFileSizeCommitLog
        if h.commitlog_file_size != size:
            return (f"mappedFileSizeCommitLog {h.commitlog_file_size} differs from the "
                    f"master's {size}")
        if h.max_offset > self.store.max_phy_offset:
            return (f"the slave is at offset {h.max_offset}, beyond this master's "
                    f"{self.store.max_phy_offset}")
        if self.hello_check is not None:
            return self.hello_check(h)
        return None

    def current_epoch(self) -> int:
        return self.epoch_provider()[0]

    def on_handshake(self, conn: HAConnection) -> None:
        self.slaves.add(conn)

    def on_ack(self, conn: HAConnection, offset: int) -> None:
        self.group_transfer.on_ack(offset)

    def _on_commit(self) -> None:
        for c in self.slaves:
            c.pump()

    async def _tick(self) -> None:
        cfg = self.config
        period = min(1.0, cfg.haSendHeartbeatInterval / 2000)
        while True:
            await asyncio.sleep(period)
            now = _now_ms()
            for c in list(self.connections):
                c.tick(period)
                if now - c.last_read > cfg.haHousekeepingInterval:
                    log.warning("HA connection %s: nothing read for %d ms; closing it",
                                c.addr, now - c.last_read)
                    c.abort()
                elif now - c.last_write > cfg.haSendHeartbeatInterval:
                    c.heartbeat()

    # ------------------------------------------------------------------ SYNC_MASTER
    def is_slave_ok(self, master_put_where: int) -> bool:
        """4.x isSlaveOK: a slave is connected and the acked offset is within
        haSlaveFallbehindMax of the master."""
        return bool(self.slaves) and (
            master_put_where - self.group_transfer.acked) < self.config.haSlaveFallbehindMax

    def replica_waiter(self, result: PutMessageResult,
                       wait: bool) -> "asyncio.Future[PutMessageStatus] | None":
        """The store's hook (SYNC_MASTER): a future answered when a slave has the put."""
        if not wait:
            return None
        end = result.end_offset
        if not self.is_slave_ok(end):
            fut = self._not_available
            if fut is None:
                fut = self._not_available = asyncio.get_running_loop().create_future()
                fut.set_result(PutMessageStatus.SLAVE_NOT_AVAILABLE)
            return fut
        return self.group_transfer.submit(end)

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
            conns.append({
                "addr": c.addr, "slaveAckOffset": c.ack, "diff": top - ack,
                "inSync": c.ack >= 0 and top - c.ack < gap,
                "transferredByteInSecond": c.bytes_per_s, "transferFromWhere": c.transfer_from,
                "brokerId": c.hello.broker_id if c.hello else 0,
            })
        return {"master": True, "masterCommitLogMaxOffset": top,
                "inSyncSlaveNums": self.in_sync_replicas() - 1, "haConnectionInfo": conns,
                "haClientRuntimeInfo": {}}
