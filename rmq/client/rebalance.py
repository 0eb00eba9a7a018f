"""Queue allocation among the consumers of a group (spec 8.2) and ``RebalanceImpl``.

Strategies are pure: ``strategy.allocate(group, current_cid, mq_all, cid_all)`` returns
the queues ``current_cid`` owns. Callers pass both lists sorted (``RebalanceImpl``
does), so every consumer of the group computes the same partition independently.

* ``AVG`` (default) — contiguous blocks, the first ``|mq| % |cid|`` consumers get one more;
* ``AVG_BY_CIRCLE`` — queue ``i`` goes to consumer ``i % |cid|``;
* ``consistent_hash(n)`` — an MD5 ring with ``n`` virtual nodes per consumer
  (``CONSISTENT_HASH``): a consumer joining or leaving moves few queues;
* ``by_config(queues)`` — a fixed list (``CONFIG``);
* ``by_machine_room(idcs)`` — queues of brokers named ``room@brokerName`` whose room is
  in ``idcs``, spread evenly (``MACHINE_ROOM``);
* ``machine_room_nearby(inner, broker_room, consumer_room)`` — queues go to consumers
  of their own room (by ``inner``); rooms without consumers are shared by everyone
  (``MACHINE_ROOM_NEARBY-<inner>``).
"""

from __future__ import annotations

import asyncio
import bisect
import hashlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from rmq.client.process_queue import ProcessQueue
from rmq.common.clock import now_ms
from rmq.common.mixall import is_retry_topic
from rmq.protocol.bodies import MASTER_ID, LockBatchRequestBody, MessageQueue, SubscriptionData, UnlockBatchRequestBody

__all__ = [
    "AllocateStrategy",
    "AVG",
    "AVG_BY_CIRCLE",
    "consistent_hash",
    "by_config",
    "by_machine_room",
    "machine_room_nearby",
    "strategy_by_name",
    "allocate_averagely",
    "allocate_averagely_by_circle",
    "RebalanceImpl",
    "PullRequest",
    "CLUSTERING",
    "BROADCASTING",
    "mq_to_string",
]

log = logging.getLogger("rmq.client.rebalance")

CLUSTERING = "CLUSTERING"
BROADCASTING = "BROADCASTING"

AllocateFn = Callable[[str, str, Sequence[MessageQueue], Sequence[str]], list[MessageQueue]]


@dataclass(frozen=True)
class AllocateStrategy:
    """A named allocation function (Java ``AllocateMessageQueueStrategy``)."""

    name: str
    fn: AllocateFn

    def allocate(
        self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
    ) -> list[MessageQueue]:
        if not current_cid:
            raise ValueError("currentCID is empty")
        if not mq_all:
            raise ValueError("mqAll is null or mqAll empty")
        if not cid_all:
            raise ValueError("cidAll is null or cidAll empty")
        if current_cid not in cid_all:
            log.info(
                "[BUG] ConsumerGroup: %s The consumerId: %s not in cidAll: %s",
                consumer_group,
                current_cid,
                list(cid_all),
            )
            return []
        return self.fn(consumer_group, current_cid, mq_all, cid_all)

    __call__ = allocate


def allocate_averagely(
    group: str, cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
) -> list[MessageQueue]:
    index = list(cid_all).index(cid)
    n_mq, n_cid = len(mq_all), len(cid_all)
    mod = n_mq % n_cid
    if n_mq <= n_cid:
        size = 1
    elif mod > 0 and index < mod:
        size = n_mq // n_cid + 1
    else:
        size = n_mq // n_cid
    start = index * size if (mod > 0 and index < mod) else index * size + mod
    rng = min(size, n_mq - start)
    return [mq_all[(start + i) % n_mq] for i in range(max(rng, 0))]


def allocate_averagely_by_circle(
    group: str, cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
) -> list[MessageQueue]:
    index = list(cid_all).index(cid)
    return [mq for i, mq in enumerate(mq_all) if i % len(cid_all) == index]


AVG = AllocateStrategy("AVG", allocate_averagely)
AVG_BY_CIRCLE = AllocateStrategy("AVG_BY_CIRCLE", allocate_averagely_by_circle)


def mq_to_string(mq: MessageQueue) -> str:
    """Java ``MessageQueue.toString()`` (the consistent-hash key)."""
    return f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]"


def md5_hash(key: str) -> int:
    """ConsistentHashRouter's MD5Hash: the first 4 digest bytes, big-endian, unsigned."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


def consistent_hash(virtual_node_cnt: int = 10, hash_fn: Callable[[str], int] = md5_hash) -> AllocateStrategy:
    """CONSISTENT_HASH: virtual node ``"<cid>-<i>"`` for i < n on a ring; a queue goes to
    the first virtual node at or after its hash (wrapping)."""
    if virtual_node_cnt < 0:
        raise ValueError(f"illegal virtualNodeCnt :{virtual_node_cnt}")

    def allocate(group: str, cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]) -> list[MessageQueue]:
        ring: dict[int, str] = {}
        for c in cid_all:
            for i in range(virtual_node_cnt):
                ring[hash_fn(f"{c}-{i}")] = c  # later puts win, as TreeMap.put
        if not ring:
            return []
        keys = sorted(ring)
        out = []
        for mq in mq_all:
            h = hash_fn(mq_to_string(mq))
            pos = bisect.bisect_left(keys, h)
            owner = ring[keys[pos] if pos < len(keys) else keys[0]]
            if owner == cid:
                out.append(mq)
        return out

    return AllocateStrategy("CONSISTENT_HASH", allocate)


def by_config(message_queues: Sequence[MessageQueue]) -> AllocateStrategy:
    """CONFIG: always the given queues."""
    fixed = list(message_queues)
    return AllocateStrategy("CONFIG", lambda g, c, mqs, cids: list(fixed))


def by_machine_room(consumer_idcs: set[str] | Sequence[str]) -> AllocateStrategy:
    """MACHINE_ROOM: queues of brokers ``room@name`` with room in ``consumer_idcs``."""
    idcs = set(consumer_idcs)

    def allocate(group: str, cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]) -> list[MessageQueue]:
        index = list(cid_all).index(cid)
        pre = []
        for mq in mq_all:
            parts = mq.broker_name.split("@")
            if len(parts) == 2 and parts[0] in idcs:
                pre.append(mq)
        mod, rem = divmod(len(pre), len(cid_all))
        out = pre[mod * index : mod * index + mod]
        if rem > index:
            out.append(pre[index + mod * len(cid_all)])
        return out

    return AllocateStrategy("MACHINE_ROOM", allocate)


_T = TypeVar("_T")


def _by_room(items: Sequence[_T], room_of: Callable[[_T], str], what: str) -> dict[str, list[_T]]:
    rooms: dict[str, list[_T]] = {}
    for item in items:
        room = room_of(item)
        if not room:
            raise ValueError(f"Machine room is null for {what} {item}")
        rooms.setdefault(room, []).append(item)
    return rooms


def machine_room_nearby(
    inner: AllocateStrategy, broker_deploy_in: Callable[[MessageQueue], str], consumer_deploy_in: Callable[[str], str]
) -> AllocateStrategy:
    """MACHINE_ROOM_NEARBY: ``inner`` within the consumer's own room, plus a share of the
    rooms that have no consumer at all."""

    def allocate(group: str, cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]) -> list[MessageQueue]:
        mr2mq = _by_room(mq_all, broker_deploy_in, "mq")
        mr2c = _by_room(cid_all, consumer_deploy_in, "consumer id")
        out: list[MessageQueue] = []
        mine = consumer_deploy_in(cid)
        mq_here = mr2mq.pop(mine, None)
        if mq_here:
            out += inner.allocate(group, cid, mq_here, mr2c.get(mine, []))
        for room in sorted(mr2mq):
            if room not in mr2c:
                out += inner.allocate(group, cid, mr2mq[room], cid_all)
        return out

    return AllocateStrategy(f"MACHINE_ROOM_NEARBY-{inner.name}", allocate)


def strategy_by_name(name: str) -> AllocateStrategy:
    """The parameterless strategies by their RocketMQ names (AVG, AVG_BY_CIRCLE,
    CONSISTENT_HASH with 10 virtual nodes)."""
    table = {"AVG": AVG, "AVG_BY_CIRCLE": AVG_BY_CIRCLE, "CONSISTENT_HASH": consistent_hash()}
    try:
        return table[name.upper()]
    except KeyError:
        raise ValueError(f"unknown allocation strategy {name!r}; one of {sorted(table)}") from None


# =========================================================================== RebalanceImpl
@dataclass(eq=False)
class PullRequest:
    """One assigned queue's pull state (Java ``PullRequest``)."""

    consumer_group: str
    message_queue: MessageQueue
    process_queue: ProcessQueue
    next_offset: int
    previously_locked: bool = False


class RebalanceImpl:
    """Client-side rebalance of one consumer group (Java ``RebalanceImpl``).

    Subclasses (push / lite pull) say how to start and stop consuming a queue:
    ``compute_pull_from_where``, ``remove_unnecessary_message_queue``,
    ``dispatch_pull_requests``, ``message_queue_changed``, ``remove_dirty_offset``.

    Orderly consumers (``is_order``, CLUSTERING) take a queue only once its master
    broker granted them the queue's lock (LOCK_BATCH_MQ); ``lock_all`` renews every
    held lock (every 20 s) and ``unlock``/``unlock_all`` give them back. A queue whose
    lock is refused (its previous owner has not released it yet) is tried again by a
    rebalance 1 s later rather than at the next 20 s round.
    """

    #: Delay before another rebalance when a queue could not be locked / released yet.
    RETRY_REBALANCE_MS = 1000

    consume_type = "CONSUME_PASSIVELY"

    def __init__(self, consumer_group: str, message_model: str, strategy: AllocateStrategy, instance) -> None:
        self.consumer_group = consumer_group
        self.message_model = message_model
        self.strategy = strategy
        self.instance = instance  # MQClientInstance
        self.subscription_inner: dict[str, SubscriptionData] = {}
        self.topic_subscribe_info_table: dict[str, set[MessageQueue]] = {}
        self.process_queue_table: dict[MessageQueue, ProcessQueue] = {}
        self.is_order = False
        self._lock = asyncio.Lock()

    # ------------------------------------------------------------------ hooks
    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        raise NotImplementedError

    async def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        raise NotImplementedError

    def remove_dirty_offset(self, mq: MessageQueue) -> None:
        raise NotImplementedError

    def dispatch_pull_requests(self, requests: list[PullRequest]) -> None:
        raise NotImplementedError

    async def message_queue_changed(self, topic: str, mq_all: set[MessageQueue], mq_divided: set[MessageQueue]) -> None:
        pass

    # ------------------------------------------------------------------ rebalance
    async def do_rebalance(self) -> None:
        async with self._lock:
            for topic in list(self.subscription_inner):
                try:
                    await self.rebalance_by_topic(topic)
                except Exception:
                    if not is_retry_topic(topic):
                        log.exception("rebalance of %s for %s failed", topic, self.consumer_group)
            self._truncate_message_queue_not_my_topic()

    async def rebalance_by_topic(self, topic: str) -> None:
        mq_set = self.topic_subscribe_info_table.get(topic)
        if self.message_model == BROADCASTING:
            if mq_set is None:
                if not is_retry_topic(topic):
                    log.warning("doRebalance, %s, but the topic[%s] not exist.", self.consumer_group, topic)
                return
            if await self.update_process_queue_table_in_rebalance(topic, set(mq_set)):
                await self.message_queue_changed(topic, set(mq_set), set(mq_set))
            return
        cid_all = await self.instance.find_consumer_id_list(topic, self.consumer_group)
        if mq_set is None:
            if not is_retry_topic(topic):
                log.warning("doRebalance, %s, but the topic[%s] not exist.", self.consumer_group, topic)
            return
        if not cid_all:
            log.warning("doRebalance, %s %s, get consumer id list failed", self.consumer_group, topic)
            return
        mq_all = sorted(mq_set)
        cids = sorted(cid_all)
        try:
            allocated = self.strategy.allocate(self.consumer_group, self.instance.client_id, mq_all, cids)
        except Exception:
            log.exception("AllocateMessageQueueStrategy.allocate (%s) failed", self.strategy.name)
            return
        divided = set(allocated)
        if await self.update_process_queue_table_in_rebalance(topic, divided):
            log.info(
                "rebalanced %s %s: %d consumers, %d queues, mine %s",
                self.consumer_group,
                topic,
                len(cids),
                len(mq_all),
                [f"{m.broker_name}:{m.queue_id}" for m in sorted(divided)],
            )
            await self.message_queue_changed(topic, mq_set, divided)

    async def update_process_queue_table_in_rebalance(self, topic: str, mq_set: set[MessageQueue]) -> bool:
        changed = False
        for mq, pq in list(self.process_queue_table.items()):
            if mq.topic != topic:
                continue
            if mq not in mq_set:
                pq.dropped = True
                if await self.remove_unnecessary_message_queue(mq, pq):
                    self.process_queue_table.pop(mq, None)
                    changed = True
                    log.info("doRebalance, %s, remove unnecessary mq, %s", self.consumer_group, mq)
            elif pq.dropped:
                # left over from an earlier removal that had to wait for in-flight work
                if await self.remove_unnecessary_message_queue(mq, pq):
                    self.process_queue_table.pop(mq, None)
                    changed = True
            elif pq.is_pull_expired() and self.consume_type == "CONSUME_PASSIVELY":
                pq.dropped = True
                if await self.remove_unnecessary_message_queue(mq, pq):
                    self.process_queue_table.pop(mq, None)
                    changed = True
                    log.warning(
                        "[BUG]doRebalance, %s, remove unnecessary mq, %s, because pull is pause, so try to fixed it",
                        self.consumer_group,
                        mq,
                    )
        requests: list[PullRequest] = []
        lock_failed = False
        ordered = self.is_order and self.message_model == CLUSTERING
        for mq in sorted(mq_set):
            if mq in self.process_queue_table:
                continue
            if ordered and not await self.lock(mq):
                log.warning("doRebalance, %s, add a new mq failed, %s, because lock failed", self.consumer_group, mq)
                lock_failed = True
                continue
            self.remove_dirty_offset(mq)
            pq = ProcessQueue()
            if ordered:
                pq.locked = True
                pq.last_lock_timestamp = now_ms()
            try:
                next_offset = await self.compute_pull_from_where(mq)
            except Exception as e:
                log.warning("compute consume offset of %s failed: %s", mq, e)
                continue
            if next_offset < 0:
                log.warning("doRebalance, %s, add new mq failed, %s", self.consumer_group, mq)
                continue
            if mq in self.process_queue_table:
                continue
            self.process_queue_table[mq] = pq
            requests.append(PullRequest(self.consumer_group, mq, pq, next_offset))
            changed = True
            log.info("doRebalance, %s, add a new mq, %s at offset %d", self.consumer_group, mq, next_offset)
        if requests:
            self.dispatch_pull_requests(requests)
        if lock_failed or any(pq.dropped for mq, pq in self.process_queue_table.items() if mq.topic == topic):
            self.instance.rebalance_later(self.RETRY_REBALANCE_MS)
        return changed

    # ------------------------------------------------------------------ queue locks
    async def _master_of(self, broker_name: str, topic: str | None = None) -> str | None:
        found = await self.instance.find_broker_address_in_subscribe_or_update(broker_name, MASTER_ID, True, topic)
        return found.broker_addr if found is not None else None

    async def _by_master(self, mqs: Iterable[MessageQueue]) -> AsyncIterator[tuple[str, set[MessageQueue]]]:
        """The queues grouped by broker (all taken before the first lookup), with each
        broker's master address; a broker without one is skipped."""
        by_broker: dict[str, set[MessageQueue]] = {}
        for mq in mqs:
            by_broker.setdefault(mq.broker_name, set()).add(mq)
        for broker_name, group in by_broker.items():
            addr = await self._master_of(broker_name)
            if addr is not None:
                yield addr, group

    def _mark_locked(self, mqs: set[MessageQueue]) -> None:
        now = now_ms()
        for mq in mqs:
            pq = self.process_queue_table.get(mq)
            if pq is not None:
                pq.locked = True
                pq.last_lock_timestamp = now

    async def lock(self, mq: MessageQueue) -> bool:
        """LOCK_BATCH_MQ for one queue at its master; True when this client holds it."""
        addr = await self._master_of(mq.broker_name, mq.topic)
        if addr is None:
            return False
        body = LockBatchRequestBody(self.consumer_group, self.instance.client_id, {mq})
        try:
            locked = await self.instance.api.lock_batch_mq(addr, body, 1000)
        except Exception as e:
            log.error("lockBatchMQ %s at %s failed: %s", mq, addr, e)
            return False
        self._mark_locked(locked)
        ok = mq in locked
        log.info("the message queue lock %s, %s %s", "OK" if ok else "Failed", self.consumer_group, mq)
        return ok

    async def lock_all(self) -> None:
        """Renew the locks of every queue held (per broker, one request each); queues
        being given away (dropped) are left alone."""
        live = (mq for mq, pq in self.process_queue_table.items() if not pq.dropped)
        async for addr, mqs in self._by_master(live):
            body = LockBatchRequestBody(self.consumer_group, self.instance.client_id, set(mqs))
            try:
                locked = await self.instance.api.lock_batch_mq(addr, body, 1000)
            except Exception as e:
                log.error("lockBatchMQ at %s failed: %s", addr, e)
                continue
            self._mark_locked(locked)
            for mq in mqs - locked:
                held = self.process_queue_table.get(mq)
                if held is not None and held.locked:
                    held.locked = False
                    log.info("the message queue locked Failed, Group: %s %s", self.consumer_group, mq)

    async def unlock(self, mq: MessageQueue, oneway: bool = False) -> None:
        addr = await self._master_of(mq.broker_name)
        if addr is None:
            return
        body = UnlockBatchRequestBody(self.consumer_group, self.instance.client_id, {mq})
        try:
            await self.instance.api.unlock_batch_mq(addr, body, 1000, oneway)
            log.info(
                "unlock messageQueue. group:%s, clientId:%s, mq:%s", self.consumer_group, self.instance.client_id, mq
            )
        except Exception as e:
            log.error("unlockBatchMQ %s at %s failed: %s", mq, addr, e)

    async def unlock_all(self, oneway: bool = False) -> None:
        async for addr, mqs in self._by_master(self.process_queue_table):
            body = UnlockBatchRequestBody(self.consumer_group, self.instance.client_id, set(mqs))
            try:
                await self.instance.api.unlock_batch_mq(addr, body, 1000, oneway)
            except Exception as e:
                log.error("unlockBatchMQ at %s failed: %s", addr, e)
                continue
            for mq in mqs:
                pq = self.process_queue_table.get(mq)
                if pq is not None:
                    pq.locked = False

    def _truncate_message_queue_not_my_topic(self) -> None:
        for mq, pq in list(self.process_queue_table.items()):
            if mq.topic not in self.subscription_inner:
                pq.dropped = True
                self.process_queue_table.pop(mq, None)
                log.info(
                    "doRebalance, %s, truncateMessageQueueNotMyTopic remove unnecessary mq, %s", self.consumer_group, mq
                )

    async def remove_process_queue(self, mq: MessageQueue) -> None:
        pq = self.process_queue_table.pop(mq, None)
        if pq is not None:
            pq.dropped = True
            await self.remove_unnecessary_message_queue(mq, pq)

    def destroy(self) -> None:
        for pq in self.process_queue_table.values():
            pq.dropped = True
        self.process_queue_table.clear()
