"""The master lease (fencing) of a broker in controller mode; sans-IO, clock injected.

*The rule.* A master in controller mode acknowledges writes only while it holds a lease.
The controller grants one in every heartbeat answer that names this broker master
(``masterLeaseMillis``); the broker counts it from when it *sent* that heartbeat, on a
monotonic clock. The controller elects a successor only after ``controllerMasterTimeout``
without a heartbeat *received* from the master, and the lease is shorter than that
timeout: the send precedes the receipt, so the lease of an isolated master runs out
before any controller may elect a replacement. A master without a valid lease answers
sends SERVICE_NOT_AVAILABLE with ``refusal()``'s remark (nothing is stored), so the
clients retry on another broker.

*Failsafe* (Patroni's DCS failsafe mode; rmq/broker/controller_role.py asks, this class
keeps the result). While no controller leads at all (etcd unreachable as a whole: the
heartbeats fail or answer CONTROLLER_NOT_LEADER) nobody can be elected, and stopping
the master would only make the whole group unwritable. The rule a master then follows:
when its lease is about to lapse and no controller answered its last heartbeat round,
it asks every other member of the last in-sync set it was told (RMQ_FAILSAFE_CHECK):
"do you follow me in this epoch, and can you not reach a controller either?" (the
slave heartbeats to find out). Only if *every* one says yes does it extend its lease by
the lease time, counted from when it *sent* the checks (``extend_failsafe``); a refusal
or a silence lets the lease lapse. Each confirming slave *promises* not to take writes
within one lease time of its confirmation, should a controller elect it later
(``promise``): whatever the controllers do once they return, the old master's extended
lease ends before the new master's first write. A controller that loses its leadership
grants leases only up to its end; the master heartbeats as such a lease ends, so the
failsafe takes over after a heartbeat and a check (a few ms of refused writes).

No failsafe when the controller allows unclean elections (``enableElectUncleanMaster``:
a successor may come from outside the in-sync set, whom the master cannot ask), nor when
the set may have grown without the master hearing it (it reported a slave in sync that
the set it was told cannot account for). When the in-sync set is this master alone, the
failsafe holds vacuously: a clean election can only pick a member of the set, so nobody
can replace this master.

Static roles (no controller) are never fenced: their processors get ``UNFENCED``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["WriteFence", "UNFENCED", "MasterLease"]


class WriteFence(Protocol):
    """What a processor that stores messages asks before storing (once per request)."""

    def refusal(self) -> str | None:
        """None: writes are allowed now; else why not (the SERVICE_NOT_AVAILABLE remark)."""
        ...


class _Unfenced:
    """Static roles: the store's role alone decides."""

    __slots__ = ()

    def refusal(self) -> str | None:
        return None


UNFENCED: WriteFence = _Unfenced()


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


class MasterLease:
    """This broker's lease while it leads in controller mode.

    ``leading`` is set by ``lead()`` when the broker becomes master and cleared by
    ``drop()`` once it stepped down (its store refuses writes by itself then). While
    leading, writes are allowed in ``[not_before, deadline)`` on ``clock`` (seconds).
    ``granted`` / ``extend_failsafe`` only ever move the deadline later; ``revoke``
    ends the lease at once (the controller named another master).
    """

    def __init__(
        self, group: str, clock: Callable[[], float] = time.monotonic, controllers: Callable[[], str] = lambda: "?"
    ) -> None:
        self.group = group
        self._clock = clock
        self._controllers = controllers
        self.leading = False
        self.deadline = -math.inf
        self.not_before = -math.inf
        self.lease_ms: int | None = None  # the last granted lease time
        self.source = ""  # who granted the deadline in force
        self.revoked = ""  # why the lease was ended early (empty: it was not)
        self.longest_ms = 0  # the longest lease time ever granted here
        # the last failsafe confirmation this broker gave as a slave: (when, to whom)
        self.promised_at = -math.inf
        self.promised_to = ""
        # called when a write is refused (the rare path): the owner logs the lapse then,
        # not only at its next heartbeat round, which may already have renewed the lease
        self.on_refused: Callable[[], object] | None = None

    # ------------------------------------------------------------------ the hot path
    def refusal(self) -> str | None:
        if not self.leading:
            return None
        now = self._clock()
        if self.not_before <= now < self.deadline:
            return None
        if self.on_refused is not None:
            self.on_refused()
        return self._why(now)

    def valid(self, now: float) -> bool:
        """Writes allowed at ``now`` (always, when not leading: the store decides)."""
        return not self.leading or self.not_before <= now < self.deadline

    def remaining(self, now: float) -> float:
        """Seconds of lease left at ``now`` (negative: lapsed that long ago)."""
        return self.deadline - now

    def _why(self, now: float) -> str:
        if now < self.not_before:
            return (
                f"this broker confirmed the failsafe check of {self.promised_to} of {self.group} and "
                f"takes writes only in {_ms(self.not_before - now)} ms, when that master's lease has "
                "surely run out; not accepting writes so clients retry elsewhere"
            )
        if self.revoked:
            return (
                f"master lease of {self.group} ended: {self.revoked}; not accepting writes so clients retry elsewhere"
            )
        if self.deadline == -math.inf:
            return (
                f"this master of {self.group} holds no lease from a controller (controllers "
                f"{self._controllers()}); not accepting writes so clients retry elsewhere"
            )
        return (
            f"master lease of {self.group} expired {_ms(now - self.deadline)} ms ago: no controller "
            f"renewed it (controllers {self._controllers()}; last granted by {self.source}); "
            "not accepting writes so clients retry elsewhere"
        )

    # ------------------------------------------------------------------ changes
    def granted(self, sent_at: float, lease_ms: int, by: str = "a controller") -> None:
        """A controller's answer to the heartbeat sent at ``sent_at`` grants ``lease_ms``."""
        self.lease_ms = lease_ms
        self.longest_ms = max(self.longest_ms, lease_ms)
        self.revoked = ""
        self._extend(sent_at + lease_ms / 1000, by)

    def extend_failsafe(self, sent_at: float, lease_ms: int, members: str = "") -> None:
        """Every in-sync member confirmed the checks sent at ``sent_at``."""
        if not self.revoked:
            self._extend(sent_at + lease_ms / 1000, f"failsafe ({members or 'in-sync set is this master alone'})")

    def _extend(self, deadline: float, by: str) -> None:
        if deadline > self.deadline:
            self.deadline = deadline
            self.source = by

    def lead(self, new_epoch: bool = True) -> None:
        """This broker takes writes from now on, under the lease. Leading an epoch it
        did not lead before, and having confirmed a failsafe check as a slave: not
        within the longest lease time granted here of that confirmation (the old
        master may hold its lease that long)."""
        self.leading = True
        self.revoked = ""
        self.not_before = self.promised_at + self.longest_ms / 1000 if new_epoch else -math.inf

    def revoke(self, why: str) -> None:
        """No more writes under this lease (another master was named)."""
        self.revoked = why
        self.deadline = -math.inf

    def drop(self) -> None:
        """Stepped down: the store refuses writes itself; the lease is forgotten."""
        self.leading = False
        self.deadline = -math.inf
        self.not_before = -math.inf
        self.source = ""
        self.revoked = ""

    def promise(self, at: float, to: str) -> None:
        """As a slave: confirmed master ``to``'s failsafe check at ``at`` (see ``lead``).
        Also at start, for a broker with an epoch history: it may have confirmed one
        just before it stopped, and kept no record of it."""
        self.promised_at = at
        self.promised_to = to
