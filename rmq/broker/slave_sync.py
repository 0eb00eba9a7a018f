"""SlaveSynchronize: a slave copies its master's metadata (RocketMQ's SlaveSynchronize).

Every slaveSyncInterval (RocketMQ: a fixed 10 s) the slave asks its master, over the
ordinary remoting port, for

* GET_ALL_TOPIC_CONFIG (21): the topic table, taken whole when its dataVersion differs;
* GET_ALL_CONSUMER_OFFSET (43): committed offsets, merged key by key (putAll);
* GET_ALL_DELAY_OFFSET (45): the schedule service's per-level offsets;
* GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201): groups, taken whole when the version differs;
* GET_TIMER_CHECK_POINT (60): the timer service's progress (RocketMQ 5's
  syncTimerCheckPoint), stored in config/timercheck when its version differs, so that a
  promoted slave resumes timer delivery from it (rmq/broker/timer.py);

and writes what changed to its own config files, so that it serves pulls and offset
queries as its master would, and has the metadata when it is promoted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

from rmq.broker.config import BrokerConfig
from rmq.broker.offsets import ConsumerOffsetManager
from rmq.broker.schedule import ScheduleMessageService
from rmq.broker.subscriptions import SubscriptionGroupConfig, SubscriptionGroupManager
from rmq.broker.topics import TopicConfigManager
from rmq.protocol.bodies import DataVersion, TopicConfigSerializeWrapper, loads_fastjson
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.errors import ProtocolError
from rmq.protocol.frame import RemotingCommand
from rmq.remoting.client import RemotingClient
from rmq.remoting.errors import RemotingError
from rmq.runtime.service import ServiceLoop
from rmq.store.config import BrokerRole, MessageStoreConfig

log = logging.getLogger("rmq.broker.slave_sync")

TIMEOUT = 3.0


class TimerCheckCopy(Protocol):
    """The timer service's side (rmq/broker/timer.py TimerMessageService.adopt)."""

    async def adopt(self, body: bytes) -> bool: ...


@dataclass(eq=False)
class SlaveSynchronize:
    """``master_addr`` is set by the role change (rmq/broker/roles.py) or, for a static
    slave, from the NameServers' answer to its registration."""

    client: RemotingClient
    broker_config: BrokerConfig
    topics: TopicConfigManager
    offsets: ConsumerOffsetManager
    schedule: ScheduleMessageService
    subscriptions: SubscriptionGroupManager
    timer: TimerCheckCopy | None = None

    def __post_init__(self) -> None:
        self.master_addr: str | None = None
        self.syncs = 0
        self.last_error: str | None = None

    async def _fetch(self, addr: str, code: int) -> bytes:
        resp = await self.client.invoke(addr, RemotingCommand(code), TIMEOUT)
        if resp.code != ResponseCode.SUCCESS:
            raise ProtocolError(
                f"{RequestCode.name_of(code)} answered {ResponseCode.name_of(resp.code)}: {resp.remark}"
            )
        return resp.body or b""

    async def sync_all(self) -> None:
        addr = self.master_addr
        if not addr or addr == self.broker_config.broker_addr:
            return
        errors = []
        for step in (
            self.sync_topic_config,
            self.sync_consumer_offset,
            self.sync_delay_offset,
            self.sync_subscription_group_config,
            self.sync_timer_check_point,
        ):
            try:
                await step(addr)
            except (RemotingError, ProtocolError, OSError, ValueError, TypeError) as e:
                errors.append(f"{step.__name__}: {e}")
        self.syncs += 1
        if errors:
            msg = "; ".join(errors)
            if msg != self.last_error:
                log.warning("slave sync from master %s failed: %s", addr, msg)
            self.last_error = msg
        else:
            self.last_error = None

    async def sync_topic_config(self, addr: str) -> None:
        topics = self.topics
        wrapper = TopicConfigSerializeWrapper.from_json(await self._fetch(addr, RequestCode.GET_ALL_TOPIC_CONFIG))
        if wrapper.data_version == topics.data_version:
            return
        topics.replace_all(wrapper.topic_config_table, wrapper.data_version)
        await topics.persist()
        log.info(
            "slave sync: %d topics from master %s (data version %s)",
            len(wrapper.topic_config_table),
            addr,
            wrapper.data_version.counter,
        )

    async def sync_consumer_offset(self, addr: str) -> None:
        obj = _obj(loads_fastjson(await self._fetch(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)))
        table = {
            str(k): {int(q): int(o) for q, o in _obj(v).items()} for k, v in _obj(obj.get("offsetTable") or {}).items()
        }
        if self.offsets.merge_all(table):
            await self.offsets.persist()

    async def sync_delay_offset(self, addr: str) -> None:
        obj = _obj(loads_fastjson(await self._fetch(addr, RequestCode.GET_ALL_DELAY_OFFSET)))
        table = {int(k): int(v) for k, v in _obj(obj.get("offsetTable") or {}).items()}
        sched = self.schedule
        if sched.offset_table == table:
            return
        sched.offset_table = table
        await sched.persist()

    async def sync_subscription_group_config(self, addr: str) -> None:
        subscriptions = self.subscriptions
        obj = _obj(loads_fastjson(await self._fetch(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)))
        dv = DataVersion.from_obj(obj.get("dataVersion") or {})
        mine = subscriptions.data_version
        if (dv.counter, dv.timestamp) == (mine.get("counter"), mine.get("timestamp")):
            return
        table = {}
        for name, cfg in _obj(obj.get("subscriptionGroupTable") or {}).items():
            c = _obj(cfg)
            table[str(name)] = SubscriptionGroupConfig.from_dict({"groupName": name, **c})
        subscriptions.replace_all(table, {"counter": dv.counter, "timestamp": dv.timestamp})
        await subscriptions.persist()
        log.info("slave sync: %d subscription groups from master %s", len(table), addr)

    async def sync_timer_check_point(self, addr: str) -> None:
        if self.timer is None:
            return
        if await self.timer.adopt(await self._fetch(addr, RequestCode.GET_TIMER_CHECK_POINT)):
            log.debug("slave sync: timer checkpoint from master %s", addr)


class SlaveSyncService(ServiceLoop):
    """Every slaveSyncInterval (at least 100 ms), while the store is a SLAVE."""

    def __init__(self, sync: SlaveSynchronize, store_config: MessageStoreConfig) -> None:
        super().__init__("slave-sync", log)
        self.sync = sync
        self.store_config = store_config

    def interval(self) -> float:
        return max(self.sync.broker_config.slaveSyncInterval, 100) / 1000

    async def run_once(self) -> None:
        if self.store_config.brokerRole == BrokerRole.SLAVE:
            await self.sync.sync_all()


def _obj(v: Any) -> dict[Any, Any]:
    if not isinstance(v, dict):
        raise ProtocolError(f"expected a JSON object, got {type(v).__name__}")
    return v
