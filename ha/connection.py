"""HAConnection: the master's side of one slave connection (RocketMQ's HAConnection).

Read side: the slave's HELLO, then its 8-byte reports; the last complete value is its
ack. Write side: from the slave's first report on, committed CommitLog bytes in
transfers of at most haTransferBatchSize, never across a file boundary, written as
soon as they are committed (the store's commit listener calls ``pump``) and as fast
as the socket takes them (the transport's pause/resume_writing is the flow control).
Several transfers go out in one ``writelines`` (one writev).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol, cast

from ha.protocol import (
    HAProtocolError,
    MasterAccept,
    MasterReject,
    MasterStreamReader,
    OffsetReport,
    SlaveHello,
    encode_accept,
    encode_challenge,
    encode_reject,
    encode_transfer_header,
)
from rmq.common.clock import monotonic_ms
from rmq.protocol.epoch import EpochEntry
from rmq.remoting.connection import format_address
from rmq.store.message_store import MessageStore

log = logging.getLogger("rmq.ha")

# Bytes one pump() call writes before it lets the loop run other work.
PUMP_BUDGET = 4 << 20
# Transfers gathered into one writelines call.
WRITE_GATHER = 1 << 20


class HAMaster(Protocol):
    """What a connection uses of its HAService (the service creates connections: no import back)."""

    store: MessageStore
    transfer_batch: int
    write_buffer_high: int
    stats_rejected: int
    stats_bad_input: int

    def challenge(self) -> bytes | None: ...

    def authenticate(self, h: SlaveHello, nonce: bytes | None) -> str | None: ...

    def check_hello(self, h: SlaveHello) -> str | None: ...

    def current_epoch(self) -> int: ...

    def epoch_list(self) -> tuple[EpochEntry, ...] | None: ...

    def on_connection_made(self, conn: HAConnection) -> None: ...

    def on_connection_lost(self, conn: HAConnection) -> None: ...

    def on_handshake(self, conn: HAConnection) -> None: ...

    def on_ack(self, conn: HAConnection, offset: int) -> None: ...


class HAConnection(asyncio.Protocol):
    def __init__(self, service: HAMaster) -> None:
        self.service = service
        self.store = service.store
        self.addr = "?"
        self.hello: SlaveHello | None = None
        self.ack = -1  # last reported offset; -1 before the first report
        self.slave_request_offset = -1  # the first report
        self.next_transfer = -1  # nextTransferFromWhere; -1 until the first report
        self.transfer_from = -1  # where streaming started (for haStatus)
        self.bytes_sent = 0
        self.bytes_per_s = 0
        self._sent_at_tick = 0
        self.closed = False
        self.closing = False
        self._reader = MasterStreamReader()
        self._nonce: bytes | None = None  # this connection's challenge (credential set)
        self._transport: asyncio.Transport | None = None
        self._paused = False
        self._pump_scheduled = False
        now = monotonic_ms()
        self.connected_at = now
        self.last_read = now
        self.last_write = now

    def __repr__(self) -> str:
        who = f"{self.hello.broker_name}/{self.hello.broker_id}" if self.hello else "no handshake"
        return f"<HAConnection {self.addr} {who} ack={self.ack}>"

    # ------------------------------------------------------------------ asyncio
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream connection: create_server hands every protocol a Transport
        t = self._transport = cast(asyncio.Transport, transport)
        self.addr = format_address(t.get_extra_info("peername"))
        # (TCP_NODELAY: asyncio and uvloop set it on every TCP transport)
        t.set_write_buffer_limits(high=self.service.write_buffer_high)
        self.service.on_connection_made(self)
        if not self.closing:
            # first, before anything is read: the HELLO's proof must cover this nonce
            self._nonce = self.service.challenge()
            if self._nonce is not None:
                self._write([encode_challenge(self._nonce)])

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = self.closing = True
        self._transport = None
        self.service.on_connection_lost(self)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self.pump()

    def data_received(self, data: bytes) -> None:
        self.last_read = monotonic_ms()
        try:
            events = self._reader.feed(data)
        except HAProtocolError as e:
            log.warning("HA connection from %s closed: %s", self.addr, e)
            self.service.stats_bad_input += 1
            self.abort()
            return
        for ev in events:
            if self.closing:
                return
            if isinstance(ev, OffsetReport):
                self._on_report(ev.offset)
            elif isinstance(ev, SlaveHello):
                self._on_hello(ev)

    def eof_received(self) -> bool:
        return False

    # ------------------------------------------------------------------ handshake
    def _on_hello(self, hello: SlaveHello) -> None:
        svc = self.service
        epoch = svc.current_epoch()
        # the credential first: an unproven peer learns nothing of this master's names
        refused = svc.authenticate(hello, self._nonce)
        self._nonce = None  # one HELLO per nonce
        if refused is not None:
            log.warning(
                "HA handshake from %s refused, accessKey=%s: %s",
                self.addr,
                hello.proof.access_key if hello.proof is not None else "(none)",
                refused,
            )
            svc.stats_rejected += 1
            self._write([encode_reject(MasterReject(epoch, refused))])
            self.close()
            return
        reason = svc.check_hello(hello)
        if reason is not None:
            log.warning(
                "HA handshake from %s (%s, %s, id %d) rejected: %s",
                self.addr,
                hello.cluster,
                hello.broker_name,
                hello.broker_id,
                reason,
            )
            svc.stats_rejected += 1
            self._write([encode_reject(MasterReject(epoch, reason))])
            self.close()
            return
        self.hello = hello
        log.info(
            "HA slave %s (%s id %d, epoch %d, at offset %d, full sync %s) accepted",
            self.addr,
            hello.broker_name,
            hello.broker_id,
            hello.epoch,
            hello.max_offset,
            hello.full_sync,
        )
        # the history goes to a slave that sent its own (FLAG_EPOCHS), even if empty
        epochs = (svc.epoch_list() or ()) if hello.epochs is not None else None
        self._write([encode_accept(MasterAccept(epoch, self.store.max_phy_offset, epochs))])
        svc.on_handshake(self)

    # ------------------------------------------------------------------ read side
    def _on_report(self, offset: int) -> None:
        store = self.store
        max_offset = store.max_phy_offset
        if offset > max_offset or offset < 0:
            # RocketMQ 4.9.x: a slave ahead of its master is not ours to trust
            log.warning(
                "HA slave %s reported offset %d beyond this master's max offset %d; closing the connection",
                self.addr,
                offset,
                max_offset,
            )
            self.service.stats_bad_input += 1
            self.abort()
            return
        if self.slave_request_offset < 0:
            self.slave_request_offset = offset
            start = self._start_offset(offset)
            if start is None:
                self.abort()
                return
            self.next_transfer = self.transfer_from = start
            log.info(
                "HA slave %s requests offset %d; streaming from %d (master %d..%d)",
                self.addr,
                offset,
                start,
                store.min_phy_offset,
                max_offset,
            )
        self.ack = offset
        self.service.on_ack(self, offset)
        self.pump()

    def _start_offset(self, reported: int) -> int | None:
        store = self.store
        lo, hi = store.min_phy_offset, store.max_phy_offset
        if reported == 0:
            assert self.hello is not None
            if self.hello.full_sync:
                return lo
            # RocketMQ: an empty slave starts at the master's last file
            size = store.config.mappedFileSizeCommitLog
            return max(hi - hi % size, lo)
        if reported < lo:
            log.error(
                "HA slave %s is at offset %d, before this master's first file at %d: "
                "it cannot catch up (clear its store to copy everything again)",
                self.addr,
                reported,
                lo,
            )
            return None
        return reported

    # ------------------------------------------------------------------ write side
    def schedule_pump(self) -> None:
        if not self._pump_scheduled and not self.closing and self.next_transfer >= 0:
            self._pump_scheduled = True
            asyncio.get_running_loop().call_soon(self._scheduled_pump)

    def _scheduled_pump(self) -> None:
        self._pump_scheduled = False
        self.pump()

    def pump(self) -> None:
        """Write everything committed from next_transfer on, until the socket pushes back
        or PUMP_BUDGET is spent (then continue next iteration)."""
        if self.closing or self._paused or self.next_transfer < 0 or self._transport is None:
            return
        store = self.store
        batch = self.service.transfer_batch
        nxt = self.next_transfer
        end = store.max_phy_offset
        if nxt >= end:
            return
        frames: list[bytes] = []
        gathered = 0
        written = 0
        while nxt < end and written < PUMP_BUDGET:
            data = store.get_commitlog_data(nxt, batch)
            if data is None:
                # below the readable end but not readable: its file is gone (cleaned up)
                log.error(
                    "HA slave %s: no CommitLog data at %d (master %d..%d); closing the connection",
                    self.addr,
                    nxt,
                    store.min_phy_offset,
                    end,
                )
                self.abort()
                return
            n = len(data)
            frames.append(encode_transfer_header(nxt, n))
            frames.append(data)
            nxt += n
            gathered += n
            if gathered >= WRITE_GATHER:
                written += gathered
                self.next_transfer = nxt
                self._write(frames)
                frames = []
                gathered = 0
                if self._paused or self.closing:
                    return
        if frames:
            written += gathered
            self.next_transfer = nxt
            self._write(frames)
        if nxt < end and not self._paused:
            self.schedule_pump()

    def heartbeat(self) -> None:
        """spec 5.2: an empty transfer when nothing was written for a while."""
        if self.next_transfer >= 0 and not self.closing and not self._paused:
            self._write([encode_transfer_header(self.next_transfer, 0)])

    def _write(self, parts: list[bytes]) -> None:
        t = self._transport
        if t is None:
            return
        t.writelines(parts)
        self.last_write = monotonic_ms()
        self.bytes_sent += sum(len(p) for p in parts)

    def tick(self, seconds: float) -> None:
        """Every HAService timer tick: transfer rate."""
        self.bytes_per_s = int((self.bytes_sent - self._sent_at_tick) / seconds)
        self._sent_at_tick = self.bytes_sent

    # ------------------------------------------------------------------ closing
    def close(self) -> None:
        """Close after what is queued was written (a REJECT frame)."""
        self.closing = True
        if self._transport is not None and not self.closed:
            self._transport.close()

    def abort(self) -> None:
        self.closing = True
        if self._transport is not None and not self.closed:
            self._transport.abort()
