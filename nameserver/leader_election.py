"""Leader election among the controllers on an etcd lease, the way Patroni does it.

One key (``key``) names the leader: whoever created it under a live lease of its own leads.

*Campaign.* Grant a lease, then one transaction: if the key does not exist
(``create_revision == 0``) put our value under our lease, else read the holder. The key's
``create_revision`` is then our leadership's revision (``leader_revision``).

*Leading.* Renew the lease every ``ttl / 3``. A leader trusts its lease for less time than etcd
gives it: etcd counts the TTL from when it receives a keepalive, the leader from when it SENT the
one that succeeded (monotonic clock), minus a margin (10 % of the TTL, at least 200 ms). So the
leader believes it leads until ``renewed_at + ttl - margin`` and no longer: ``is_leader`` checks
the clock, and ``on_lost`` is called at that deadline at the latest (give or take the event loop's
latency, well inside the margin) when no renewal succeeded — before etcd can expire the lease and
let another controller take the key. Leases only get longer in etcd's hands (a new etcd leader
extends them), never shorter, so the bound holds across etcd elections. The leader also reads the
key after each renewal and steps down when the key is gone or held under another lease (deleted
by an operator).

*Fencing.* Every decision the leader writes is a transaction that also compares
``create_revision(key) == leader_revision`` (``fence()``). A deposed leader — paused, partitioned,
late in noticing — cannot write: its key is gone (create_revision 0) or belongs to the next leader
(a later create_revision). The deadline above keeps a leader from acting on stale beliefs; the
fence makes a write impossible even when it does.

*Standing by.* The others read the key every ``ttl / 3`` (``leader_value()`` caches the holder's
value) and campaign when it is gone. After a leader dies without revoking its lease the next
one takes over within ``ttl + ttl / 3`` plus a round trip; ``stop()`` revokes the lease, so an
orderly hand-over is as fast as the next poll.

*TTL.* etcd grants whole seconds, and no less than its minimum TTL: 1.5 x ``--election-timeout``
rounded up — 2 s with etcd 3.4's default flags (heartbeat 100 ms, election timeout 1000 ms), 1 s
with ``--election-timeout 500``. The granted TTL is the one used. Default here: 3 s.

*Callbacks* are plain functions called on the election's task: ``on_elected()`` once leadership is
won, ``on_lost()`` once it is lost or given up (``stop()``), each ``on_elected`` followed by
exactly one ``on_lost``. They must not block: a callback with async work starts a task for it
(``is_leader`` and ``fence()`` are what that work checks). An exception in a callback is logged.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable

from nameserver.etcd import Compare, EtcdClient, EtcdException, Key, Lease, Op
from rmq.runtime.service import PeriodicService

__all__ = ["LeaderElection", "NotLeaderError", "lease_margin"]

log = logging.getLogger("rmq.nameserver.election")

Callback = Callable[[], None]

# how soon a leader retries a failed renewal (the client already tried every endpoint)
_RETRY_S = 0.1


class NotLeaderError(RuntimeError):
    """``fence()`` asked of a controller that does not lead."""


def lease_margin(ttl_s: float) -> float:
    """How much earlier than etcd a leader gives up its lease: 10 %, at least 200 ms."""
    return max(0.1 * ttl_s, 0.2)


class LeaderElection:
    """Campaign for ``key`` with ``value`` (e.g. the controller's address) on ``client``."""

    def __init__(
        self,
        client: EtcdClient,
        key: Key,
        value: bytes,
        ttl_s: float = 3.0,
        on_elected: Callback | None = None,
        on_lost: Callback | None = None,
        poll_s: float | None = None,
    ) -> None:
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be positive, got {ttl_s}")
        self._client = client
        self.key = key.encode() if isinstance(key, str) else bytes(key)
        self.value = value
        self.ttl_s = ttl_s
        self._on_elected = on_elected
        self._on_lost = on_lost
        # one step a poll: stand by, and lead (for as long as that lasts) when the campaign is won
        # a standby's poll bounds how late it notices the key is gone
        self._loop = PeriodicService(f"election {self._name}", poll_s or ttl_s / 3, self._step, log, initial=0)
        self._lease: Lease | None = None  # the lease we lead with
        self._leading = False
        self._leader_revision: int | None = None
        self._deadline: float | None = None  # monotonic; we lead until then unless renewed
        self._renewed_at: float | None = None  # monotonic send time of the last successful grant/keepalive
        self._granted_ttl = 0
        self._leader_value: bytes | None = None
        self._poll_failing = False

    # ------------------------------------------------------------------ state
    @property
    def is_leader(self) -> bool:
        """True while we hold the key and our own clock says the lease is alive."""
        return self._leading and self._deadline is not None and time.monotonic() < self._deadline

    @property
    def leader_revision(self) -> int | None:
        """create_revision of our key while we lead (what ``fence()`` compares), else None."""
        return self._leader_revision if self._leading else None

    def leader_value(self) -> bytes | None:
        """The current leader's value as last seen (ours while we lead); None: no leader seen."""
        return self._leader_value

    def fence(self) -> Compare:
        """The compare every decision of this leader adds to its transaction."""
        if not self.is_leader or self._leader_revision is None:
            raise NotLeaderError(f"not the leader of {self.key.decode(errors='replace')}")
        return Compare.create_revision(self.key) == self._leader_revision

    @property
    def lease(self) -> Lease | None:
        """The lease we lead with, None while standing by."""
        return self._lease if self._leading else None

    # The three below describe the current leadership, or the last one once it is over.
    @property
    def renewed_at(self) -> float | None:
        """time.monotonic() at which the last successful grant or keepalive of our lease was
        sent; etcd keeps the lease at least until ``renewed_at + granted_ttl``."""
        return self._renewed_at

    @property
    def granted_ttl(self) -> int:
        """The TTL etcd gave our lease (seconds; 0 before we first led)."""
        return self._granted_ttl

    @property
    def deadline(self) -> float | None:
        """time.monotonic() until which we believe we lead (``renewed_at + ttl - margin``)."""
        return self._deadline

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start campaigning (on the running loop); returns at once."""
        self._loop.start()

    async def stop(self, revoke: bool = True) -> None:
        """Stop; a leader calls ``on_lost`` and (``revoke``) revokes its lease so a standby takes
        over at its next poll. ``revoke=False`` leaves the lease to expire, as a crash would."""
        await self._loop.stop(cancel=True)  # a renewal or campaign in flight is abandoned
        lease = self._lease
        if self._leading:
            self._step_down("stopped")
        if revoke and lease is not None:
            await self._revoke(lease)

    @property
    def _name(self) -> str:
        return self.key.decode(errors="replace")

    # ------------------------------------------------------------------ the loop
    async def _step(self) -> None:
        if await self._stand_by():
            await self._lead()

    async def _stand_by(self) -> bool:
        """Read the key; campaign when it is gone. True when we won."""
        try:
            kv = await self._client.get(self.key)
            if kv is not None:
                self._leader_value = kv.value
                self._poll_ok()
                return False
            won = await self._campaign()
        except EtcdException as e:
            self._poll_failed(e)
            return False
        self._poll_ok()
        return won

    async def _campaign(self) -> bool:
        ttl = max(1, math.ceil(self.ttl_s))
        sent = time.monotonic()
        lease = await self._client.lease_grant(ttl)
        try:
            r = await self._client.txn(
                [Compare.create_revision(self.key) == 0], [Op.put(self.key, self.value, lease.id)], [Op.get(self.key)]
            )
        except BaseException:
            await self._revoke(lease)  # it may have been applied; the key then goes with the lease
            raise
        if r.succeeded:
            revision = r.revision  # the put created the key: its create_revision
        elif r.kv is not None and r.kv.lease == lease.id:
            revision = r.kv.create_revision  # an earlier try of this txn went through
        else:
            self._leader_value = r.kv.value if r.kv is not None else None
            log.info("election %s: campaign lost; leader is %r", self._name, self._leader_value)
            await self._revoke(lease)
            return False
        deadline = sent + lease.ttl - lease_margin(lease.ttl)
        if time.monotonic() >= deadline:  # the campaign took so long that the lease is not trustworthy
            log.warning("election %s: won too late to trust lease %x; giving it back", self._name, lease.id)
            await self._revoke(lease)
            return False
        self._lease, self._renewed_at, self._deadline, self._granted_ttl = lease, sent, deadline, lease.ttl
        self._leader_revision, self._leader_value, self._leading = revision, self.value, True
        log.warning(
            "election %s: elected with lease %x (ttl %d s), leader revision %d",
            self._name,
            lease.id,
            lease.ttl,
            revision,
        )
        self._call(self._on_elected, "on_elected")
        return True

    async def _lead(self) -> None:
        """Renew the lease until that fails for longer than we trust it, or the key is gone."""
        lease, renewed_at, deadline = self._lease, self._renewed_at, self._deadline
        assert lease is not None and renewed_at is not None and deadline is not None
        loop = asyncio.get_running_loop()
        renew_every = lease.ttl / 3
        reason = "the lease could not be renewed in time"
        next_renewal = renewed_at + renew_every
        try:
            # the watchdog: whatever this block awaits (a sleep, a hung request) ends at the deadline
            async with asyncio.timeout_at(_loop_time(loop, deadline)) as watchdog:
                while True:
                    await asyncio.sleep(max(0.0, next_renewal - time.monotonic()))
                    sent = time.monotonic()
                    try:
                        ttl = await self._client.lease_keepalive(lease.id)
                    except EtcdException as e:
                        log.warning("election %s: renewing lease %x failed: %s", self._name, lease.id, e)
                        next_renewal = time.monotonic() + _RETRY_S
                        continue
                    if ttl <= 0:
                        reason = f"etcd no longer has lease {lease.id:x}"
                        break
                    deadline = sent + ttl - lease_margin(ttl)
                    self._renewed_at, self._deadline, self._granted_ttl = sent, deadline, ttl
                    watchdog.reschedule(_loop_time(loop, deadline))
                    next_renewal = sent + renew_every
                    gone = await self._key_taken(lease)
                    if gone:
                        reason = gone
                        break
        except TimeoutError:
            pass
        self._step_down(reason)
        await self._revoke(lease)  # lets a standby in at once when etcd is still there

    async def _key_taken(self, lease: Lease) -> str | None:
        """Why the key no longer is ours, None while it is (or etcd did not answer)."""
        try:
            kv = await self._client.get(self.key)
        except EtcdException:
            return None  # the renewals decide; this check is for a key deleted by hand
        if kv is None:
            return "the key was deleted"
        if kv.lease != lease.id:
            return f"the key is held under lease {kv.lease:x}"
        return None

    def _step_down(self, reason: str) -> None:
        lease = self._lease
        self._leading = False
        self._leader_revision = None
        self._lease = None
        if self._leader_value == self.value:
            self._leader_value = None
        log.warning("election %s: no longer the leader (lease %x): %s", self._name, lease.id if lease else 0, reason)
        self._call(self._on_lost, "on_lost")

    async def _revoke(self, lease: Lease) -> None:
        try:
            await self._client.lease_revoke(lease.id)
        except EtcdException as e:
            log.info("election %s: lease %x not revoked (%s); it expires in %d s", self._name, lease.id, e, lease.ttl)

    def _call(self, callback: Callback | None, what: str) -> None:
        if callback is None:
            return
        try:
            callback()
        except Exception:
            log.exception("election %s: %s failed", self._name, what)

    def _poll_failed(self, e: EtcdException) -> None:
        # a standby polls every ttl/3: say it once per outage, not every poll
        if not self._poll_failing:
            log.warning("election %s: cannot read the leader key: %s", self._name, e)
        self._poll_failing = True

    def _poll_ok(self) -> None:
        if self._poll_failing:
            log.info("election %s: etcd answers again", self._name)
        self._poll_failing = False


def _loop_time(loop: asyncio.AbstractEventLoop, monotonic_t: float) -> float:
    """A time.monotonic() instant on the loop's clock (uvloop's has another origin)."""
    return loop.time() + (monotonic_t - time.monotonic())
