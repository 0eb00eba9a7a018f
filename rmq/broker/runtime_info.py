"""What GET_BROKER_RUNTIME_INFO (28) answers, and the put / get rates it reports."""

from __future__ import annotations

import time
from dataclasses import dataclass

from rmq.broker.stats import BrokerStats
from rmq.common.clock import now_ms
from rmq.remoting.connection import RemotingStats
from rmq.store.config import MessageStoreConfig
from rmq.store.message_store import MessageStore

__all__ = ["RMQ_VERSION", "RMQ_VERSION_DESC", "TpsMeter", "BrokerRuntimeInfo"]

RMQ_VERSION_DESC = "V4_9_8"
RMQ_VERSION = 409


class TpsMeter:
    """Rates over the last second, from BrokerStats snapshots (status line, runtime info)."""

    def __init__(self, stats: BrokerStats) -> None:
        self.stats = stats
        self.put_tps = 0.0
        self.get_tps = 0.0
        self._last = (time.monotonic(), 0, 0)

    def tick(self) -> None:
        now = time.monotonic()
        t0, p0, g0 = self._last
        dt = max(now - t0, 1e-6)
        self.put_tps = (self.stats.put_msgs - p0) / dt
        self.get_tps = (self.stats.get_msgs - g0) / dt
        self._last = (now, self.stats.put_msgs, self.stats.get_msgs)


@dataclass(eq=False)
class BrokerRuntimeInfo:
    """The KV table of GET_BROKER_RUNTIME_INFO (AdminBrokerProcessor.prepareRuntimeInfo)."""

    stats: BrokerStats
    tps: TpsMeter
    store: MessageStore
    store_config: MessageStoreConfig
    server_stats: RemotingStats

    def runtime_table(self) -> dict[str, str]:
        stats = self.stats
        st = self.store
        now = now_ms()
        table = {
            "brokerVersionDesc": RMQ_VERSION_DESC,
            "brokerVersion": str(RMQ_VERSION),
            "bootTimestamp": str(stats.boot_timestamp),
            "runtime": f"[ {(now - stats.boot_timestamp) // 1000} seconds ]",
            "msgPutTotalTodayNow": str(stats.put_msgs),
            "msgGetTotalTodayNow": str(stats.get_msgs),
            "putTps": f"{self.tps.put_tps:.2f}",
            "getFoundTps": f"{self.tps.get_tps:.2f}",
            "commitLogMinOffset": str(st.min_phy_offset),
            "commitLogMaxOffset": str(st.max_phy_offset),
            "dispatchBehindBytes": str(st.dispatch_behind_bytes),
            "remainHowManyDataToFlush": str(st.commitlog.mfq.remain_to_flush()),
            "brokerRole": self.store_config.brokerRole.value,
            "flushDiskType": self.store_config.flushDiskType.value,
            "earliestMessageTimeStamp": str(st.commitlog.pick_store_timestamp(st.min_phy_offset, 0)),
            "pageCacheLockTimeMills": "0",
            "remotingProtocolErrors": str(self.server_stats.protocol_errors),
        }
        # As measured by the last cleanup run (RocketMQ measures on each request).
        disk = st.cleaner.commitlog_service
        if disk.commitlog_ratio >= 0:
            table["commitLogDiskRatio"] = f"{disk.commitlog_ratio:.4f}"
            table["consumeQueueDiskRatio"] = f"{disk.logics_ratio:.4f}"
        return table
