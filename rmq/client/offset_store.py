"""Consumer offset stores (Java ``OffsetStore`` / ``RemoteBrokerOffsetStore``).

``OffsetStore`` is the seam: clustering consumers keep offsets on the broker
(``RemoteBrokerOffsetStore``); broadcasting consumers keep them in a local file
(``LocalFileOffsetStore``) behind the same interface.

Offsets are "next to consume". The table in memory is updated as messages are
consumed and written to the broker (or the file) every
``persist_consumer_offset_interval`` (5 s), piggy-backed on pulls (broker only), when
a queue moves to another consumer, and on shutdown.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
from pathlib import Path

from rmq.client.errors import MQBrokerError, MQClientError
from rmq.client.instance import MQClientInstance
from rmq.common.fs import atomic_write
from rmq.protocol.bodies import MASTER_ID, MessageQueue, dumps_object_keyed_map, loads_object_keyed_map
from rmq.protocol.errors import ProtocolError

__all__ = [
    "ReadOffsetType",
    "OffsetStore",
    "RemoteBrokerOffsetStore",
    "LocalFileOffsetStore",
    "LOCAL_OFFSET_STORE_DIR_ENV",
    "default_local_offset_store_dir",
]

#: Environment variable naming the root of local offset files (Java's system property
#: ``rocketmq.client.localOffsetStoreDir``).
LOCAL_OFFSET_STORE_DIR_ENV = "ROCKETMQ_CLIENT_LOCAL_OFFSET_STORE_DIR"

log = logging.getLogger("rmq.client.offsets")


class ReadOffsetType(enum.Enum):
    READ_FROM_MEMORY = "READ_FROM_MEMORY"
    READ_FROM_STORE = "READ_FROM_STORE"
    MEMORY_FIRST_THEN_STORE = "MEMORY_FIRST_THEN_STORE"


class OffsetStore:
    """The interface; ``read_offset`` answers -1 for "no offset" and -2 for "could not tell"."""

    def __init__(self) -> None:
        self.offset_table: dict[MessageQueue, int] = {}

    def load(self) -> None:
        pass

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        cur = self.offset_table.get(mq)
        if cur is None or not increase_only or offset > cur:
            self.offset_table[mq] = offset

    async def read_offset(self, mq: MessageQueue, type_: ReadOffsetType) -> int:
        if type_ in (ReadOffsetType.READ_FROM_MEMORY, ReadOffsetType.MEMORY_FIRST_THEN_STORE):
            off = self.offset_table.get(mq)
            if off is not None:
                return off
            if type_ is ReadOffsetType.READ_FROM_MEMORY:
                return -1
        return await self._read_offset_from_store(mq)

    async def _read_offset_from_store(self, mq: MessageQueue) -> int:
        raise NotImplementedError

    async def persist_all(self, mqs: set[MessageQueue]) -> None:
        """Persist the offsets of ``mqs`` (nothing at all for none: both of Java's stores
        return at once on an empty set)."""
        if mqs:
            await self._persist_all(mqs)

    async def _persist_all(self, mqs: set[MessageQueue]) -> None:
        raise NotImplementedError

    async def persist(self, mq: MessageQueue) -> None:
        raise NotImplementedError

    def remove_offset(self, mq: MessageQueue) -> None:
        self.offset_table.pop(mq, None)

    def clone_offset_table(self, topic: str) -> dict[MessageQueue, int]:
        return {mq: off for mq, off in self.offset_table.items() if not topic or mq.topic == topic}

    async def update_consume_offset_to_broker(self, mq: MessageQueue, offset: int, oneway: bool = True) -> None:
        raise NotImplementedError


class RemoteBrokerOffsetStore(OffsetStore):
    """Offsets kept by the master broker of each queue (CLUSTERING)."""

    def __init__(self, instance: MQClientInstance, group_name: str) -> None:
        super().__init__()
        self.instance = instance
        self.group_name = group_name

    async def _read_offset_from_store(self, mq: MessageQueue) -> int:
        try:
            off = await self.fetch_consume_offset_from_broker(mq)
        except MQBrokerError:
            # No offset on the broker (QUERY_NOT_FOUND: this group never committed one).
            return -1
        except Exception as e:
            log.warning("fetchConsumeOffsetFromBroker %s failed: %s", mq, e)
            return -2
        self.update_offset(mq, off, False)
        return off

    async def _persist_all(self, mqs: set[MessageQueue]) -> None:
        unused = []
        for mq, off in list(self.offset_table.items()):
            if mq in mqs:
                try:
                    await self.update_consume_offset_to_broker(mq, off)
                    log.debug(
                        "[persistAll] Group: %s ClientId: %s updateConsumeOffsetToBroker %s %d",
                        self.group_name,
                        self.instance.client_id,
                        mq,
                        off,
                    )
                except Exception as e:
                    log.warning("updateConsumeOffsetToBroker %s failed: %s", mq, e)
            else:
                unused.append(mq)
        for mq in unused:
            self.offset_table.pop(mq, None)
            log.info("remove unused mq, %s, %s", mq, self.group_name)

    async def persist(self, mq: MessageQueue) -> None:
        off = self.offset_table.get(mq)
        if off is None:
            return
        try:
            await self.update_consume_offset_to_broker(mq, off, oneway=False)
        except Exception as e:
            log.warning("updateConsumeOffsetToBroker %s failed: %s", mq, e)

    async def _find_master(self, mq: MessageQueue) -> str:
        found = await self.instance.find_broker_address_in_subscribe_or_update(
            mq.broker_name, MASTER_ID, True, mq.topic
        )
        if found is None:
            raise MQClientError(f"The broker[{mq.broker_name}] not exist")
        return found.broker_addr

    async def update_consume_offset_to_broker(self, mq: MessageQueue, offset: int, oneway: bool = True) -> None:
        addr = await self._find_master(mq)
        api = self.instance.api
        if oneway:
            await api.update_consumer_offset_oneway(addr, self.group_name, mq.topic, mq.queue_id, offset)
        else:
            await api.update_consumer_offset(addr, self.group_name, mq.topic, mq.queue_id, offset, 5000)

    async def fetch_consume_offset_from_broker(self, mq: MessageQueue) -> int:
        addr = await self._find_master(mq)
        return await self.instance.api.query_consumer_offset(
            addr, self.group_name, mq.topic, mq.queue_id, self.instance.config.mq_client_api_timeout
        )


def default_local_offset_store_dir() -> str:
    """``$ROCKETMQ_CLIENT_LOCAL_OFFSET_STORE_DIR``, else ``~/.rocketmq_offsets``."""
    return os.environ.get(LOCAL_OFFSET_STORE_DIR_ENV) or os.path.join(os.path.expanduser("~"), ".rocketmq_offsets")


class LocalFileOffsetStore(OffsetStore):
    """Offsets of a BROADCASTING consumer, in ``<dir>/<clientId>/<group>/offsets.json``.

    The file is RocketMQ's ``OffsetSerializeWrapper`` (fastjson, MessageQueue keys):
    ``{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:42,...}}``, so a Java
    client's file is read as is. Every write first keeps the previous content in
    ``offsets.json.bak``, then replaces ``offsets.json`` (``rmq.common.fs.atomic_write``:
    temp file, fsync, rename): a crash leaves the old or the new table, never a torn one
    (``load`` falls back to the ``.bak`` when the main file is missing or unreadable).
    Writes run in a thread. The consumer persists every
    ``persist_consumer_offset_interval`` (5 s) and on shutdown, so after a crash at most
    the messages consumed since the last write are delivered again.
    """

    FILE_NAME = "offsets.json"

    def __init__(self, client_id: str, group_name: str, store_dir: str | os.PathLike | None = None) -> None:
        super().__init__()
        self.client_id = client_id
        self.group_name = group_name
        root = Path(store_dir) if store_dir is not None else Path(default_local_offset_store_dir())
        self.store_path = root / client_id / group_name / self.FILE_NAME
        self._write_lock: asyncio.Lock | None = None

    # ------------------------------------------------------------------ file
    @property
    def bak_path(self) -> Path:
        return self.store_path.with_name(self.FILE_NAME + ".bak")

    @property
    def tmp_path(self) -> Path:
        """Where ``atomic_write`` stages a new table (gone once a write returns)."""
        return Path(f"{self.store_path}.tmp.{os.getpid()}")

    def read_local_offset(self) -> dict[MessageQueue, int] | None:
        """The table in the file (or its ``.bak``); None when neither can be read."""
        for path in (self.store_path, self.bak_path):
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            except OSError as e:
                log.warning("reading local offsets %s failed: %s", path, e)
                continue
            if not data.strip():
                continue
            try:
                return {MessageQueue.from_obj(k): int(v) for k, v in loads_object_keyed_map(data, "offsetTable")}
            except (ProtocolError, ValueError, TypeError) as e:
                log.warning("local offsets file %s is unreadable (%s); trying the next copy", path, e)
        return None

    def _write(self, data: bytes) -> None:
        """MixAll.string2File's layout: the previous content becomes ``offsets.json.bak``
        before the new table replaces ``offsets.json``, each replacement atomic."""
        path = self.store_path
        try:
            prev = path.read_bytes()
        except FileNotFoundError:
            prev = None
        if prev:
            atomic_write(str(self.bak_path), prev)
        atomic_write(str(path), data)

    # ------------------------------------------------------------------ OffsetStore
    def load(self) -> None:
        table = self.read_local_offset()
        if table:
            self.offset_table.update(table)
            for mq, off in sorted(table.items()):
                log.info("load consumer's offset, %s %s %d", self.group_name, mq, off)

    async def _read_offset_from_store(self, mq: MessageQueue) -> int:
        table = await asyncio.to_thread(self.read_local_offset)
        off = (table or {}).get(mq)
        if off is None:
            return -1
        self.update_offset(mq, off, False)
        return off

    async def _persist_all(self, mqs: set[MessageQueue]) -> None:
        entries = [(mq.to_obj(), off) for mq, off in sorted(self.offset_table.items()) if mq in mqs]
        data = dumps_object_keyed_map("offsetTable", entries)
        if self._write_lock is None:
            self._write_lock = asyncio.Lock()
        async with self._write_lock:
            try:
                await asyncio.to_thread(self._write, data)
            except OSError as e:
                log.warning("persisting local offsets to %s failed: %s", self.store_path, e)

    async def persist(self, mq: MessageQueue) -> None:
        """Writes the whole table (one file holds every queue)."""
        await self.persist_all(set(self.offset_table))

    def remove_offset(self, mq: MessageQueue) -> None:
        """Kept, as Java does: the file only ever holds what ``persist_all`` was given."""

    async def update_consume_offset_to_broker(self, mq: MessageQueue, offset: int, oneway: bool = True) -> None:
        """Broadcasting offsets never go to the broker."""
