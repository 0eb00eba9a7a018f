"""Several controllers on etcd: leadership by lease, state by compare-and-swap.

Keys, under ``controllerEtcdKeyPrefix`` (default ``/rmq``; one prefix per rmq cluster
when several share an etcd):

* ``<prefix>/controller/leader`` — the leading controller's address, under its lease
  (``nameserver.leader_election``: Patroni's rule, the leader gives up before etcd can
  expire the lease);
* ``<prefix>/controller/groups/<brokerName>`` — one ``GroupRecord`` as JSON.

Every write is one transaction that compares each written group's ``mod_revision``
with the one this controller last read or wrote, and the leader key's
``create_revision`` with the one it won (``LeaderElection.fence``): a controller that
lost the lease, or one racing another that believes it leads, cannot bump an epoch
or name a master; its write fails and it re-reads. A transaction the client had to
resend to another endpoint may have been applied by the first: a failed compare is
then checked against what is stored, and our own write found there counts as done.

*Migration.* A controller that leads on etcd for the first time and finds
``controller.msgpack`` (the embedded controller's file) next to its KV config copies
each group etcd does not have yet (created only if absent), then renames the file to
``controller.msgpack.migrated``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict
from pathlib import Path
from typing import Any

from nameserver.controller.file_store import FileStateStore
from nameserver.controller.state import GroupRecord
from nameserver.etcd import Compare, EtcdClient, Op
from nameserver.leader_election import LeaderElection

__all__ = ["EtcdStateStore", "EtcdLeadership", "StateConflict"]

log = logging.getLogger("rmq.nameserver.controller")


class StateConflict(Exception):
    """A write whose compare failed: someone else wrote, or we no longer lead."""


class EtcdLeadership:
    """``Leadership`` on an etcd lease (``nameserver.leader_election``)."""

    def __init__(self, client: EtcdClient, prefix: str, addr: Callable[[], str], ttl_ms: int) -> None:
        self.client = client
        self.key = f"{prefix.rstrip('/')}/controller/leader"
        self._addr = addr
        self.ttl_s = max(1.0, ttl_ms / 1000)
        self.election: LeaderElection | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def is_leader(self) -> bool:
        return self.election is not None and self.election.is_leader

    def leader_addr(self) -> str | None:
        v = self.election.leader_value() if self.election is not None else None
        return v.decode(errors="replace") if v else None

    def lease_cap_ms(self) -> int | None:
        e = self.election
        deadline = e.deadline if e is not None else None
        return 0 if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))

    @property
    def outstanding_lease_ms(self) -> int | None:
        # every lease the previous leader granted ended with its leadership (lease_cap_ms)
        return 0

    def fence(self) -> Compare:
        if self.election is None:
            raise StateConflict("not campaigning")
        return self.election.fence()

    async def start(self, on_elected: Callable[[], Coroutine[Any, Any, None]], on_lost: Callable[[], None]) -> None:
        def elected() -> None:
            # the election's callbacks must not block: the takeover (reading every
            # group from etcd) runs as a task and checks is_leader itself
            t = asyncio.get_running_loop().create_task(on_elected(), name="controller-takeover")
            self._tasks.add(t)
            t.add_done_callback(self._done)

        self.election = LeaderElection(
            self.client,
            self.key,
            self._addr().encode(),
            self.ttl_s,
            on_elected=elected,
            on_lost=on_lost,
            poll_s=min(0.5, self.ttl_s / 3),
        )
        self.election.start()

    def _done(self, t: asyncio.Task[None]) -> None:
        self._tasks.discard(t)
        if not t.cancelled() and t.exception() is not None:
            log.error("controller takeover failed: %s", t.exception())

    async def stop(self) -> None:
        if self.election is not None:
            await self.election.stop()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def status(self) -> dict[str, Any]:
        e = self.election
        statuses = await self.client.status_all()
        return {
            "mode": "etcd",
            "leaderKey": self.key,
            "ttlS": e.lease.ttl if e is not None and e.lease is not None else self.ttl_s,
            "endpoints": [asdict(s) for s in statuses],
        }


class EtcdStateStore:
    def __init__(
        self, client: EtcdClient, prefix: str, fence: Callable[[], Compare], legacy_file: Path | None = None
    ) -> None:
        self.client = client
        self.prefix = f"{prefix.rstrip('/')}/controller/groups/"
        self._fence = fence
        self._legacy = legacy_file
        self._revs: dict[str, int] = {}  # group -> mod_revision we last read or wrote

    def describe(self) -> str:
        return f"etcd {';'.join(self.client.endpoints)} {self.prefix}"

    def _key(self, name: str) -> str:
        return self.prefix + name

    async def _read(self) -> tuple[list[GroupRecord], dict[str, int]]:
        records: list[GroupRecord] = []
        revs: dict[str, int] = {}
        for kv in await self.client.get_prefix(self.prefix):
            name = kv.key.decode()[len(self.prefix) :]
            records.append(GroupRecord.from_json(name, kv.value))
            revs[name] = kv.mod_revision
        return records, revs

    async def peek(self) -> list[GroupRecord]:
        return (await self._read())[0]

    async def load(self) -> list[GroupRecord]:
        records, self._revs = await self._read()
        if self._legacy is not None:
            records += await self._migrate({r.name for r in records})
        return records

    async def _migrate(self, known: set[str]) -> list[GroupRecord]:
        legacy = self._legacy
        assert legacy is not None
        old = await asyncio.to_thread(FileStateStore(legacy).read_file)
        if not old:
            return []
        moved = [r for r in old if r.name not in known]
        if moved:
            compares = [self._fence()] + [Compare.create_revision(self._key(r.name)) == 0 for r in moved]
            res = await self.client.txn(compares, [Op.put(self._key(r.name), r.to_json()) for r in moved])
            if not res.succeeded:
                raise StateConflict(
                    f"migrating {legacy} to etcd: a group appeared meanwhile or this controller lost the lead"
                )
            for r in moved:
                self._revs[r.name] = res.revision
        done = legacy.with_name(legacy.name + ".migrated")
        await asyncio.to_thread(legacy.rename, done)
        log.warning(
            "controller: migrated %d broker groups (%s) from %s to etcd; the file is now %s (%d already in etcd kept)",
            len(moved),
            ",".join(r.name for r in moved) or "-",
            legacy,
            done,
            len(old) - len(moved),
        )
        self._legacy = None
        return moved

    async def save(self, records: list[GroupRecord]) -> None:
        compares = [self._fence()]
        compares += [Compare.mod_revision(self._key(r.name)) == self._revs.get(r.name, 0) for r in records]
        values = {r.name: r.to_json() for r in records}
        res = await self.client.txn(
            compares, [Op.put(self._key(n), v) for n, v in values.items()], [Op.get(self._key(n)) for n in values]
        )
        if res.succeeded:
            for n in values:
                self._revs[n] = res.revision
            return
        if res.retried:
            # our first try may have landed before the endpoint failed
            stored = {kv.key.decode()[len(self.prefix) :]: kv for r in res.responses for kv in r.kvs}
            if all(n in stored and stored[n].value == v for n, v in values.items()):
                for n in values:
                    self._revs[n] = stored[n].mod_revision
                return
        raise StateConflict(
            f"etcd refused the write of {','.join(values)}: another controller wrote first or this one no longer leads"
        )

    async def close(self) -> None:
        # the last user of the client: the leadership has stopped by now
        await self.client.aclose()
