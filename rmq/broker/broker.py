"""Broker: ASSEMBLY ONLY. Builds the store, the metadata managers, the processors, the role
services (HA, schedule, transaction check, slave sync: rmq/broker/roles.py), controller
mode (rmq/broker/controller_role.py) and registration, hands each part the narrow
capabilities it uses (rmq/broker/seams.py), and starts / stops them in order.

Only the CLIs import this module; every other part sees the protocols, never the Broker.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from rmq.broker.client_manager import ConsumerIdsChangeNotifier, ConsumerManager, ProducerManager
from rmq.broker.config import BrokerConfig
from rmq.broker.controller_role import ControllerRole, FailoverEpochs
from rmq.broker.locks import RebalanceLockManager
from rmq.broker.master_lease import UNFENCED, WriteFence
from rmq.broker.metadata import MetadataPersistence
from rmq.broker.metrics import BrokerMetrics
from rmq.broker.offsets import ConsumerOffsetManager
from rmq.broker.outer_api import BrokerOuterAPI, outer_client
from rmq.broker.pop.assembly import PopComponents
from rmq.broker.processors.acl_admin import AclAdminProcessor
from rmq.broker.processors.admin import AdminBrokerProcessor
from rmq.broker.processors.admin_ops import AdminOpsProcessor
from rmq.broker.processors.client_manage import ClientManageProcessor
from rmq.broker.processors.consumer_call import ConsumerCallProcessor
from rmq.broker.processors.consumer_manage import ConsumerManageProcessor
from rmq.broker.processors.end_transaction import EndTransactionProcessor
from rmq.broker.processors.failsafe import FailsafeCheckProcessor
from rmq.broker.processors.lock import LockProcessor
from rmq.broker.processors.pull import PullMessageProcessor
from rmq.broker.processors.query import QueryMessageProcessor
from rmq.broker.processors.role_notice import RoleChangeNoticeProcessor
from rmq.broker.processors.send import SendMessageProcessor
from rmq.broker.processors.stats import BrokerStatsProcessor
from rmq.broker.processors.store_admin import StoreAdminProcessor
from rmq.broker.processors.timer_check import TimerCheckProcessor
from rmq.broker.pull_hold import PullRequestHoldService
from rmq.broker.registration import BrokerRegistration
from rmq.broker.roles import RoleServices
from rmq.broker.runtime_info import BrokerRuntimeInfo, stats_sampler
from rmq.broker.schedule import ScheduleMessageService
from rmq.broker.slave_sync import SlaveSynchronize, SlaveSyncService
from rmq.broker.stats import BrokerStats, BrokerStatsManager
from rmq.broker.subscriptions import SubscriptionGroupManager
from rmq.broker.timer import TIMER_TOPIC, TimerHook, TimerMessageService, timer_topic_config
from rmq.broker.topics import TopicConfigManager
from rmq.broker.transaction import TransactionalMessageService
from rmq.common.clock import now_ms
from rmq.protocol.codes import RequestCode
from rmq.protocol.message import pack_host
from rmq.remoting.acl_guard import AclGuard, AclReloadService, acl_home, load_acl_set
from rmq.remoting.server import RemotingServer
from rmq.remoting.tls import outbound_context
from rmq.runtime.service import PeriodicService
from rmq.store.config import BrokerRole, MessageStoreConfig
from rmq.store.message_store import MessageStore

log = logging.getLogger("rmq.broker")
acl_log = logging.getLogger("rmq.broker.acl")


class Broker:
    def __init__(
        self,
        broker_config: BrokerConfig,
        store_config: MessageStoreConfig,
        listen_host: str = "0.0.0.0",
        config_path: str | None = None,
    ) -> None:
        self.broker_config = bc = broker_config
        self.store_config = sc = store_config
        self.listen_host = listen_host
        # Controller mode: brokerRole names the role this broker takes while it leads;
        # the store starts as a SLAVE (refusing writes) until the controller decides.
        lead_role = sc.brokerRole
        if bc.controller_mode:
            sc.brokerRole = BrokerRole.SLAVE
        cfg_dir = sc.config_dir

        # ---- metadata and clients
        self.stats = BrokerStats()
        self.sampler = stats_sampler(self.stats)
        # VIEW_BROKER_STATS_DATA's items over the same counters (sampled on its own loop)
        self.stats_items = BrokerStatsManager(self.stats, bc.brokerClusterName)
        self.topics = TopicConfigManager(
            cfg_dir,
            bc.brokerClusterName,
            bc.brokerName,
            bc.defaultTopicQueueNums,
            bc.autoCreateTopicEnable,
            bc.clusterTopicEnable,
            bc.brokerTopicEnable,
            len(sc.delay_levels_ms),
            bc.msgTraceTopicName if bc.traceTopicEnable else None,
        )
        self.offsets = ConsumerOffsetManager(cfg_dir)
        self.subscriptions = SubscriptionGroupManager(cfg_dir, bc.autoCreateSubscriptionGroup)
        self.consumers = ConsumerManager(
            ConsumerIdsChangeNotifier(lambda: bc.notifyConsumerIdsChangedEnable), bc.channelNotActiveInterval
        )
        self.producers = ProducerManager(bc.channelNotActiveInterval)
        self.locks = RebalanceLockManager()

        # ---- network
        self.server = RemotingServer(listen_host, bc.listenPort, name=f"broker-{bc.brokerName}", tls=bc.tls)
        # signs with innerClientAuthenticationCredentials (registration, controller, slave
        # sync); TLS when tls.enable, else when the server mode is enforcing (BrokerStartup)
        self.namesrv_client = outer_client(bc.inner_credential, outbound_context(bc.tls))
        self.outer_api = BrokerOuterAPI(self.namesrv_client)

        # ---- the store (loaded and started in start(); its host once the port is bound)
        self.pull_hold = PullRequestHoldService()
        self.store = MessageStore(
            sc, (bc.brokerIP1, bc.listenPort), arriving_listener=self.pull_hold.notify_message_arriving
        )
        self._store_loaded = False
        self.schedule = ScheduleMessageService(self.store, sc.delay_levels_ms, cfg_dir, sc.flushDelayOffsetInterval)
        self.transactions = TransactionalMessageService(bc, self.store, self.topics, self.offsets, self.producers)

        # timer messages (rmq/broker/timer.py): the put hook below, delivery on the master
        self.timer = TimerMessageService(self.store, cfg_dir, bc.timerPrecisionMs)

        # ---- roles, replication, registration
        self.slave_sync = SlaveSynchronize(
            self.namesrv_client, bc, self.topics, self.offsets, self.schedule, self.subscriptions, self.timer
        )
        self.epochs = FailoverEpochs(self.store, sc.storePathRootDir) if bc.controller_mode else None
        self.roles = RoleServices(
            bc, sc, self.store, listen_host, self.schedule, self.transactions, self.slave_sync, self.epochs
        )
        self.topics.table.setdefault(TIMER_TOPIC, timer_topic_config())
        self.roles.master_services.append(self.timer)
        self.registration = BrokerRegistration(bc, sc, self.outer_api, self.topics, self.roles.on_register_result)
        self.metadata = MetadataPersistence(self.topics, self.offsets, self.subscriptions)
        # Controller mode (automatic failover): the controller decides the role.
        self.controller_role = (
            ControllerRole(
                bc,
                sc,
                lead_role,
                listen_host,
                self.store,
                self.roles,
                self.epochs,
                self.namesrv_client,
                self.registration.register_broker_all,
            )
            if self.epochs is not None
            else None
        )
        self.metrics: BrokerMetrics | None = None
        # aclEnable: made in start(), where the files are read (a broken one stops the start)
        self.acl_guard: AclGuard | None = None
        self.acl_reload: AclReloadService | None = None

        # ---- processors
        self.runtime_info = BrokerRuntimeInfo(
            self.stats, self.sampler, self.store, sc, bc, self.server.stats, lambda: self.schedule.offset_table
        )
        self.pull_processor = PullMessageProcessor(
            bc,
            sc,
            self.store,
            self.topics,
            self.subscriptions,
            self.consumers,
            self.offsets,
            self.stats,
            self.pull_hold,
        )
        self.pull_hold.execute_when_wakeup = self.pull_processor.execute_when_wakeup
        self.admin_ops = AdminOpsProcessor(
            bc,
            sc,
            self.store,
            self.topics,
            self.offsets,
            self.subscriptions,
            self.consumers,
            self.producers,
            self.stats_items,
            self.metadata,
            self.registration,
            config_path,
        )
        self._register_processors()

        # ---- background chores
        self.slave_sync_service = SlaveSyncService(self.slave_sync, sc)

        def tick() -> None:
            self.sampler.tick()

        def scan_channels() -> None:
            self.consumers.scan_not_active()
            self.producers.scan_not_active()

        self._loops = [
            PeriodicService("register", self.registration.period, self.registration.register_broker_all, log),
            PeriodicService("persist", bc.flushConsumerOffsetInterval / 1000, self.metadata.persist_metadata, log),
            PeriodicService("scan-channels", 10, scan_channels, log),
            PeriodicService("tps", 1, tick, log),
            self.stats_items.service,
        ]
        self._stopping = False

    # ------------------------------------------------------------------ wiring
    def _register_processors(self) -> None:
        s = self.server
        bc, sc = self.broker_config, self.store_config
        # controller mode: a master writes under its lease; static roles are not fenced
        cr = self.controller_role
        fence: WriteFence = cr.lease if cr is not None else UNFENCED
        send = SendMessageProcessor(
            bc, self.store, self.topics, self.subscriptions, self.stats, self.transactions.prepare, fence
        )
        timer_hook = TimerHook(bc.timerWheelEnable, bc.timerMaxDelaySec, bc.timerPrecisionMs)
        send.timer_hook = timer_hook
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            s.register_processor(code, send.process)
        s.register_processor(RequestCode.CONSUMER_SEND_MSG_BACK, send.consumer_send_msg_back)
        # POP (5.x): its revive loop is master only
        t, o, g = self.topics, self.offsets, self.subscriptions
        self.pop = PopComponents(bc, sc.config_dir, self.store, t, o, g, g, self.pull_hold, fence, self.stats)
        self.pop.register(s)
        self.roles.master_services.append(self.pop.revive)
        s.register_processor(RequestCode.PULL_MESSAGE, self.pull_processor.process)
        s.register_processor(RequestCode.LITE_PULL_MESSAGE, self.pull_processor.process)
        q = QueryMessageProcessor(sc, self.store)
        s.register_processor(RequestCode.QUERY_MESSAGE, q.query_message)
        s.register_processor(RequestCode.VIEW_MESSAGE_BY_ID, q.view_message_by_id)
        cm = ConsumerManageProcessor(self.store, self.offsets, self.consumers)
        s.register_processor(RequestCode.GET_CONSUMER_LIST_BY_GROUP, cm.get_consumer_list_by_group)
        s.register_processor(RequestCode.UPDATE_CONSUMER_OFFSET, cm.update_consumer_offset)
        s.register_processor(RequestCode.QUERY_CONSUMER_OFFSET, cm.query_consumer_offset)
        cl = ClientManageProcessor(self.topics, self.subscriptions, self.consumers, self.producers)
        s.register_processor(RequestCode.HEART_BEAT, cl.heartbeat)
        s.register_processor(RequestCode.UNREGISTER_CLIENT, cl.unregister_client)
        s.register_processor(RequestCode.CHECK_CLIENT_CONFIG, cl.check_client_config)
        end_tx = EndTransactionProcessor(sc, self.store, self.transactions, fence, timer_hook)
        s.register_processor(RequestCode.END_TRANSACTION, end_tx.process)
        if cr is not None:
            s.register_processor(RequestCode.RMQ_FAILSAFE_CHECK, FailsafeCheckProcessor(cr).process)
            s.register_processor(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, RoleChangeNoticeProcessor(cr.kick).process)
        lk = LockProcessor(self.locks)
        s.register_processor(RequestCode.LOCK_BATCH_MQ, lk.lock_batch_mq)
        s.register_processor(RequestCode.UNLOCK_BATCH_MQ, lk.unlock_batch_mq)
        ops = self.admin_ops
        sa = StoreAdminProcessor(self.store, self.store.cleaner.commitlog_service, self.topics, self.consumers)
        a = AdminBrokerProcessor(
            bc,
            self.store,
            self.topics,
            self.offsets,
            self.subscriptions,
            self.consumers,
            self.schedule,
            self.metadata,
            self.registration,
            self.roles,
            self.runtime_info,
        )
        for code, fn in (
            (RequestCode.GET_MAX_OFFSET, a.get_max_offset),
            (RequestCode.GET_MIN_OFFSET, a.get_min_offset),
            (RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, a.search_offset_by_timestamp),
            (RequestCode.GET_EARLIEST_MSG_STORETIME, a.get_earliest_msg_storetime),
            (RequestCode.UPDATE_AND_CREATE_TOPIC, a.update_and_create_topic),
            (RequestCode.GET_ALL_TOPIC_CONFIG, a.get_all_topic_config),
            (RequestCode.GET_ALL_CONSUMER_OFFSET, a.get_all_consumer_offset),
            (RequestCode.GET_ALL_DELAY_OFFSET, a.get_all_delay_offset),
            (RequestCode.GET_TIMER_CHECK_POINT, TimerCheckProcessor(self.timer).get_timer_check_point),
            (RequestCode.GET_BROKER_HA_STATUS, a.get_broker_ha_status),
            (RequestCode.GET_TOPIC_STATS_INFO, a.get_topic_stats_info),
            (RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, a.query_topic_consume_by_who),
            (RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, a.reset_offset),
            (RequestCode.GET_BROKER_RUNTIME_INFO, a.get_broker_runtime_info),
            (RequestCode.DELETE_TOPIC_IN_BROKER, ops.delete_topic),
            (RequestCode.GET_CONSUME_STATS, ops.get_consume_stats),
            (RequestCode.GET_BROKER_CONSUME_STATS, ops.get_broker_consume_stats),
            (RequestCode.GET_CONSUMER_CONNECTION_LIST, ops.get_consumer_connection_list),
            (RequestCode.GET_PRODUCER_CONNECTION_LIST, ops.get_producer_connection_list),
            (RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, ops.update_and_create_subscription_group),
            (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, ops.get_all_subscription_group_config),
            (RequestCode.DELETE_SUBSCRIPTIONGROUP, ops.delete_subscription_group),
            (RequestCode.UPDATE_BROKER_CONFIG, ops.update_broker_config),
            (RequestCode.GET_BROKER_CONFIG, ops.get_broker_config),
            (RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE, sa.clean_expired_consume_queue),
            (RequestCode.CLEAN_UNUSED_TOPIC, sa.clean_unused_topic),
            (RequestCode.DELETE_EXPIRED_COMMITLOG, sa.delete_expired_commitlog),
            (RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER, sa.get_system_topic_list),
            (RequestCode.QUERY_CONSUME_QUEUE, sa.query_consume_queue),
            (RequestCode.GET_ALL_PRODUCER_INFO, ops.get_all_producer_info),
            (RequestCode.VIEW_BROKER_STATS_DATA, BrokerStatsProcessor(self.stats_items).view_broker_stats_data),
        ):
            s.register_processor(code, fn)
        calls = ConsumerCallProcessor(bc.brokerName, self.store, self.consumers)
        s.register_processor(RequestCode.GET_CONSUMER_RUNNING_INFO, calls.get_consumer_running_info)
        s.register_processor(RequestCode.CONSUME_MESSAGE_DIRECTLY, calls.consume_message_directly)
        # codes 50-53 (54 stays unregistered: REQUEST_CODE_NOT_SUPPORTED, as 4.9.8)
        for code, fn in AclAdminProcessor(acl_home(bc.rocketmqHome), bc, lambda: self.acl_guard).handlers():
            s.register_processor(code, fn)
        s.on_connection_closed(self._on_connection_closed)

    def _on_connection_closed(self, conn: Any) -> None:
        self.consumers.on_channel_closed(conn)
        self.producers.on_channel_closed(conn)
        self.pull_hold.drop_connection(conn)

    # ------------------------------------------------------------------ properties
    @property
    def broker_addr(self) -> str:
        return self.broker_config.broker_addr

    @property
    def config_path(self) -> str | None:
        """broker.conf given with -c: UPDATE_BROKER_CONFIG writes changes back to it."""
        return self.admin_ops.config_path

    def _auth_failures(self) -> dict[str, int]:
        """Refusals by reason: the ACL's requests and the HA port's handshakes."""
        counts = self.acl_guard.failure_counts() if self.acl_guard is not None else {}
        for reason, n in self.roles.ha_auth_failures.items():
            counts[reason] = counts.get(reason, 0) + n
        return counts

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        bc, sc = self.broker_config, self.store_config
        if bc.aclEnable:
            # First: an AclConfigError (file and line) stops the start before anything
            # is opened, and no request is served before the accounts are in force.
            home = acl_home(bc.rocketmqHome)
            self.acl_guard = AclGuard(
                await asyncio.to_thread(load_acl_set, home, acl_log), cluster=bc.inner_credential, logger=acl_log
            )
            self.server.set_auth_hook(self.acl_guard)
            self.acl_reload = AclReloadService(self.acl_guard, home)
            log.info(
                "ACL enabled: %d accounts from %d files under %s",
                len(self.acl_guard.acl.accounts),
                len(self.acl_guard.acl.files),
                home,
            )
        self.topics.load()
        self.offsets.load()
        await self.timer.load(self.offsets)  # config/timercheck (once: from the old offsets)
        self.subscriptions.load()
        self.pop.load()
        # The store first (recovery, then dispatch caught up), the port after: a
        # client connects once the broker can serve, never to a recovering one.
        self.store.load()
        await self.store.start()
        try:
            await self.server.start()
        except BaseException:
            await self.store.shutdown()
            raise
        if bc.listenPort == 0:
            bc.listenPort = self.server.port
        self.store.store_host = pack_host(bc.brokerIP1, self.server.port)
        self._store_loaded = True
        self.schedule.load()
        if self.controller_role is not None:
            await self.controller_role.start()
        else:
            await self.roles.start_static()
        self.topics.on_change = self.registration.schedule_register
        self.subscriptions.on_change = self.metadata.schedule_persist
        await self.metadata.persist_adopted(self.schedule)
        await self.registration.register_broker_all()
        for svc in self._loops:
            svc.start()
        self.pop.start()
        if self.acl_reload is not None:
            self.acl_reload.start()
        if bc.metricsPromExporterPort:
            self.metrics = BrokerMetrics(
                bc,
                sc,
                self.store,
                self.server,
                self.stats,
                self.topics,
                self.subscriptions,
                self.offsets,
                self.consumers,
                self.producers,
                self.roles,
                self._auth_failures,
                pop_figures=self.pop.figures,
                timer_figures=self.timer.figures,
            )
            self.metrics.start()
        if self.controller_role is not None or sc.brokerRole == BrokerRole.SLAVE:
            if self.controller_role is None:
                await self.slave_sync.sync_all()
            # (controller mode: it runs whenever the broker is a slave)
            self.slave_sync_service.start()
        self.stats.boot_timestamp = now_ms()
        log.info(
            "The broker[%s, %s] boot success. serializeType=JSON and name server is %s",
            bc.brokerName,
            self.broker_addr,
            bc.namesrvAddr or "(none)",
        )

    async def shutdown(self) -> None:
        """Stop accepting, answer parked pulls, unregister, flush and persist (within 10 s)."""
        if self._stopping:
            return
        self._stopping = True
        bc = self.broker_config
        log.info("broker %s (%s) shutting down", bc.brokerName, self.broker_addr)
        await self.registration.close()
        await self.metadata.close()
        for svc in (*self._loops, self.slave_sync_service):
            await svc.stop(cancel=True)
        if self.acl_reload is not None:
            await self.acl_reload.stop(cancel=True)
        if self.controller_role is not None:
            await self.controller_role.shutdown()
        self.pull_hold.wake_all()
        await self.pop.stop()
        if self.metrics is not None:
            await self.metrics.stop()
        await self.registration.unregister_broker_all()
        await self.server.stop()
        if self._store_loaded:
            await self.roles.shutdown()
            await self.store.shutdown()
        await self.metadata.persist_all()
        await self.namesrv_client.close()
        log.info("broker %s shut down cleanly", bc.brokerName)
