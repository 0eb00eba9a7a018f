"""Broker: wires the store, metadata managers, processors, NameServer registration."""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Any, Callable

from rmq.broker.client_manager import CHANGE, ClientChannelInfo, ConsumerManager, ProducerManager
from rmq.broker.config import BrokerConfig
from rmq.broker.locks import RebalanceLockManager
from rmq.broker.metrics import BrokerMetrics
from rmq.broker.offsets import ConsumerOffsetManager
from rmq.broker.outer_api import BrokerOuterAPI
from rmq.broker.processors.admin import AdminBrokerProcessor
from rmq.broker.processors.admin_ops import AdminOpsProcessor
from rmq.broker.processors.client_manage import ClientManageProcessor
from rmq.broker.processors.consumer_manage import ConsumerManageProcessor
from rmq.broker.processors.end_transaction import EndTransactionProcessor
from rmq.broker.processors.lock import LockProcessor
from rmq.broker.processors.pull import PullMessageProcessor
from rmq.broker.processors.query import QueryMessageProcessor
from rmq.broker.processors.send import SendMessageProcessor
from rmq.broker.pull_hold import PullRequestHoldService
from rmq.broker.role import ControllerRole
from rmq.broker.schedule import ScheduleMessageService
from rmq.broker.slave_sync import SlaveSynchronize
from rmq.broker.stats import BrokerStats
from rmq.broker.subscriptions import SubscriptionGroupManager
from rmq.broker.topics import TopicConfigManager
from rmq.broker.transaction import TransactionalMessageService
from ha.client import HAClient
from ha.service import HAService
from rmq.protocol.codes import RequestCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.message import pack_host
from rmq.remoting.client import RemotingClient
from rmq.remoting.server import RemotingServer
from rmq.store.config import BrokerRole, MessageStoreConfig
from rmq.store.message_store import MessageStore

log = logging.getLogger("rmq.broker")


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


class Broker:
    def __init__(self, broker_config: BrokerConfig, store_config: MessageStoreConfig,
                 listen_host: str = "0.0.0.0") -> None:
        self.broker_config = broker_config
        self.store_config = store_config
        bc = broker_config
        cfg_dir = store_config.config_dir
        self.stats = BrokerStats()
        self.tps = TpsMeter(self.stats)
        self.topics = TopicConfigManager(
            cfg_dir, bc.brokerClusterName, bc.brokerName, bc.defaultTopicQueueNums,
            bc.autoCreateTopicEnable, bc.clusterTopicEnable, bc.brokerTopicEnable,
            len(store_config.delay_levels_ms))
        self.offsets = ConsumerOffsetManager(cfg_dir)
        self.subscriptions = SubscriptionGroupManager(cfg_dir, bc.autoCreateSubscriptionGroup)
        self.consumers = ConsumerManager(self._on_consumer_group_event, bc.channelNotActiveInterval)
        self.producers = ProducerManager(bc.channelNotActiveInterval)
        self.locks = RebalanceLockManager()
        self.transactions = TransactionalMessageService(self)
        # The send processor rewrites TRAN_MSG sends through this (None refuses them).
        self.transactional_prepare: Callable[[Any], Any] | None = self.transactions.prepare
        self.listen_host = listen_host
        self.server = RemotingServer(listen_host, bc.listenPort, name=f"broker-{bc.brokerName}")
        self.namesrv_client = RemotingClient()
        self.outer_api = BrokerOuterAPI(self.namesrv_client)
        self.store: MessageStore | None = None
        self.schedule: ScheduleMessageService | None = None
        self.store_host = b""
        self.pull_processor = PullMessageProcessor(self)
        self.pull_hold = PullRequestHoldService(self.pull_processor.execute_when_wakeup)
        self._tasks: list[asyncio.Task[None]] = []
        self._register_pending = False
        self._stopping = False
        self.ha_server_addr = ""
        self.master_addr: str | None = None
        # broker.conf given with -c: UPDATE_BROKER_CONFIG writes changes back to it
        self.config_path: str | None = None
        self.metrics: BrokerMetrics | None = None
        # Replication: the master's HAService or the slave's HAClient (None otherwise);
        # both can be started and stopped on a live broker (role changes).
        self.ha_service: HAService | None = None
        self.ha_client: HAClient | None = None
        self.slave_sync = SlaveSynchronize(self)
        # Set by the failover side: () -> (epoch, epoch start offset); (0, -1) = none.
        self.epoch_provider: Callable[[], tuple[int, int]] | None = None
        # Extra HAService / HAClient arguments (controller mode: epochs, hooks).
        self.ha_service_options: dict[str, Any] = {}
        self.ha_client_options: dict[str, Any] = {}
        # Controller mode (automatic failover): the controller decides the role.
        self.controller_role = ControllerRole(self) if bc.controller_mode else None
        self._register_processors()

    # ------------------------------------------------------------------ wiring
    def _register_processors(self) -> None:
        s = self.server
        send = SendMessageProcessor(self)
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2,
                     RequestCode.SEND_BATCH_MESSAGE):
            s.register_processor(code, send.process)
        s.register_processor(RequestCode.CONSUMER_SEND_MSG_BACK, send.consumer_send_msg_back)
        s.register_processor(RequestCode.PULL_MESSAGE, self.pull_processor.process)
        s.register_processor(RequestCode.LITE_PULL_MESSAGE, self.pull_processor.process)
        q = QueryMessageProcessor(self)
        s.register_processor(RequestCode.QUERY_MESSAGE, q.query_message)
        s.register_processor(RequestCode.VIEW_MESSAGE_BY_ID, q.view_message_by_id)
        cm = ConsumerManageProcessor(self)
        s.register_processor(RequestCode.GET_CONSUMER_LIST_BY_GROUP, cm.get_consumer_list_by_group)
        s.register_processor(RequestCode.UPDATE_CONSUMER_OFFSET, cm.update_consumer_offset)
        s.register_processor(RequestCode.QUERY_CONSUMER_OFFSET, cm.query_consumer_offset)
        cl = ClientManageProcessor(self)
        s.register_processor(RequestCode.HEART_BEAT, cl.heartbeat)
        s.register_processor(RequestCode.UNREGISTER_CLIENT, cl.unregister_client)
        s.register_processor(RequestCode.CHECK_CLIENT_CONFIG, cl.check_client_config)
        s.register_processor(RequestCode.END_TRANSACTION, EndTransactionProcessor(self).process)
        lk = LockProcessor(self)
        s.register_processor(RequestCode.LOCK_BATCH_MQ, lk.lock_batch_mq)
        s.register_processor(RequestCode.UNLOCK_BATCH_MQ, lk.unlock_batch_mq)
        a = AdminBrokerProcessor(self)
        for code, fn in ((RequestCode.GET_MAX_OFFSET, a.get_max_offset),
                         (RequestCode.GET_MIN_OFFSET, a.get_min_offset),
                         (RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, a.search_offset_by_timestamp),
                         (RequestCode.GET_EARLIEST_MSG_STORETIME, a.get_earliest_msg_storetime),
                         (RequestCode.UPDATE_AND_CREATE_TOPIC, a.update_and_create_topic),
                         (RequestCode.GET_ALL_TOPIC_CONFIG, a.get_all_topic_config),
                         (RequestCode.GET_ALL_CONSUMER_OFFSET, a.get_all_consumer_offset),
                         (RequestCode.GET_ALL_DELAY_OFFSET, a.get_all_delay_offset),
                         (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
                          a.get_all_subscription_group),
                         (RequestCode.GET_BROKER_HA_STATUS, a.get_broker_ha_status),
                         (RequestCode.GET_TOPIC_STATS_INFO, a.get_topic_stats_info),
                         (RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, a.query_topic_consume_by_who),
                         (RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, a.reset_offset),
                         (RequestCode.GET_BROKER_RUNTIME_INFO, a.get_broker_runtime_info)):
            s.register_processor(code, fn)
        ops = self.admin_ops = AdminOpsProcessor(self)
        for code, fn in ((RequestCode.DELETE_TOPIC_IN_BROKER, ops.delete_topic),
                         (RequestCode.GET_CONSUME_STATS, ops.get_consume_stats),
                         (RequestCode.GET_CONSUMER_CONNECTION_LIST, ops.get_consumer_connection_list),
                         (RequestCode.GET_PRODUCER_CONNECTION_LIST, ops.get_producer_connection_list),
                         (RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                          ops.update_and_create_subscription_group),
                         (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
                          ops.get_all_subscription_group_config),
                         (RequestCode.DELETE_SUBSCRIPTIONGROUP, ops.delete_subscription_group),
                         (RequestCode.UPDATE_BROKER_CONFIG, ops.update_broker_config),
                         (RequestCode.GET_BROKER_CONFIG, ops.get_broker_config)):
            s.register_processor(code, fn)
        s.on_connection_closed(self._on_connection_closed)

    def _on_connection_closed(self, conn) -> None:
        self.consumers.on_channel_closed(conn)
        self.producers.on_channel_closed(conn)
        self.pull_hold.drop_connection(conn)

    def _on_consumer_group_event(self, event: str, group: str,
                                 channels: list[ClientChannelInfo]) -> None:
        if event != CHANGE or not self.broker_config.notifyConsumerIdsChangedEnable:
            return
        for c in channels:
            if getattr(c.conn, "closed", False):
                continue
            cmd = RemotingCommand(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                  ext_fields={"consumerGroup": group})
            try:
                c.conn.send_oneway(cmd)
            except Exception as e:  # a dying connection must not break the heartbeat
                log.warning("notify consumer ids changed to %s (%s) failed: %s",
                            c.client_id, c.conn.remote_address, e)

    def _on_message_arriving(self, topic: str, queue_id: int, max_offset: int) -> None:
        self.pull_hold.notify_message_arriving(topic, queue_id, max_offset)

    # ------------------------------------------------------------------ properties
    @property
    def broker_addr(self) -> str:
        return f"{self.broker_config.brokerIP1}:{self.server.port}"

    @property
    def ha_addr(self) -> str:
        return f"{self.broker_config.brokerIP2}:{self.store_config.haListenPort}"

    # ------------------------------------------------------------------ replication
    def _epoch(self) -> tuple[int, int]:
        return self.epoch_provider() if self.epoch_provider is not None else (0, -1)

    async def start_ha_service(self) -> HAService:
        """Master: accept slaves on haListenPort (idempotent). A SYNC_MASTER's puts then
        wait for a slave's ack."""
        assert self.store is not None
        svc = self.ha_service
        if svc is None:
            bc = self.broker_config
            svc = HAService(self.store, cluster=bc.brokerClusterName, broker_name=bc.brokerName,
                            host=self.listen_host, port=self.store_config.haListenPort,
                            epoch_provider=self._epoch, **self.ha_service_options)
            self.ha_service = svc
        await svc.start()
        self.store_config.haListenPort = svc.port
        if self.store_config.brokerRole == BrokerRole.SYNC_MASTER:
            self.store.replica_waiter = svc.replica_waiter
        return svc

    async def stop_ha_service(self) -> None:
        svc = self.ha_service
        if svc is None:
            return
        if self.store is not None and self.store.replica_waiter == svc.replica_waiter:
            self.store.replica_waiter = None
        self.ha_service = None
        await svc.stop()

    async def start_ha_client(self, master_ha_addr: str | None = None) -> HAClient:
        """Slave: replicate from the master (haMasterAddress, else the NameServer's
        answer); idempotent."""
        assert self.store is not None
        client = self.ha_client
        if client is None:
            bc = self.broker_config
            client = HAClient(self.store, cluster=bc.brokerClusterName,
                              broker_name=bc.brokerName, broker_id=bc.brokerId,
                              epoch_provider=self._epoch, **self.ha_client_options)
            self.ha_client = client
        addr = master_ha_addr or self.store_config.haMasterAddress or self.ha_server_addr
        if addr:
            client.update_master_address(addr)
        await client.start()
        return client

    async def stop_ha_client(self) -> None:
        client = self.ha_client
        if client is None:
            return
        self.ha_client = None
        await client.stop()

    def ha_runtime_info(self) -> dict[str, Any]:
        role = self.store_config.brokerRole
        if self.ha_service is not None:
            info = self.ha_service.runtime_info()
        elif self.ha_client is not None:
            info = self.ha_client.runtime_info()
        else:
            info = {"master": role != BrokerRole.SLAVE, "inSyncSlaveNums": 0,
                    "haConnectionInfo": [], "haClientRuntimeInfo": {}}
        st = self.store
        info["masterCommitLogMaxOffset"] = info.get("masterCommitLogMaxOffset") or (
            st.max_phy_offset if st is not None and role != BrokerRole.SLAVE else 0)
        epoch, start = self._epoch()
        info.update({"brokerRole": role.value, "brokerName": self.broker_config.brokerName,
                     "brokerId": self.broker_config.brokerId, "epoch": epoch,
                     "haServerAddr": self.ha_addr if self.ha_service is not None else "",
                     "epochStartOffset": start,
                     "commitLogMaxOffset": st.max_phy_offset if st is not None else 0,
                     "dispatchBehindBytes": st.dispatch_behind_bytes if st is not None else 0})
        return info

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        bc = self.broker_config
        self.topics.load()
        self.offsets.load()
        self.subscriptions.load()
        await self.server.start()
        if bc.listenPort == 0:
            bc.listenPort = self.server.port
        self.store_host = pack_host(bc.brokerIP1, self.server.port)
        self.store = MessageStore(self.store_config, (bc.brokerIP1, self.server.port),
                                  arriving_listener=self._on_message_arriving)
        try:
            self.store.load()
            await self.store.start()
        except BaseException:
            await self.server.stop()
            raise
        self.schedule = ScheduleMessageService(
            self.store, self.store_config.delay_levels_ms, self.store_config.config_dir,
            self.store_config.flushDelayOffsetInterval)
        self.schedule.load()
        if self.controller_role is not None:
            await self.controller_role.start()
        elif self.store_config.brokerRole != BrokerRole.SLAVE:
            self.schedule.start()
            self.transactions.start()
            await self.start_ha_service()
        else:
            await self.start_ha_client()
        self.topics.on_change = self.schedule_register
        self.subscriptions.on_change = self.schedule_persist
        # Adopted RocketMQ JSON metadata becomes msgpack right away.
        for mgr in (self.topics, self.offsets, self.subscriptions, self.schedule):
            if mgr.dirty:
                await mgr.persist()
        await self.register_broker_all()
        loop = asyncio.get_running_loop()
        period = min(max(bc.registerNameServerPeriod, 10_000), 60_000) / 1000
        self._tasks = [
            loop.create_task(self._every(period, self.register_broker_all), name="register"),
            loop.create_task(self._every(bc.flushConsumerOffsetInterval / 1000, self.persist_metadata),
                             name="persist"),
            loop.create_task(self._every(10, self._scan_channels), name="scan-channels"),
            loop.create_task(self._every(1, self._tick), name="tps"),
        ]
        if bc.metricsPromExporterPort:
            self.metrics = BrokerMetrics(self)
            self.metrics.start()
        if self.controller_role is not None or self.store_config.brokerRole == BrokerRole.SLAVE:
            if self.controller_role is None:
                await self.slave_sync.sync_all()
            # (controller mode: it runs whenever the broker is a slave)
            self._tasks.append(loop.create_task(
                self._every(max(bc.slaveSyncInterval, 100) / 1000, self._slave_sync),
                name="slave-sync"))
        self.stats.boot_timestamp = int(time.time() * 1000)
        log.info("The broker[%s, %s] boot success. serializeType=JSON and name server is %s",
                 bc.brokerName, self.broker_addr, bc.namesrvAddr or "(none)")

    async def _every(self, seconds: float, fn: Callable[[], Any]) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                r = fn()
                if asyncio.iscoroutine(r):
                    await r
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("periodic task %s failed", getattr(fn, "__name__", fn))

    def _tick(self) -> None:
        self.tps.tick()
        self.admin_ops.tick()

    async def _slave_sync(self) -> None:
        if self.store_config.brokerRole == BrokerRole.SLAVE:
            await self.slave_sync.sync_all()

    def _scan_channels(self) -> None:
        self.consumers.scan_not_active()
        self.producers.scan_not_active()

    async def persist_metadata(self) -> None:
        for mgr in (self.offsets, self.topics, self.subscriptions):
            if mgr.dirty:
                await mgr.persist()

    def schedule_persist(self) -> None:
        """Subscription group changes are written at once, as RocketMQ does."""
        if not self._stopping:
            asyncio.get_running_loop().create_task(self.persist_metadata())

    def schedule_register(self) -> None:
        """Topic changes re-register at once (coalesced)."""
        if self._register_pending or self._stopping:
            return
        self._register_pending = True

        async def run() -> None:
            self._register_pending = False
            if self.topics.dirty:
                # RocketMQ persists topics.json on every topic change: a topic created by
                # a send must survive a crash, or its acked messages cannot be pulled.
                try:
                    await self.topics.persist()
                except OSError as e:
                    log.error("persisting %s failed: %s", self.topics.file.path, e)
            await self.register_broker_all()

        asyncio.get_running_loop().create_task(run())

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
            bc.namesrv_addrs, cluster=bc.brokerClusterName, broker_addr=self.broker_addr,
            broker_name=bc.brokerName, broker_id=bc.brokerId, ha_server_addr=self.ha_addr,
            wrapper=wrapper, compressed=bc.compressedRegister,
            timeout_ms=bc.registerBrokerTimeoutMills)
        for r in results:
            # (in controller mode the controller's answer names the master, not this)
            if self.store_config.brokerRole == BrokerRole.SLAVE and self.controller_role is None:
                if r.master_addr:
                    self.master_addr = r.master_addr
                if r.ha_server_addr:
                    self.ha_server_addr = r.ha_server_addr
                    # RocketMQ: the NameServer's answer only when haMasterAddress is unset
                    if self.ha_client is not None and not self.store_config.haMasterAddress:
                        self.ha_client.update_master_address(r.ha_server_addr)
            if r.order_topics:
                self.topics.update_order_topic_config(r.order_topics)

    async def shutdown(self) -> None:
        """Stop accepting, answer parked pulls, unregister, flush and persist (within 10 s)."""
        if self._stopping:
            return
        self._stopping = True
        bc = self.broker_config
        log.info("broker %s (%s) shutting down", bc.brokerName, self.broker_addr)
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        if self.controller_role is not None:
            await self.controller_role.shutdown()
        self.pull_hold.wake_all()
        if self.metrics is not None:
            await self.metrics.stop()
        if bc.namesrv_addrs:
            try:
                await asyncio.wait_for(self.outer_api.unregister_broker_all(
                    bc.namesrv_addrs, cluster=bc.brokerClusterName, broker_addr=self.broker_addr,
                    broker_name=bc.brokerName, broker_id=bc.brokerId), 3)
            except asyncio.TimeoutError:
                log.warning("unregistering from the NameServers timed out")
        await self.server.stop()
        await self.stop_ha_client()
        await self.stop_ha_service()
        await self.transactions.shutdown()
        if self.schedule is not None:
            await self.schedule.shutdown()
        if self.store is not None:
            await self.store.shutdown()
        for mgr in (self.offsets, self.topics, self.subscriptions):
            try:
                await mgr.persist()
            except OSError as e:
                log.error("persisting %s failed: %s", mgr.file.path, e)
        await self.namesrv_client.close()
        log.info("broker %s shut down cleanly", bc.brokerName)
