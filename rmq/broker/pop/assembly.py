"""The POP parts built and wired together, so the Broker adds them in a few lines: the
revive log, FIFO state, the pop service, the revive loop (master only: handed to
rmq/broker/roles.py), the three processors and the FIFO state's periodic persist."""

from __future__ import annotations

import logging
from typing import Protocol

from rmq.broker.config import BrokerConfig
from rmq.broker.master_lease import WriteFence
from rmq.broker.pop.order_info import ConsumerOrderInfoManager
from rmq.broker.pop.pop_service import PopService, TopicLookup
from rmq.broker.pop.revive import GroupConfigs, PopReviveService, ReviveStore
from rmq.broker.pop.revive_log import ReviveLog, TopicCreator
from rmq.broker.processors.ack import AckMessageProcessor
from rmq.broker.processors.pop import PopHold, PopMessageProcessor
from rmq.broker.seams import ConsumerOffsets, GetStats, SubscriptionGroups
from rmq.protocol.codes import RequestCode
from rmq.protocol.pop import revive_topic
from rmq.remoting.server import RemotingServer
from rmq.runtime.service import PeriodicService

__all__ = ["PopComponents"]

log = logging.getLogger("rmq.broker.pop")


class _Topics(TopicLookup, TopicCreator, Protocol):
    pass


class PopComponents:
    def __init__(
        self,
        bc: BrokerConfig,
        config_dir: str,
        store: ReviveStore,
        topics: _Topics,
        offsets: ConsumerOffsets,
        subscriptions: SubscriptionGroups,
        groups: GroupConfigs,
        hold: PopHold,
        fence: WriteFence,
        stats: GetStats,
    ) -> None:
        topic = revive_topic(bc.brokerClusterName)
        self.revive_log = ReviveLog(topic, store, topics, fence)
        self.order_info = ConsumerOrderInfoManager(config_dir)
        self.service = PopService(bc.brokerName, store, topics, offsets, self.revive_log, self.order_info, stats)
        self.revive = PopReviveService(topic, store, topics, offsets, groups)
        self.pop_processor = PopMessageProcessor(bc, self.service, topics, subscriptions, hold)
        self.ack_processor = AckMessageProcessor(self.service)
        # an ack that unblocks a FIFO queue wakes the pops parked on it
        self.service.on_unblock = hold.notify_pop_arriving
        self._persist = PeriodicService(
            "pop-order-info", bc.flushConsumerOffsetInterval / 1000, self.order_info.persist_if_dirty, log
        )

    def register(self, server: RemotingServer) -> None:
        server.register_processor(RequestCode.POP_MESSAGE, self.pop_processor.process)
        server.register_processor(RequestCode.ACK_MESSAGE, self.ack_processor.ack)
        server.register_processor(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, self.ack_processor.change_invisible_time)

    def figures(self) -> dict[str, int]:
        """For metrics: the revive backlog (0 off a master) and the counters."""
        revive, svc = self.revive, self.service
        return {
            "backlog": revive.backlog() if revive.started else 0,
            "retries": revive.retried,
            "dlq": revive.dead_lettered,
            "checkpoints": svc.checkpoints,
            "acks": svc.acks,
        }

    def load(self) -> None:
        # (the revive log topic is created by the first ck, so a broker nobody pops from
        # keeps 4.x's topic table)
        self.order_info.load()

    def start(self) -> None:
        self._persist.start()

    async def stop(self) -> None:
        await self._persist.stop(cancel=True)
        await self.pop_processor.close()
        await self.order_info.persist_if_dirty()
