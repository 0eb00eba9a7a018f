"""What GET_BROKER_RUNTIME_INFO (28) answers: every key 4.9.8's broker reports
(AdminBrokerProcessor.prepareRuntimeInfo + DefaultMessageStore / StoreStatsService
getRuntimeInfo), in the same formats, with live figures."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rmq.broker.config import BrokerConfig
from rmq.broker.schedule import delay_level_to_queue_id
from rmq.broker.stats import BrokerStats
from rmq.broker.store_stats import StatsSampler, human_readable_bytes, java_double, java_runtime
from rmq.common.clock import now_ms
from rmq.common.mixall import SCHEDULE_TOPIC
from rmq.remoting.connection import RemotingStats
from rmq.store.config import MessageStoreConfig
from rmq.store.message_store import MessageStore

__all__ = ["RMQ_VERSION", "RMQ_VERSION_DESC", "BrokerRuntimeInfo", "stats_sampler"]

RMQ_VERSION_DESC = "V4_9_8"
RMQ_VERSION = 409
# 4.9.8 reports Integer.MAX_VALUE when transientStorePoolEnable is off (rmq has no pool)
NO_TRANSIENT_POOL = str(2**31 - 1)
# Sample fields (store_stats.Sample): put, found, miss, transferred
_PUT, _FOUND, _MISS, _TRANSFERRED = 1, 2, 3, 4


def stats_sampler(stats: BrokerStats) -> StatsSampler:
    """The broker's once-a-second sampler over its BrokerStats counters."""
    return StatsSampler(lambda: (stats.put_msgs, stats.get_msgs, stats.get_misses, stats.get_msgs), stats.put_time)


def _disk_used_ratio(path: str, fallback: str) -> float:
    """UtilAll.getDiskPartitionSpaceUsedPercent: used / total of the partition. A store
    directory made at the first message is measured on its parent's partition until then
    (4.9.8 answers -1 there, which mqadmin prints as a disk ratio)."""
    for p in (path, fallback):
        try:
            u = shutil.disk_usage(p)
        except OSError:
            continue
        if u.total:
            return (u.total - u.free) / u.total
    return -1.0


@dataclass(eq=False)
class BrokerRuntimeInfo:
    """The KV table of GET_BROKER_RUNTIME_INFO."""

    stats: BrokerStats
    sampler: StatsSampler
    store: MessageStore
    store_config: MessageStoreConfig
    broker_config: BrokerConfig
    server_stats: RemotingStats
    # delay level -> offset reached in SCHEDULE_TOPIC_XXXX (ScheduleMessageService)
    schedule_offsets: Callable[[], Mapping[int, int]]

    def runtime_table(self) -> dict[str, str]:
        stats, st, sc, bc, smp = self.stats, self.store, self.store_config, self.broker_config, self.sampler
        put_total = stats.put_msgs
        times = put_total or 1  # 4.9.8 divides by at least one
        loop_wait = str(smp.loop_wait_ms)
        table = {
            "brokerVersionDesc": RMQ_VERSION_DESC,
            "brokerVersion": str(RMQ_VERSION),
            "bootTimestamp": str(stats.boot_timestamp),
            "runtime": java_runtime(now_ms() - stats.boot_timestamp),
            "putMessageEntireTimeMax": str(stats.put_time.max_ms),
            "putMessageTimesTotal": str(times),
            "putMessageFailedTimes": str(stats.put_failures),
            "putMessageSizeTotal": str(stats.put_bytes),
            "putMessageDistributeTime": stats.put_time.distribute_text(),
            "putMessageAverageSize": java_double(stats.put_bytes / times),
            "dispatchMaxBuffer": "0",  # never set by 4.9.8 either
            "getMessageEntireTimeMax": str(stats.get_time_max_ms),
            "putTps": smp.rate_text(_PUT),
            "getFoundTps": smp.rate_text(_FOUND),
            "getMissTps": smp.rate_text(_MISS),
            "getTotalTps": smp.total_get_text(),
            "getTransferedTps": smp.rate_text(_TRANSFERRED),
            "putLatency99": f"{stats.put_time.percentile(0.99):.2f}",
            "putLatency999": f"{stats.put_time.percentile(0.999):.2f}",
            "msgPutTotalYesterdayMorning": str(smp.put_yesterday_morning),
            "msgPutTotalTodayMorning": str(smp.put_today_morning),
            "msgPutTotalTodayNow": str(put_total),
            "msgGetTotalYesterdayMorning": str(smp.get_yesterday_morning),
            "msgGetTotalTodayMorning": str(smp.get_today_morning),
            "msgGetTotalTodayNow": str(stats.get_msgs),
            # Requests are handled on the event loop as they are parsed: no pool queue holds
            # them, so the queue sizes are 0 and the head wait is the loop's own wait.
            "sendThreadPoolQueueSize": "0",
            "sendThreadPoolQueueCapacity": str(bc.sendThreadPoolQueueCapacity),
            "pullThreadPoolQueueSize": "0",
            "pullThreadPoolQueueCapacity": str(bc.pullThreadPoolQueueCapacity),
            "queryThreadPoolQueueSize": "0",
            "queryThreadPoolQueueCapacity": str(bc.queryThreadPoolQueueCapacity),
            "EndTransactionQueueSize": "0",
            "EndTransactionThreadPoolQueueCapacity": str(bc.endTransactionPoolQueueCapacity),
            "sendThreadPoolQueueHeadWaitTimeMills": loop_wait,
            "pullThreadPoolQueueHeadWaitTimeMills": loop_wait,
            "queryThreadPoolQueueHeadWaitTimeMills": loop_wait,
            "dispatchBehindBytes": str(st.dispatch_behind_bytes),
            "pageCacheLockTimeMills": "0",  # appends never hold a lock across an await
            "earliestMessageTimeStamp": str(st.commitlog.pick_store_timestamp(st.min_phy_offset, 0)),
            "startAcceptSendRequestTimeStamp": "0",
            "remainTransientStoreBufferNumbs": NO_TRANSIENT_POOL,
            "remainHowManyDataToFlush": human_readable_bytes(st.commitlog.mfq.remain_to_flush()),
            "commitLogMinOffset": str(st.min_phy_offset),
            "commitLogMaxOffset": str(st.max_phy_offset),
            "brokerRole": sc.brokerRole.value,
            "flushDiskType": sc.flushDiskType.value,
            "remotingProtocolErrors": str(self.server_stats.protocol_errors),
        }
        commitlog_ratio = _disk_used_ratio(sc.commitlog_dir, sc.storePathRootDir)
        table[f"commitLogDiskRatio_{sc.commitlog_dir}"] = java_double(commitlog_ratio)
        table["commitLogDiskRatio"] = java_double(commitlog_ratio)
        table["consumeQueueDiskRatio"] = java_double(_disk_used_ratio(sc.consume_queue_dir, sc.storePathRootDir))
        try:
            u = shutil.disk_usage(sc.storePathRootDir)
            table["commitLogDirCapacity"] = (
                f"Total : {human_readable_bytes(u.total)}, Free : {human_readable_bytes(u.free)}."
            )
        except OSError:
            pass
        for level, offset in sorted(self.schedule_offsets().items()):
            max_offset = st.get_max_offset_in_queue(SCHEDULE_TOPIC, delay_level_to_queue_id(level))
            table[f"scheduleMessageOffset_{level}"] = f"{offset},{max_offset}"
        return table
