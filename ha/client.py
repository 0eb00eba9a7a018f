"""HAClient (slave, spec 5): connect to the master's HA port, report, append, catch up.

``HAClient`` keeps one connection to the master's HA address (from the NameServer's
register answer or haMasterAddress) and reconnects with backoff; ``start()``/``stop()``
are idempotent coroutines and ``update_master_address`` switches masters at runtime.

``ReplicaProtocol`` is the connection: our HELLO, then the master's ACCEPT, then
transfers. It receives straight into the ``SlaveStreamReader``'s 4 MiB buffer
(asyncio.BufferedProtocol) and appends the bytes from there (one pwritev per file and
read), so catching up costs one copy, kernel to page cache. Each read is answered with
one report of the new CommitLog end; dispatch (ConsumeQueues, index) follows the
appended bytes in the store's reput. A transfer that does not continue the CommitLog
exactly closes the connection (spec 5.2); creating the next CommitLog file happens in
a worker thread while reading is paused.

With a cluster credential (``credential``) the slave says HELLO only after the master's
CHALLENGE, proving the credential over its nonce (ha/protocol.py). A master that sends
no CHALLENGE within CHALLENGE_TIMEOUT has no credential: such a master cannot tell this
slave from any other peer, and a half-configured cluster is a mistake to surface, so
the slave does not replicate from it and says why (``last_reject``, one error line per
connection attempt).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from ssl import SSLContext
from typing import Any, cast

from ha.peer import EpochsProvider, HAPeer
from ha.protocol import (
    FLAG_FULL_SYNC,
    EpochProvider,
    HAProtocolError,
    MasterAccept,
    MasterChallenge,
    MasterReject,
    SlaveHello,
    SlaveStreamReader,
    Transfer,
    encode_hello,
    encode_offset_report,
)
from rmq.auth.credentials import Credential
from rmq.common.clock import monotonic_ms
from rmq.runtime.service import ServiceLoop, TaskSet
from rmq.store.errors import StoreError
from rmq.store.message_store import MessageStore

log = logging.getLogger("rmq.ha")

# Called with the master's ACCEPT before the first report (the failover side may
# truncate there); may return an awaitable.
AcceptHook = Callable[[MasterAccept], "Awaitable[None] | None"]


class HandshakeRefused(Exception):
    """Raised by an accept hook that declines this master on purpose (no common epoch
    history, a stale master ...): logged as a line, not as a crash."""


BACKOFF_MIN = 0.2
BACKOFF_MAX = 5.0  # RocketMQ waits 5 s after a failed connect
CONNECT_TIMEOUT = 3.0
# A slave with a credential waits this long for the master's CHALLENGE.
CHALLENGE_TIMEOUT = 5.0
# While catching up, dispatch (the same loop) waits this long between its batches: the
# CommitLog copy goes first, ConsumeQueues follow (their lag is reported).
CATCHUP_DISPATCH_PAUSE = 0.05


class ReplicaProtocol(asyncio.BufferedProtocol):
    def __init__(self, client: HAClient) -> None:
        self.client = client
        self.store = client.store
        self.reader = SlaveStreamReader(client.buffer_size, expect_epochs=client.epochs_provider is not None)
        self.transport: asyncio.Transport | None = None
        self.accepted: MasterAccept | None = None
        self.rejected: MasterReject | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.closing = False
        self._pending: list[Transfer] = []
        self._busy = False  # appending is waiting for a file / the accept hook
        self._reported = -1
        self.last_read = self.last_write = monotonic_ms()
        self.bytes_received = 0
        # catching up with the master's end as of the ACCEPT
        self._catchup: tuple[int, int, float] | None = None  # (from, target, t accept)
        self._first_data = 0.0
        self._aux = TaskSet(log)  # file creation / accept hook in flight
        self._hello_sent = False
        self._challenge_timer: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ asyncio
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream connection: create_connection hands the protocol a Transport
        self.transport = cast(asyncio.Transport, transport)
        # (TCP_NODELAY: asyncio and uvloop set it on every TCP transport)
        if self.client.credential is None:
            self._send_hello()
        else:
            # the HELLO must prove the credential over the master's nonce: wait for it
            self._challenge_timer = asyncio.get_running_loop().call_later(CHALLENGE_TIMEOUT, self._no_challenge)

    def _send_hello(self, nonce: bytes = b"") -> None:
        self._hello_sent = True
        c = self.client
        epoch, start = c.epoch_provider()
        cfg = self.store.config
        epochs = c.epoch_list()
        hello = SlaveHello(
            c.cluster,
            c.broker_name,
            c.broker_id,
            epoch,
            start,
            self.store.max_phy_offset,
            cfg.mappedFileSizeCommitLog,
            FLAG_FULL_SYNC if cfg.haFullSync else 0,
            epochs,
        )
        self._write(encode_hello(hello, c.credential, nonce))

    def _on_challenge(self, ch: MasterChallenge) -> None:
        if self._challenge_timer is not None:
            self._challenge_timer.cancel()
            self._challenge_timer = None
        if self.client.credential is None:
            # our HELLO (unproven) went out already; the master's REJECT says the rest
            log.error(
                "HA master %s asks for the cluster credential and this broker has none "
                "(innerClientAuthenticationCredentials)",
                self.client.master_address,
            )
        elif not self._hello_sent:
            self._send_hello(ch.nonce)

    def _no_challenge(self) -> None:
        self._challenge_timer = None
        if self.closing or self._hello_sent:
            return
        why = (
            f"master {self.client.master_address} sent no challenge within {CHALLENGE_TIMEOUT:.0f} s: it has no "
            "cluster credential (innerClientAuthenticationCredentials) while this slave has one; "
            "not replicating from it"
        )
        self.client.last_reject = why
        self._fail(why)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._challenge_timer is not None:
            self._challenge_timer.cancel()
            self._challenge_timer = None
        self.closing = True
        self.store.set_dispatch_throttle(0.0)
        self.transport = None
        if not self.closed.done():
            self.closed.set_result(None)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.reader.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.reader.buffer_updated(nbytes)
        self.bytes_received += nbytes
        self.last_read = monotonic_ms()
        if self._busy:
            return
        try:
            events = self.reader.events()
        except HAProtocolError as e:
            self._fail(f"bad data from the master: {e}")
            return
        self._handle(events)

    def eof_received(self) -> bool:
        return False

    # ------------------------------------------------------------------ events
    def _handle(self, events: list) -> None:
        for i, ev in enumerate(events):
            if isinstance(ev, MasterChallenge):
                self._on_challenge(ev)
                continue
            if isinstance(ev, Transfer):
                self._pending.extend(events[i:])  # only transfers follow the answer
                break
            if isinstance(ev, MasterAccept):
                self.accepted = ev
                log.info(
                    "HA master %s accepted this slave (master epoch %d, max offset %d)",
                    self.client.master_address,
                    ev.epoch,
                    ev.master_max_offset,
                )
                here = self.store.max_phy_offset
                if ev.master_max_offset > here:
                    self._catchup = (here, ev.master_max_offset, time.perf_counter())
                    # appending first: dispatch takes one batch per CATCHUP_DISPATCH_PAUSE
                    # until the slave has what the master had at the handshake
                    self.store.set_dispatch_throttle(CATCHUP_DISPATCH_PAUSE)
                self.client.on_accepted(self)
                hook = self.client.accept_hook
                r = hook(ev) if hook is not None else None
                if r is not None:
                    self._busy = True
                    if self.transport is not None:
                        self.transport.pause_reading()
                    self._spawn(self._after_hook(r, events[i + 1 :]), "HAClient-accept-hook")
                    return
                self._report(force=True)
            elif isinstance(ev, MasterReject):
                self.rejected = ev
                log.error(
                    "HA master %s rejected this slave: %s (master epoch %d)",
                    self.client.master_address,
                    ev.reason,
                    ev.epoch,
                )
                self.close()
                return
        self._apply()

    async def _after_hook(self, r: Awaitable[None], rest: list) -> None:
        try:
            await r
        except HandshakeRefused as e:
            log.warning("HA master %s not followed: %s", self.client.master_address, e)
            self._fail(f"accept hook refused: {e}")
            return
        except Exception as e:
            log.exception("HA accept hook failed")
            self._fail(f"accept hook failed: {e}")
            return
        self._busy = False
        if self.closing:
            return
        self._report(force=True)
        self._pending.extend(rest)
        self._resume()

    def _apply(self) -> None:
        """Append pending transfers; stops (reading paused) when a file must be made."""
        pending = self._pending
        if not pending:
            return
        store = self.store
        size = store.config.mappedFileSizeCommitLog
        i = 0
        n = len(pending)
        try:
            while i < n:
                expect = store.max_phy_offset
                t = pending[i]
                # an empty slave takes the master's first offset, whatever it is
                if t.offset != expect and not store.commitlog_empty:
                    self._fail(f"master sent offset {t.offset}, this slave's CommitLog ends at {expect}")
                    return
                if not t.size:
                    i += 1
                    continue
                if not store.replica_file_ready(t.offset):
                    del pending[:i]
                    self._make_file(t.offset)
                    return
                # one run: transfers that continue each other inside one file
                file_end = t.offset - t.offset % size + size
                run = [t.data]
                end = t.offset + t.size
                j = i + 1
                while j < n:
                    u = pending[j]
                    if u.offset != end or u.offset + u.size > file_end:
                        break
                    if u.size:
                        run.append(u.data)
                        end += u.size
                    j += 1
                if not self._first_data:
                    self._first_data = time.perf_counter()
                # the reader's transfers are views of its buffer (Transfer.data is typed
                # Buffer for the encoder's sake)
                reached = store.append_replicated(t.offset, run)  # type: ignore[arg-type]
                if self._catchup is not None and reached >= self._catchup[1]:
                    self._caught_up(reached)
                i = j
        except (StoreError, OSError) as e:
            self._fail(f"appending replicated data failed: {e}")
            return
        pending.clear()
        self._report()

    def _caught_up(self, reached: int) -> None:
        assert self._catchup is not None  # called only while catching up
        start, _, t_accept = self._catchup
        self._catchup = None
        self.store.set_dispatch_throttle(0.0)
        now = time.perf_counter()
        n = reached - start
        secs = max(now - self._first_data, 1e-9)
        self.client.last_catchup = {
            "bytes": n,
            "micros": int(secs * 1e6),
            "microsSinceAccept": int((now - t_accept) * 1e6),
        }
        log.info(
            "HA: caught up with master %s at offset %d: %d bytes in %.3f s (%.0f MB/s; "
            "%.3f s since the handshake); dispatch is %d bytes behind",
            self.client.master_address,
            reached,
            n,
            secs,
            n / secs / 1e6,
            now - t_accept,
            self.store.dispatch_behind_bytes,
        )

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        self._aux.spawn(coro, name)

    def _make_file(self, offset: int) -> None:
        self._busy = True
        if self.transport is not None:
            self.transport.pause_reading()
        self._spawn(self._file_then_resume(offset), "HAClient-create-file")

    async def _file_then_resume(self, offset: int) -> None:
        try:
            await self.store.create_replica_file(offset)
        except (OSError, StoreError) as e:
            log.error("cannot create the CommitLog file for replicated offset %d: %s", offset, e)
            self._fail(f"cannot create a CommitLog file: {e}")
            return
        self._busy = False
        if self.closing:
            return
        self._resume()

    def _resume(self) -> None:
        """Continue with what was received meanwhile, then read again."""
        try:
            events = self.reader.events()
        except HAProtocolError as e:
            self._fail(f"bad data from the master: {e}")
            return
        # past the handshake (this runs after it) the reader yields transfers only
        self._pending.extend(events)  # type: ignore[arg-type]
        self._apply()
        if not self._busy and self.transport is not None and not self.closing:
            self.transport.resume_reading()

    # ------------------------------------------------------------------ writing
    def _report(self, force: bool = False) -> None:
        off = self.store.max_phy_offset
        if force or off > self._reported:
            self._reported = off
            self._write(encode_offset_report(off))

    def heartbeat(self) -> None:
        if self.accepted is not None and not self._busy:
            self._report(force=True)

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.closing:
            self.transport.write(data)
            self.last_write = monotonic_ms()

    # ------------------------------------------------------------------ closing
    def _fail(self, why: str) -> None:
        log.error("HA connection to master %s closed: %s", self.client.master_address, why)
        self._pending.clear()
        self.abort()

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.abort()


class HAClient(HAPeer):
    def __init__(
        self,
        store: MessageStore,
        *,
        cluster: str,
        broker_name: str,
        broker_id: int,
        master_address: str = "",
        epoch_provider: EpochProvider | None = None,
        accept_hook: AcceptHook | None = None,
        epochs_provider: EpochsProvider | None = None,
        buffer_size: int = 4 * 1024 * 1024,
        credential: Credential | None = None,
        ssl: SSLContext | None = None,
    ) -> None:
        # epochs_provider: (controller mode) this slave's epoch history, sent in the HELLO
        super().__init__(store, cluster, broker_name, epoch_provider, epochs_provider, credential)
        self.ssl = ssl  # TLS to the master's HA port (rmq.remoting.tls.outbound_context)
        self.broker_id = broker_id
        self.accept_hook = accept_hook
        self.buffer_size = buffer_size
        self._master = master_address
        self._service = _ConnectService(self)
        self.conn: ReplicaProtocol | None = None
        self.connects = 0
        self.last_reject: str | None = None
        self.last_catchup: dict[str, int] | None = None
        self.bytes_per_s = 0
        self._received_at_tick = 0

    @property
    def master_address(self) -> str:
        return self._master

    @property
    def running(self) -> bool:
        return self._service.started

    @property
    def connected(self) -> bool:
        c = self.conn
        return c is not None and c.accepted is not None and not c.closing

    def update_master_address(self, addr: str) -> None:
        """Follow a (new) master's HA address; "" disconnects."""
        addr = addr or ""
        if addr == self._master:
            return
        log.info("HA master address %s -> %s", self._master or "(none)", addr or "(none)")
        self._master = addr
        if self.conn is not None:
            self.conn.close()
        self._service.master_changed()

    async def start(self) -> None:
        self._service.start()

    async def stop(self) -> None:
        if not self._service.started:
            return
        if self.conn is not None:
            self.conn.abort()
        # cancel: the loop may be blocked in a connect or in a connection's life
        await self._service.stop(cancel=True)
        self.conn = None
        self.store.set_dispatch_throttle(0.0)

    def on_accepted(self, conn: ReplicaProtocol) -> None:
        self.last_reject = None

    async def _connect_once(self, addr: str, failures: int) -> float | None:
        """One connection's life; its duration in seconds, None if it never connected."""
        host, _, port = addr.rpartition(":")
        loop = asyncio.get_running_loop()
        try:
            # server_hostname "": no SNI, no host name check (the remoting links do the same)
            connect = (
                loop.create_connection(lambda: ReplicaProtocol(self), host, int(port))
                if self.ssl is None
                else loop.create_connection(
                    lambda: ReplicaProtocol(self), host, int(port), ssl=self.ssl, server_hostname=""
                )
            )
            _, proto = await asyncio.wait_for(connect, CONNECT_TIMEOUT)
        except (TimeoutError, OSError, ValueError) as e:
            if failures == 0 or failures % 20 == 0:
                log.warning("HA: cannot connect to master %s: %s", addr, e or type(e).__name__)
            return None
        self.connects += 1
        self.conn = proto
        start = time.monotonic()
        self._received_at_tick = 0
        keepalive = _Keepalive(self, proto)
        keepalive.start()
        try:
            await proto.closed
        finally:
            await keepalive.stop(cancel=True)
            if proto.rejected is not None:
                self.last_reject = proto.rejected.reason
        log.info(
            "HA connection to master %s ended after %.1f s (CommitLog at %d)",
            addr,
            time.monotonic() - start,
            self.store.max_phy_offset,
        )
        return time.monotonic() - start

    def keepalive(self, proto: ReplicaProtocol, period: float) -> None:
        """One keepalive tick of a connection: reports as heartbeats
        (haSendHeartbeatInterval) and housekeeping (no read for haHousekeepingInterval
        closes the connection)."""
        if proto.closing:
            return
        cfg = self.config
        now = monotonic_ms()
        self.bytes_per_s = int((proto.bytes_received - self._received_at_tick) / period)
        self._received_at_tick = proto.bytes_received
        if now - proto.last_read > cfg.haHousekeepingInterval:
            log.warning(
                "HA: nothing from master %s for %d ms; reconnecting", self.master_address, now - proto.last_read
            )
            proto.abort()
            return
        if now - proto.last_write > cfg.haSendHeartbeatInterval:
            proto.heartbeat()

    def runtime_info(self) -> dict[str, Any]:
        """RocketMQ 5.x HARuntimeInfo of a slave (the body of GET_BROKER_HA_STATUS)."""
        c = self.conn
        wall = time.time() * 1000
        mono = monotonic_ms()
        return {
            "master": False,
            "masterCommitLogMaxOffset": 0,
            "inSyncSlaveNums": 0,
            "haConnectionInfo": [],
            "haClientRuntimeInfo": {
                "masterAddr": self._master,
                "transferredByteInSecond": self.bytes_per_s,
                "maxOffset": self.store.max_phy_offset,
                "lastReadTimestamp": int(wall - (mono - c.last_read)) if c else 0,
                "lastWriteTimestamp": int(wall - (mono - c.last_write)) if c else 0,
                "masterFlushOffset": 0,
                "isActivated": self.connected,
                "lastReject": self.last_reject,
                "lastCatchUp": self.last_catchup,
            },
        }


class _ConnectService(ServiceLoop):
    """The HAClient's loop: one connection to the master at a time, a new one after a
    backoff (BACKOFF_MIN doubling to BACKOFF_MAX, back to the minimum after a connection
    that lived > 10 s), at once when the master address changes, idle without one."""

    def __init__(self, client: HAClient) -> None:
        super().__init__("HAClient", log)
        self._client = client
        self._backoff = BACKOFF_MIN
        self._next_wait = 0.0
        self._failures = 0
        self._changed = False

    def master_changed(self) -> None:
        self._changed = True
        self.wakeup()

    def interval(self) -> float | None:
        return self._next_wait if self._client.master_address else None

    async def run_once(self) -> None:
        addr = self._client.master_address
        if not addr:
            return
        self._changed = False
        lived = await self._client._connect_once(addr, self._failures)
        if lived is None:
            self._failures += 1
        else:
            self._failures = 0
            if lived > 10:
                self._backoff = BACKOFF_MIN
        if self._changed:  # (the wakeup makes the next wait return at once)
            self._backoff = BACKOFF_MIN
            self._next_wait = 0.0
            return
        self._next_wait = self._backoff
        self._backoff = min(self._backoff * 2, BACKOFF_MAX)


class _Keepalive(ServiceLoop):
    """A connection's timer (every second, or half the heartbeat interval when shorter)."""

    def __init__(self, client: HAClient, proto: ReplicaProtocol) -> None:
        super().__init__("HAClient-keepalive", log)
        self._client = client
        self._proto = proto
        self.period = min(1.0, client.config.haSendHeartbeatInterval / 2000)

    def interval(self) -> float:
        return self.period

    async def run_once(self) -> None:
        self._client.keepalive(self._proto, self.period)
