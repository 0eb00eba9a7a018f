"""ProducerManager and ConsumerManager: who is connected, in which group, subscribed to what."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from rmq.common.clock import now_ms as _now_ms
from rmq.protocol.bodies import ConsumerData
from rmq.protocol.codes import RequestCode
from rmq.protocol.frame import RemotingCommand

log = logging.getLogger("rmq.broker.clients")


@dataclass(eq=False)
class ClientChannelInfo:
    conn: Any
    client_id: str
    language: int
    version: int
    last_update: int = field(default_factory=_now_ms)


class ConsumerGroupInfo:
    def __init__(self, group: str, consume_type: str, message_model: str, consume_from_where: str) -> None:
        self.group = group
        self.consume_type = consume_type
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.channels: dict[Any, ClientChannelInfo] = {}
        self.subscriptions: dict[str, Any] = {}  # topic -> SubscriptionData
        self.last_update = _now_ms()

    def client_ids(self) -> list[str]:
        return [c.client_id for c in self.channels.values()]

    def find_subscription(self, topic: str) -> Any | None:
        return self.subscriptions.get(topic)

    def update_channel(
        self, info: ClientChannelInfo, consume_type: str, message_model: str, consume_from_where: str
    ) -> bool:
        """True when this client is new to the group."""
        self.consume_type = consume_type
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        old = self.channels.get(info.conn)
        if old is None:
            # a client id reconnecting on a new channel replaces its old one
            for conn, c in list(self.channels.items()):
                if c.client_id == info.client_id:
                    del self.channels[conn]
            self.channels[info.conn] = info
            log.info(
                "new consumer connected, group %s %s %s %s", self.group, consume_type, message_model, info.client_id
            )
            return True
        old.last_update = _now_ms()
        if old.client_id != info.client_id:
            old.client_id = info.client_id
            return True
        return False

    def update_subscriptions(self, subs: Iterable[Any]) -> bool:
        """True when a topic was added or removed (what makes rebalancing necessary)."""
        changed = False
        fresh = {s.topic: s for s in subs}
        for topic, s in fresh.items():
            old = self.subscriptions.get(topic)
            if old is None:
                self.subscriptions[topic] = s
                changed = True
                log.info("group %s subscribes to %s (%s)", self.group, topic, s.sub_string)
            elif s.sub_version > old.sub_version:
                if old.sub_string != s.sub_string:
                    log.info(
                        "group %s changes its subscription to %s: %s -> %s",
                        self.group,
                        topic,
                        old.sub_string,
                        s.sub_string,
                    )
                self.subscriptions[topic] = s
        for topic in list(self.subscriptions):
            if topic not in fresh:
                del self.subscriptions[topic]
                changed = True
                log.info("group %s no longer subscribes to %s", self.group, topic)
        self.last_update = _now_ms()
        return changed

    def unregister_channel(self, conn: Any) -> bool:
        info = self.channels.pop(conn, None)
        if info is not None:
            log.info("consumer %s left group %s", info.client_id, self.group)
            return True
        return False


# Events the ConsumerManager reports (ConsumerGroupEvent in RocketMQ).
CHANGE, UNREGISTER, REGISTER = "CHANGE", "UNREGISTER", "REGISTER"


class ConsumerManager:
    def __init__(
        self,
        listener: Callable[[str, str, list[ClientChannelInfo]], None] | None = None,
        channel_expire_ms: int = 120_000,
    ) -> None:
        self.table: dict[str, ConsumerGroupInfo] = {}
        self.listener = listener
        self.channel_expire_ms = channel_expire_ms

    def _emit(self, event: str, group: str) -> None:
        if self.listener is not None:
            info = self.table.get(group)
            self.listener(event, group, list(info.channels.values()) if info else [])

    def get_group(self, group: str) -> ConsumerGroupInfo | None:
        return self.table.get(group)

    def register(self, info: ClientChannelInfo, data: ConsumerData, notify: bool) -> bool:
        """A consumer's heartbeat for one group; True when the group's channels or
        subscriptions changed (told to the listener as CHANGE when ``notify``)."""
        group = data.group_name
        g = self.table.get(group)
        if g is None:
            g = self.table[group] = ConsumerGroupInfo(
                group, data.consume_type, data.message_model, data.consume_from_where
            )
        r1 = g.update_channel(info, data.consume_type, data.message_model, data.consume_from_where)
        r2 = g.update_subscriptions(data.subscription_data_set)
        if r1 or r2:
            if notify:
                self._emit(CHANGE, group)
        self._emit(REGISTER, group)
        return r1 or r2

    def unregister(self, group: str, conn: Any, notify: bool) -> None:
        g = self.table.get(group)
        if g is None:
            return
        if g.unregister_channel(conn):
            if not g.channels:
                del self.table[group]
                self._emit(UNREGISTER, group)
            elif notify:
                self._emit(CHANGE, group)

    def on_channel_closed(self, conn: Any) -> None:
        for group, g in list(self.table.items()):
            if conn in g.channels:
                g.unregister_channel(conn)
                if not g.channels:
                    del self.table[group]
                    self._emit(UNREGISTER, group)
                else:
                    self._emit(CHANGE, group)

    def scan_not_active(self) -> list[ClientChannelInfo]:
        now = _now_ms()
        dropped = []
        for group, g in list(self.table.items()):
            for conn, c in list(g.channels.items()):
                if now - c.last_update > self.channel_expire_ms:
                    log.warning(
                        "consumer %s of group %s silent for %d ms; dropped", c.client_id, group, now - c.last_update
                    )
                    del g.channels[conn]
                    dropped.append(c)
            if not g.channels:
                del self.table[group]
                self._emit(UNREGISTER, group)
        return dropped

    def groups_of_topic(self, topic: str) -> list[str]:
        return [g for g, info in self.table.items() if topic in info.subscriptions]


class ProducerManager:
    def __init__(self, channel_expire_ms: int = 120_000) -> None:
        self.table: dict[str, dict[Any, ClientChannelInfo]] = {}
        self.channel_expire_ms = channel_expire_ms

    def register(self, group: str, info: ClientChannelInfo) -> None:
        chans = self.table.setdefault(group, {})
        old = chans.get(info.conn)
        if old is None:
            chans[info.conn] = info
            log.info("new producer connected, group %s client %s", group, info.client_id)
        else:
            old.last_update = _now_ms()

    def unregister(self, group: str, conn: Any) -> None:
        chans = self.table.get(group)
        if chans is not None and chans.pop(conn, None) is not None and not chans:
            del self.table[group]

    def on_channel_closed(self, conn: Any) -> None:
        for group in list(self.table):
            self.unregister(group, conn)

    def scan_not_active(self) -> None:
        now = _now_ms()
        for group, chans in list(self.table.items()):
            for conn, c in list(chans.items()):
                if now - c.last_update > self.channel_expire_ms:
                    del chans[conn]
            if not chans:
                del self.table[group]

    def any_channel(self, group: str) -> ClientChannelInfo | None:
        """A live producer of the group (transaction checks go to one)."""
        for c in self.table.get(group, {}).values():
            if not getattr(c.conn, "closed", False):
                return c
        return None

    def connection_count(self) -> int:
        return sum(len(c) for c in self.table.values())


class ConsumerIdsChangeNotifier:
    """DefaultConsumerIdsChangeListener: a group's members changed, tell each of them
    (NOTIFY_CONSUMER_IDS_CHANGED) so they rebalance now, not at their next interval."""

    def __init__(self, enabled: Callable[[], bool]) -> None:
        self.enabled = enabled

    def __call__(self, event: str, group: str, channels: list[ClientChannelInfo]) -> None:
        if event != CHANGE or not self.enabled():
            return
        for c in channels:
            if getattr(c.conn, "closed", False):
                continue
            cmd = RemotingCommand(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, ext_fields={"consumerGroup": group})
            try:
                c.conn.send_oneway(cmd)
            except Exception as e:  # a dying connection must not break the heartbeat
                log.warning("notify consumer ids changed to %s (%s) failed: %s", c.client_id, c.conn.remote_address, e)
