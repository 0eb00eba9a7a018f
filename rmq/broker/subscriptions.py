"""SubscriptionGroupManager: per consumer group settings (retries, broadcast, ...)."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from rmq.broker.persist import MetadataFile, MetadataTable
from rmq.common.clock import now_ms
from rmq.common.mixall import CLIENT_INNER_PRODUCER_GROUP, TOOLS_CONSUMER_GROUP

log = logging.getLogger("rmq.broker.subscriptions")

# Groups RocketMQ's SubscriptionGroupManager creates at start.
SYSTEM_GROUPS = (
    TOOLS_CONSUMER_GROUP,
    "FILTERSRV_CONSUMER",
    "__MONITOR_CONSUMER",
    CLIENT_INNER_PRODUCER_GROUP,
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
    "CID_ONSAPI_PULL",
    "CID_RMQ_SYS_TRACE",
)


@dataclass
class SubscriptionGroupConfig:
    groupName: str
    consumeEnable: bool = True
    consumeFromMinEnable: bool = True
    consumeBroadcastEnable: bool = True
    retryQueueNums: int = 1
    retryMaxTimes: int = 16
    brokerId: int = 0
    whichBrokerWhenConsumeSlowly: int = 1
    notifyConsumerIdsChangedEnable: bool = True
    # RocketMQ 5: the group pops orderly (FIFO); reported to 5.x clients as subscription.fifo
    consumeMessageOrderly: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SubscriptionGroupConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


class SubscriptionGroupManager(MetadataTable[SubscriptionGroupConfig]):
    def __init__(self, config_dir: str, auto_create: bool = True) -> None:
        super().__init__(MetadataFile(config_dir, "subscriptionGroup", "subscriptionGroup.json"), log)
        self.auto_create = auto_create
        self.data_version = {"counter": 0, "timestamp": 0}
        for g in SYSTEM_GROUPS:
            self.table[g] = SubscriptionGroupConfig(g)

    def load(self) -> None:
        data, adopted = self.file.load()
        if not data:
            return
        for name, cfg in (data.get("subscriptionGroupTable") or {}).items():
            if isinstance(cfg, dict):
                self.table[str(name)] = SubscriptionGroupConfig.from_dict({"groupName": name, **cfg})
        dv = data.get("dataVersion")
        if isinstance(dv, dict):
            self.data_version.update({k: dv[k] for k in ("counter", "timestamp") if k in dv})
        self.dirty = adopted

    def snapshot(self) -> dict[str, Any]:
        return {
            "subscriptionGroupTable": {k: v.to_dict() for k, v in self.table.items()},
            "dataVersion": dict(self.data_version),
        }

    def _next_version(self) -> None:
        self.data_version["counter"] += 1
        self.data_version["timestamp"] = now_ms()

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; auto-created when autoCreateSubscriptionGroup is on."""
        cfg = self.table.get(group)
        if cfg is None and self.auto_create:
            cfg = self.table[group] = SubscriptionGroupConfig(group)
            log.info("auto-created subscription group %s", group)
            self._changed()
        return cfg

    def update(self, cfg: SubscriptionGroupConfig) -> None:
        self.table[cfg.groupName] = cfg
        log.info("subscription group %s updated: %s", cfg.groupName, cfg)
        self._changed()

    def names(self) -> list[str]:
        return list(self.table)

    def delete(self, group: str) -> bool:
        return self._delete(group, "subscription group")

    def replace_all(
        self, table: dict[str, SubscriptionGroupConfig], data_version: dict[str, int] | None = None
    ) -> None:
        """Take a whole table (a slave copying its master: with the master's version)."""
        self.table = dict(table)
        if data_version is None:
            self._changed()
            return
        self.data_version = dict(data_version)
        self.dirty = True
