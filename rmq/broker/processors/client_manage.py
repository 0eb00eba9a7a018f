"""HEART_BEAT (34), UNREGISTER_CLIENT (35), CHECK_CLIENT_CONFIG (46) — spec 2.7."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from rmq.broker.client_manager import ClientChannelInfo
from rmq.broker.processors.decode import with_body, with_header
from rmq.broker.seams import ConsumerRegistry, ProducerRegistry, SubscriptionGroups, TopicConfigs
from rmq.common.mixall import retry_topic
from rmq.protocol.bodies import HeartbeatData
from rmq.protocol.codes import PermName, ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import UnregisterClientRequestHeader

log = logging.getLogger("rmq.broker.clients")


@dataclass(eq=False)
class ClientManageProcessor:
    topics: TopicConfigs
    subscriptions: SubscriptionGroups
    consumers: ConsumerRegistry
    producers: ProducerRegistry

    @with_body(HeartbeatData, "heartbeat", b"{}")
    def heartbeat(self, conn: Any, request: RemotingCommand, hb: HeartbeatData) -> RemotingCommand:
        conn.attrs["client_id"] = hb.client_id
        info = ClientChannelInfo(conn, hb.client_id, request.language, request.version)
        for data in hb.consumer_data_set:
            sub_group = self.subscriptions.find(data.group_name)
            notify = True
            if sub_group is not None:
                notify = sub_group.notifyConsumerIdsChangedEnable
                self.topics.create_topic_in_send_message_back_method(
                    retry_topic(data.group_name), sub_group.retryQueueNums, PermName.PERM_READ | PermName.PERM_WRITE, 0
                )
            changed = self.consumers.register(info, data, notify)
            if changed:
                log.info(
                    "consumer group %s changed on heartbeat from %s (%s)",
                    data.group_name,
                    hb.client_id,
                    conn.remote_address,
                )
        for p in hb.producer_data_set:
            self.producers.register(p.group_name, info)
        return request.create_response(ResponseCode.SUCCESS)

    @with_header(UnregisterClientRequestHeader)
    def unregister_client(
        self, conn: Any, request: RemotingCommand, h: UnregisterClientRequestHeader
    ) -> RemotingCommand:
        if h.producer_group:
            self.producers.unregister(h.producer_group, conn)
        if h.consumer_group:
            sub_group = self.subscriptions.find(h.consumer_group)
            notify = sub_group.notifyConsumerIdsChangedEnable if sub_group is not None else True
            self.consumers.unregister(h.consumer_group, conn, notify)
        return request.create_response(ResponseCode.SUCCESS)

    def check_client_config(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        return request.create_response(ResponseCode.SUCCESS)
