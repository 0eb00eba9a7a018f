"""SlaveSynchronize: a slave copies its master's metadata (RocketMQ's SlaveSynchronize).

Every slaveSyncInterval (RocketMQ: a fixed 10 s) the slave asks its master, over the
ordinary remoting port, for

* GET_ALL_TOPIC_CONFIG (21): the topic table, taken whole when its dataVersion differs;
* GET_ALL_CONSUMER_OFFSET (43): committed offsets, merged key by key (putAll);
* GET_ALL_DELAY_OFFSET (45): the schedule service's per-level offsets;
* GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201): groups, taken whole when the version differs;

and writes what changed to its own config files, so that it serves pulls and offset
queries as its master would, and has the metadata when it is promoted.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from rmq.broker.subscriptions import SubscriptionGroupConfig
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.errors import ProtocolError
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.bodies import DataVersion, TopicConfigSerializeWrapper, loads_fastjson
from rmq.remoting.errors import RemotingError

if TYPE_CHECKING:
    from rmq.broker.broker import Broker

log = logging.getLogger("rmq.broker.slave_sync")

TIMEOUT = 3.0


class SlaveSynchronize:
    def __init__(self, broker: "Broker") -> None:
        self.broker = broker
        self.syncs = 0
        self.last_error: str | None = None

    async def _fetch(self, addr: str, code: int) -> bytes:
        resp = await self.broker.namesrv_client.invoke(addr, RemotingCommand(code), TIMEOUT)
        if resp.code != ResponseCode.SUCCESS:
            raise ProtocolError(f"{RequestCode.name_of(code)} answered "
                                f"{ResponseCode.name_of(resp.code)}: {resp.remark}")
        return resp.body or b""

    async def sync_all(self) -> None:
        addr = self.broker.master_addr
        if not addr or addr == self.broker.broker_addr:
            return
        errors = []
        for step in (self.sync_topic_config, self.sync_consumer_offset,
                     self.sync_delay_offset, self.sync_subscription_group_config):
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
        b = self.broker
        wrapper = TopicConfigSerializeWrapper.from_json(
            await self._fetch(addr, RequestCode.GET_ALL_TOPIC_CONFIG))
        if wrapper.data_version == b.topics.data_version:
            return
        b.topics.replace_all(wrapper.topic_config_table, wrapper.data_version)
        await b.topics.persist()
        log.info("slave sync: %d topics from master %s (data version %s)",
                 len(wrapper.topic_config_table), addr, wrapper.data_version.counter)
        b.schedule_register()

    async def sync_consumer_offset(self, addr: str) -> None:
        b = self.broker
        obj = _obj(loads_fastjson(await self._fetch(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)))
        table = {str(k): {int(q): int(o) for q, o in _obj(v).items()}
                 for k, v in _obj(obj.get("offsetTable") or {}).items()}
        if b.offsets.merge_all(table):
            await b.offsets.persist()

    async def sync_delay_offset(self, addr: str) -> None:
        b = self.broker
        obj = _obj(loads_fastjson(await self._fetch(addr, RequestCode.GET_ALL_DELAY_OFFSET)))
        table = {int(k): int(v) for k, v in _obj(obj.get("offsetTable") or {}).items()}
        sched = b.schedule
        if sched is None or sched.offset_table == table:
            return
        sched.offset_table = table
        await sched.persist()

    async def sync_subscription_group_config(self, addr: str) -> None:
        b = self.broker
        obj = _obj(loads_fastjson(
            await self._fetch(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)))
        dv = DataVersion.from_obj(obj.get("dataVersion") or {})
        mine = b.subscriptions.data_version
        if (dv.counter, dv.timestamp) == (mine.get("counter"), mine.get("timestamp")):
            return
        table = {}
        for name, cfg in _obj(obj.get("subscriptionGroupTable") or {}).items():
            c = _obj(cfg)
            table[str(name)] = SubscriptionGroupConfig.from_dict({"groupName": name, **c})
        b.subscriptions.replace_all(table, {"counter": dv.counter, "timestamp": dv.timestamp})
        await b.subscriptions.persist()
        log.info("slave sync: %d subscription groups from master %s", len(table), addr)


def _obj(v: Any) -> dict:
    if not isinstance(v, dict):
        raise ProtocolError(f"expected a JSON object, got {type(v).__name__}")
    return v
