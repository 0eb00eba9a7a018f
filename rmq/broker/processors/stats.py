"""VIEW_BROKER_STATS_DATA (315): one stats item of the broker's BrokerStatsManager over the
last minute, hour and day, as 4.9.8's AdminBrokerProcessor.ViewBrokerStatsData answers it
(mqadmin statsAll reads TOPIC_PUT_NUMS and GROUP_GET_NUMS through it)."""

from __future__ import annotations

from typing import Any

from rmq.broker.processors.decode import with_header
from rmq.broker.stats import BrokerStatsManager, StatsSnapshot
from rmq.protocol.bodies import BrokerStatsData, BrokerStatsItem
from rmq.protocol.codes import ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import ViewBrokerStatsDataRequestHeader

__all__ = ["BrokerStatsProcessor"]


def _item(ss: StatsSnapshot) -> BrokerStatsItem:
    return BrokerStatsItem(ss.sum, ss.tps, ss.avgpt)


class BrokerStatsProcessor:
    def __init__(self, manager: BrokerStatsManager) -> None:
        self.manager = manager

    @with_header(ViewBrokerStatsDataRequestHeader)
    def view_broker_stats_data(
        self, conn: Any, request: RemotingCommand, h: ViewBrokerStatsDataRequestHeader
    ) -> RemotingCommand:
        item = self.manager.get_stats_item(h.stats_name, h.stats_key)
        if item is None:
            # 4.9.8's answer to an unknown name or a key nothing was counted under
            return request.create_response(
                ResponseCode.SYSTEM_ERROR, f"The stats <{h.stats_name}> <{h.stats_key}> not exist"
            )
        data = BrokerStatsData(_item(item.minute()), _item(item.hour()), _item(item.day()))
        return request.create_response(ResponseCode.SUCCESS, None, body=data.to_json())
