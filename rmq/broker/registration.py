"""Registration with the NameServers (BrokerController.registerBrokerAll): at start, every
registerNameServerPeriod, at once (coalesced) after a topic change, unregistered at shutdown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from rmq.broker.config import BrokerConfig, ha_address
from rmq.broker.outer_api import BrokerIdentity, BrokerOuterAPI
from rmq.broker.topics import TopicConfigManager
from rmq.runtime.service import TaskSet
from rmq.store.config import MessageStoreConfig

__all__ = ["BrokerRegistration"]

log = logging.getLogger("rmq.broker")

# (master address, master HA address) a NameServer answered a registration with
RegisterAnswer = Callable[[str | None, str | None], None]


@dataclass(eq=False)
class BrokerRegistration:
    broker_config: BrokerConfig
    store_config: MessageStoreConfig
    outer_api: BrokerOuterAPI
    topics: TopicConfigManager
    on_answer: RegisterAnswer

    def __post_init__(self) -> None:
        self._tasks = TaskSet(log)
        self._pending = False
        self._stopping = False

    @property
    def period(self) -> float:
        """Seconds between registrations (registerNameServerPeriod within 10..60 s)."""
        return min(max(self.broker_config.registerNameServerPeriod, 10_000), 60_000) / 1000

    def _identity(self) -> BrokerIdentity:
        bc = self.broker_config
        return BrokerIdentity(bc.brokerClusterName, bc.broker_addr, bc.brokerName, bc.brokerId)

    async def register_broker_all(self) -> None:
        bc = self.broker_config
        if not bc.namesrv_addrs:
            return
        wrapper = self.topics.serialize_wrapper()
        if not (bc.brokerPermission & 2) or not (bc.brokerPermission & 4):
            # a broker without read/write permission advertises it on every topic
            for name, tc in list(wrapper.topic_config_table.items()):
                wrapper.topic_config_table[name] = replace(tc, perm=tc.perm & bc.brokerPermission)
        results = await self.outer_api.register_broker_all(
            bc.namesrv_addrs,
            self._identity(),
            ha_server_addr=ha_address(bc, self.store_config),
            wrapper=wrapper,
            compressed=bc.compressedRegister,
            timeout_ms=bc.registerBrokerTimeoutMills,
        )
        for r in results:
            self.on_answer(r.master_addr, r.ha_server_addr)
            if r.order_topics:
                self.topics.update_order_topic_config(r.order_topics)

    def schedule_register(self) -> None:
        """Topic changes re-register at once (coalesced)."""
        if self._pending or self._stopping:
            return
        self._pending = True
        self._tasks.spawn(self._register_changed(), name="register-topics")

    async def _register_changed(self) -> None:
        self._pending = False
        if self.topics.dirty:
            # RocketMQ persists topics.json on every topic change: a topic created by
            # a send must survive a crash, or its acked messages cannot be pulled.
            try:
                await self.topics.persist()
            except OSError as e:
                log.error("persisting %s failed: %s", self.topics.file.path, e)
        await self.register_broker_all()

    async def unregister_broker_all(self) -> None:
        """Leave every NameServer (within 3 s); no registration after this."""
        self._stopping = True
        bc = self.broker_config
        if bc.namesrv_addrs:
            try:
                await asyncio.wait_for(self.outer_api.unregister_broker_all(bc.namesrv_addrs, self._identity()), 3)
            except TimeoutError:
                log.warning("unregistering from the NameServers timed out")

    async def close(self) -> None:
        self._stopping = True
        await self._tasks.close()
