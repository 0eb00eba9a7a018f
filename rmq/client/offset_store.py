"""Consumer offset stores (Java ``OffsetStore`` / ``RemoteBrokerOffsetStore``).

``OffsetStore`` is the seam: clustering consumers keep offsets on the broker
(``RemoteBrokerOffsetStore``); broadcasting consumers will keep them in a local file
(``LocalFileOffsetStore``, consumption-semantics issue) behind the same interface.

Offsets are "next to consume". The table in memory is updated as messages are
consumed and written to the broker every ``persist_consumer_offset_interval``, piggy-
backed on pulls, when a queue moves to another consumer, and on shutdown.
"""
from __future__ import annotations

import enum
import logging

from rmq.client.errors import MQBrokerError, MQClientError
from rmq.protocol.route import MASTER_ID, MessageQueue

__all__ = ["ReadOffsetType", "OffsetStore", "RemoteBrokerOffsetStore"]

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
        raise NotImplementedError

    async def persist_all(self, mqs: set[MessageQueue]) -> None:
        raise NotImplementedError

    async def persist(self, mq: MessageQueue) -> None:
        raise NotImplementedError

    def remove_offset(self, mq: MessageQueue) -> None:
        self.offset_table.pop(mq, None)

    def clone_offset_table(self, topic: str) -> dict[MessageQueue, int]:
        return {mq: off for mq, off in self.offset_table.items() if not topic or mq.topic == topic}

    async def update_consume_offset_to_broker(self, mq: MessageQueue, offset: int,
                                              oneway: bool = True) -> None:
        raise NotImplementedError


class RemoteBrokerOffsetStore(OffsetStore):
    """Offsets kept by the master broker of each queue (CLUSTERING)."""

    def __init__(self, instance, group_name: str) -> None:
        super().__init__()
        self.instance = instance          # MQClientInstance
        self.group_name = group_name

    async def read_offset(self, mq: MessageQueue, type_: ReadOffsetType) -> int:
        if type_ in (ReadOffsetType.READ_FROM_MEMORY, ReadOffsetType.MEMORY_FIRST_THEN_STORE):
            off = self.offset_table.get(mq)
            if off is not None:
                return off
            if type_ is ReadOffsetType.READ_FROM_MEMORY:
                return -1
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

    async def persist_all(self, mqs: set[MessageQueue]) -> None:
        if not mqs:
            return
        unused = []
        for mq, off in list(self.offset_table.items()):
            if mq in mqs:
                try:
                    await self.update_consume_offset_to_broker(mq, off)
                    log.debug("[persistAll] Group: %s ClientId: %s updateConsumeOffsetToBroker "
                              "%s %d", self.group_name, self.instance.client_id, mq, off)
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
        inst = self.instance
        found = inst.find_broker_address_in_subscribe(mq.broker_name, MASTER_ID, True)
        if found is None:
            await inst.update_topic_route_info_from_name_server(mq.topic)
            found = inst.find_broker_address_in_subscribe(mq.broker_name, MASTER_ID, True)
        if found is None:
            raise MQClientError(f"The broker[{mq.broker_name}] not exist")
        return found.broker_addr

    async def update_consume_offset_to_broker(self, mq: MessageQueue, offset: int,
                                              oneway: bool = True) -> None:
        addr = await self._find_master(mq)
        api = self.instance.api
        if oneway:
            await api.update_consumer_offset_oneway(addr, self.group_name, mq.topic,
                                                    mq.queue_id, offset)
        else:
            await api.update_consumer_offset(addr, self.group_name, mq.topic, mq.queue_id,
                                             offset, 5000)

    async def fetch_consume_offset_from_broker(self, mq: MessageQueue) -> int:
        addr = await self._find_master(mq)
        return await self.instance.api.query_consumer_offset(
            addr, self.group_name, mq.topic, mq.queue_id, self.instance.config.mq_client_api_timeout)
