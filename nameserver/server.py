"""``NameServer``: RocketMQ 4.9.8's DefaultRequestProcessor on ``rmq.remoting``.

Routes, the broker registry and the KV store live in ``RouteInfoManager`` and
``KVConfigManager``; this module only decodes requests, calls them and encodes the
answers, plus two pieces of housekeeping: the broker expiry scan (every 10 s, first
after 5 s) and dropping the brokers of a connection that closed
(BrokerHousekeepingService).

Request headers the shared ``rmq.protocol.headers`` module does not model (the KV
and admin ones) are read straight from ext fields here, with the same rules: a
missing mandatory field or an unparsable number raises ``HeaderFieldError``, which the
remoting dispatcher answers (SYSTEM_ERROR naming the field, one warning per peer).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import zlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Generic, Protocol, TypeVar

from nameserver.config import NamesrvSettings
from nameserver.controller import CONTROLLER_FILE_NAME, ControllerConfig
from nameserver.controller.factory import build_controller_service
from nameserver.controller.service import ControllerService
from nameserver.kvconfig import NAMESPACE_ORDER_TOPIC_CONFIG, KVConfigManager
from nameserver.routes import RouteInfoManager
from nameserver.runtime_config import ConfigRefused, apply_update, check_update, config_properties
from rmq.auth.credentials import Credential
from rmq.auth.namesrv_rules import validate_namesrv
from rmq.common.clock import monotonic_ms
from rmq.common.context import ServingContext
from rmq.common.net import local_ip
from rmq.common.properties import PropertiesError, parse_properties_text, properties_text, rewrite_properties_file
from rmq.protocol.bodies import DataVersion, RegisterBrokerBody, TopicConfigSerializeWrapper
from rmq.protocol.codes import MQVersion, RequestCode, ResponseCode
from rmq.protocol.errors import ProtocolError
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import (
    GetRouteInfoRequestHeader,
    HeaderFieldError,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
    parse_long,
)
from rmq.remoting.acl_guard import AclGuard, AclReloadService, load_acl_set
from rmq.remoting.connection import Connection
from rmq.remoting.server import RemotingServer
from rmq.runtime.service import ServiceLoop

__all__ = ["NameServer", "TOPIC_NOT_EXIST_REMARK_SUFFIX", "FailoverRecorder"]


T = TypeVar("T")


class FailoverRecorder(Protocol):
    """Where the controller's failovers are counted (NameServerMetrics; no import back)."""

    def record_failover(self, cluster: str, broker_name: str) -> None: ...


logger = logging.getLogger("rmq.nameserver")
acl_logger = logging.getLogger("rmq.nameserver.acl")

#: FAQUrl.suggestTodo(FAQUrl.APPLY_TOPIC_URL), appended to the TOPIC_NOT_EXIST remark.
TOPIC_NOT_EXIST_REMARK_SUFFIX = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."

#: MQVersion.Version.V3_0_11: brokers older than this send a bare TopicConfigSerializeWrapper.
_V3_0_11 = 37

_Result = RemotingCommand | Awaitable[RemotingCommand]
_Handler = Callable[[Connection, RemotingCommand], _Result]


def _ext(cmd: RemotingCommand) -> Mapping[str, str]:
    return cmd.ext_fields or {}


def _required(cmd: RemotingCommand, name: str) -> str:
    value = _ext(cmd).get(name)
    if value is None:
        raise HeaderFieldError(name, "is null")
    return value


def _crc32(body: bytes | None) -> int:
    """``UtilAll.crc32``: CRC32 masked to 31 bits; 0 for no body."""
    return 0 if not body else zlib.crc32(body) & 0x7FFFFFFF


class _LiveSetting(Generic[T]):
    """A NameServer attribute that reads its NamesrvConfig key at every use (the server's
    ``settings.namesrv``), so a runtime config update takes effect at once."""

    def __init__(self, key: str) -> None:
        self.key = key

    def __get__(self, server: NameServer, owner: type[NameServer]) -> T:
        value: T = getattr(server.settings.namesrv, self.key)
        return value

    def __set__(self, server: NameServer, value: object) -> None:
        # read-only, as the properties it replaces were: the config is the one place
        raise AttributeError(f"set {self.key} in the NameServer's settings.namesrv")


class NameServer(ServingContext):
    """One NameServer. ``await start()``, ``.port``, ``await stop()``.

    ``accept_standard_json_only``: answer route data in standard JSON to every
    client, not only to those that ask for it (version >= V4_9_4 or the
    ``acceptStandardJsonOnly`` header). ``order_message_enable`` is NamesrvConfig's
    ``orderMessageEnable`` (default false, as in RocketMQ): only then does route
    data carry ``orderTopicConf`` from the ORDER_TOPIC_CONFIG KV namespace.
    ``kv_path`` None means RocketMQ's place, ``~/namesrv/`` (file kvConfig.msgpack).
    ``controller``: run the failover controller (``nameserver.controller``), its
    decisions kept in controller.msgpack next to the KV file.
    ``acl_home`` (aclEnable): the rocketmqHome whose conf/plain_acl.yml (+ conf/acl/**)
    holds the admin accounts that may change this NameServer; reads stay open
    (rmq/auth/namesrv_rules.py). ``cluster_credential``: accepted as such an account.

    ``settings``: the NamesrvConfig / NettyServerConfig / controller keys it runs with
    (``rmq namesrv -c``); the keyword options above, when given, are set on it. The
    server reads the live values from it, so UPDATE_NAMESRV_CONFIG changes them at once
    (``nameserver.runtime_config``) and writes them to its ``configStorePath``.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 9876,
        *,
        broker_expire_ms: int | None = None,
        scan_interval_ms: int | None = None,
        kv_path: str | os.PathLike[str] | None = None,
        accept_standard_json_only: bool | None = None,
        order_message_enable: bool | None = None,
        controller: ControllerConfig | None = None,
        acl_home: str | None = None,
        cluster_credential: Credential | None = None,
        settings: NamesrvSettings | None = None,
    ) -> None:
        self.settings = settings = settings if settings is not None else NamesrvSettings()
        cfg = settings.namesrv
        given = {
            "brokerExpiredTimeMillis": broker_expire_ms,
            "scanNotActiveBrokerInterval": scan_interval_ms,
            "kvConfigPath": None if kv_path is None else os.fspath(kv_path),
            "acceptStandardJsonOnly": accept_standard_json_only,
            "orderMessageEnable": order_message_enable,
        }
        for key, value in given.items():
            if value is not None:
                setattr(cfg, key, value)
        if cfg.brokerExpiredTimeMillis <= 0 or cfg.scanNotActiveBrokerInterval <= 0:
            raise ValueError("broker_expire_ms and scan_interval_ms must be positive")
        self.host = host
        self.routes = RouteInfoManager(monotonic_ms)
        self.kv = KVConfigManager(cfg.kv_path)
        self._config_write_lock = asyncio.Lock()
        self._remoting = RemotingServer(host, port, name="namesrv")
        # NameServerMetrics when /metrics is served (rmq namesrv --metrics-port);
        # the failover controller reports through metrics.record_failover.
        self.metrics: FailoverRecorder | None = None
        self._kv_write_lock = asyncio.Lock()
        self._scan = _BrokerExpiryScan(self)
        self._started = False
        self.controller: ControllerService | None = None
        if controller is not None:
            self.controller = build_controller_service(
                controller,
                None if self.kv.path is None else self.kv.path.parent / CONTROLLER_FILE_NAME,
                lambda: self.advertised_address,
                self._record_failover,
                cluster_credential,
            )
        # aclEnable: the accounts of <acl_home>/conf/plain_acl.yml (+ conf/acl/**) and the
        # cluster credential; loaded in start() (a broken file stops the start)
        self.acl_home = acl_home
        self.cluster_credential = cluster_credential
        self.acl_guard: AclGuard | None = None
        self.acl_reload: AclReloadService | None = None
        for code, handler in self._handlers().items():
            self._remoting.register_processor(code, self._guard(code, handler))
        self._remoting.on_connection_closed(self._on_connection_closed)

    # ------------------------------------------------------------------ lifecycle
    @property
    def port(self) -> int:
        """The bound port once started (the requested one before)."""
        return self._remoting.port

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def remoting(self) -> RemotingServer:
        return self._remoting

    # live settings (UPDATE_NAMESRV_CONFIG changes them while the server runs)
    broker_expire_ms = _LiveSetting[int]("brokerExpiredTimeMillis")
    scan_interval_ms = _LiveSetting[int]("scanNotActiveBrokerInterval")
    accept_standard_json_only = _LiveSetting[bool]("acceptStandardJsonOnly")
    order_message_enable = _LiveSetting[bool]("orderMessageEnable")

    @property
    def scan_initial_delay_ms(self) -> int:
        # RocketMQ: first scan 5 s after start, then every 10 s; keep the ratio.
        return self.scan_interval_ms // 2

    async def start(self) -> None:
        if self._started:
            raise RuntimeError("NameServer already started")
        if self.acl_home is not None:
            # before the port opens: no request is served before the accounts are in force
            acl = await asyncio.to_thread(load_acl_set, self.acl_home, acl_logger)
            self.acl_guard = AclGuard(acl, rule=validate_namesrv, cluster=self.cluster_credential, logger=acl_logger)
            self._remoting.set_auth_hook(self.acl_guard)
            self.acl_reload = AclReloadService(self.acl_guard, self.acl_home)
        await asyncio.to_thread(self.kv.load)
        await self._remoting.start()
        self._started = True
        if self.controller is not None:
            try:
                await self.controller.start()
            except BaseException:
                await self._remoting.stop()
                self._started = False
                raise
        if self.acl_reload is not None and self.acl_guard is not None:
            self.acl_reload.start()
            acl_logger.info(
                "ACL enabled: %d accounts from %d files under %s%s; writes need an admin account",
                len(self.acl_guard.acl.accounts),
                len(self.acl_guard.acl.files),
                self.acl_home,
                " and the cluster credential" if self.cluster_credential is not None else "",
            )
        self._scan = _BrokerExpiryScan(self)
        self._scan.start()
        logger.info(
            "NameServer started on %s (broker expiry %d ms, scan every %d ms, KV %s)",
            self.address,
            self.broker_expire_ms,
            self.scan_interval_ms,
            self.kv.path,
        )

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        if self.acl_reload is not None:
            await self.acl_reload.stop(cancel=True)
        await self._scan.stop()
        if self.controller is not None:
            await self.controller.stop()
        await self._remoting.stop()
        # A KV write in flight finishes before we return: the file is never half-updated
        # anyway (atomic rename), but the caller may want the last change on disk.
        async with self._kv_write_lock:
            pass
        logger.info("NameServer stopped (%s)", self.address)

    # ------------------------------------------------------------------ housekeeping
    def scan_not_active_broker(self) -> int:
        """One expiry pass; closes the connections of the brokers dropped."""
        removed = self.routes.scan_not_active_broker(monotonic_ms(), self.broker_expire_ms)
        for r in removed:
            conn = r.conn_id
            if isinstance(conn, Connection) and not conn.closed:
                logger.info(
                    "closing the expired broker's connection: addr=%s remote=%s", r.broker_addr, conn.remote_address
                )
                conn.close()
        return len(removed)

    def _on_connection_closed(self, conn: Connection) -> None:
        removed = self.routes.on_channel_destroy(conn)
        if removed:
            logger.info("connection %s closed, brokers removed: %s", conn.remote_address, ", ".join(removed))

    async def _persist_kv(self) -> None:
        # One writer at a time, and the snapshot is taken under the lock: the file
        # always ends with the latest table, whatever the order threads finish in.
        async with self._kv_write_lock:
            await asyncio.to_thread(self.kv.write_file, self.kv.snapshot())

    # ------------------------------------------------------------------ controller
    @property
    def advertised_address(self) -> str:
        """Where other controllers reach this one (a wildcard bind is not an address)."""
        host = self.host if self.host not in ("0.0.0.0", "::", "") else local_ip()
        return f"{host}:{self.port}"

    async def scan_controller(self) -> None:
        """One controller pass (tests drive it by hand)."""
        assert self.controller is not None
        await self.controller.scan()

    async def _broker_heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        assert self.controller is not None
        # RocketMQ 5: a broker heartbeat also keeps its registration alive
        broker_addr = (cmd.ext_fields or {}).get("brokerAddr")
        if broker_addr:
            self.routes.update_broker_info_update_timestamp(broker_addr)
        return await self.controller.heartbeat(cmd)

    async def _elect_master(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        assert self.controller is not None
        return await self.controller.elect_master(cmd, conn.remote_address)

    async def _get_sync_state_data(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        assert self.controller is not None
        return await self.controller.sync_state_data(cmd)

    async def _get_controller_metadata(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """RocketMQ 5's GET_CONTROLLER_METADATA_INFO header fields, and this controller's
        whole view as a JSON body (rmq admin controllerStatus)."""
        assert self.controller is not None
        view = await self.controller.status()
        ext = {"isLeader": "true" if view["isLeader"] else "false"}
        if view.get("leader"):
            ext["controllerLeaderAddress"] = view["leader"]
        return cmd.create_response(ResponseCode.SUCCESS, ext_fields=ext, body=json.dumps(view).encode())

    # ------------------------------------------------------------------ dispatch
    def _record_failover(self, cluster: str, broker_name: str) -> None:
        if self.metrics is not None:
            self.metrics.record_failover(cluster, broker_name)

    def _handlers(self) -> dict[int, _Handler]:
        handlers = self._route_handlers()
        if self.controller is not None:
            handlers[RequestCode.BROKER_HEARTBEAT] = self._broker_heartbeat
            handlers[RequestCode.CONTROLLER_ELECT_MASTER] = self._elect_master
            handlers[RequestCode.CONTROLLER_GET_SYNC_STATE_DATA] = self._get_sync_state_data
            handlers[RequestCode.CONTROLLER_GET_METADATA_INFO] = self._get_controller_metadata
        return handlers

    def _route_handlers(self) -> dict[int, _Handler]:
        return {
            RequestCode.PUT_KV_CONFIG: self._put_kv_config,
            RequestCode.GET_KV_CONFIG: self._get_kv_config,
            RequestCode.DELETE_KV_CONFIG: self._delete_kv_config,
            RequestCode.QUERY_DATA_VERSION: self._query_data_version,
            RequestCode.REGISTER_BROKER: self._register_broker,
            RequestCode.UNREGISTER_BROKER: self._unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self._get_route_info_by_topic,
            RequestCode.GET_BROKER_CLUSTER_INFO: self._get_broker_cluster_info,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self._wipe_write_perm_of_broker,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self._add_write_perm_of_broker,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self._get_all_topic_list,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self._delete_topic_in_namesrv,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self._get_kv_list_by_namespace,
            RequestCode.GET_TOPICS_BY_CLUSTER: self._get_topics_by_cluster,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: self._get_system_topic_list,
            RequestCode.GET_UNIT_TOPIC_LIST: self._get_unit_topic_list,
            RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST: self._get_has_unit_sub_topic_list,
            RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: self._get_has_unit_sub_ununit_topic_list,
            RequestCode.GET_NAMESRV_CONFIG: self._get_namesrv_config,
            RequestCode.UPDATE_NAMESRV_CONFIG: self._update_namesrv_config,
        }

    @staticmethod
    def _guard(code: int, handler: _Handler) -> _Handler:
        """Malformed requests (bad body, bad values) answer SYSTEM_ERROR with the reason,
        logged as a warning; a missing or unparsable header field (``HeaderFieldError``)
        and anything else propagate to the dispatcher, which answers SYSTEM_ERROR too
        (the former with one warning per peer, the rest with a traceback)."""
        name = RequestCode.name_of(code)

        def bad_request(conn: Connection, cmd: RemotingCommand, e: ProtocolError) -> RemotingCommand:
            logger.warning("%s from %s rejected: %s", name, conn.remote_address, e)
            return cmd.create_response(ResponseCode.SYSTEM_ERROR, str(e))

        def run(conn: Connection, cmd: RemotingCommand) -> _Result:
            try:
                result = handler(conn, cmd)
            except HeaderFieldError:
                raise
            except ProtocolError as e:
                return bad_request(conn, cmd, e)
            if isinstance(result, RemotingCommand):
                return result

            async def finish() -> RemotingCommand:
                try:
                    return await result
                except HeaderFieldError:
                    raise
                except ProtocolError as e:
                    return bad_request(conn, cmd, e)

            return finish()

        return run

    # ------------------------------------------------------------------ KV
    async def _put_kv_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        ext = _ext(cmd)
        namespace, key = ext.get("namespace"), ext.get("key")
        if namespace is None or key is None:
            return cmd.create_response(ResponseCode.SYSTEM_ERROR, "namespace or key is null")
        self.kv.put_kv_config(namespace, key, ext.get("value"))
        await self._persist_kv()
        return cmd.create_response(ResponseCode.SUCCESS)

    def _get_kv_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        namespace = _required(cmd, "namespace")
        key = _required(cmd, "key")
        value = self.kv.get_kv_config(namespace, key)
        if value is not None:
            return cmd.create_response(ResponseCode.SUCCESS, ext_fields={"value": value})
        return cmd.create_response(
            ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace} Key: {key}", ext_fields={}
        )

    async def _delete_kv_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        namespace = _required(cmd, "namespace")
        key = _required(cmd, "key")
        if self.kv.delete_kv_config(namespace, key):
            await self._persist_kv()
        return cmd.create_response(ResponseCode.SUCCESS)

    def _get_kv_list_by_namespace(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        namespace = _required(cmd, "namespace")
        table = self.kv.get_kv_list_by_namespace(namespace)
        if table is None:
            return cmd.create_response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace}")
        return cmd.create_response(ResponseCode.SUCCESS, body=table.to_json())

    # ------------------------------------------------------------------ brokers
    async def _register_broker(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = RegisterBrokerRequestHeader.from_ext_fields(cmd.ext_fields)
        if header.body_crc32 != 0 and _crc32(cmd.body) != header.body_crc32:
            logger.warning(
                "receive registerBroker request, crc32 not match: cluster=%s broker=%s addr=%s from %s",
                header.cluster_name,
                header.broker_name,
                header.broker_addr,
                conn.remote_address,
            )
            return cmd.create_response(ResponseCode.SYSTEM_ERROR, "crc32 not match")

        filter_servers: list[str] | None
        if cmd.version >= _V3_0_11:
            if cmd.body:
                try:
                    body = RegisterBrokerBody.decode(cmd.body, header.compressed)
                except ProtocolError as e:
                    raise ProtocolError(f"Failed to decode RegisterBrokerBody: {e}") from None
                wrapper = body.topic_config_serialize_wrapper
                filter_servers = body.filter_server_list
            else:
                wrapper, filter_servers = TopicConfigSerializeWrapper(), []
        else:
            # registerBroker (pre-3.0.11 brokers): the body is the wrapper itself.
            wrapper = TopicConfigSerializeWrapper.from_json(cmd.body) if cmd.body else TopicConfigSerializeWrapper()
            filter_servers = None

        broker_id = header.broker_id
        if self.controller is not None:
            broker_id = await self.controller.registration_id(header.broker_name, header.broker_addr, broker_id)
            if broker_id != header.broker_id:
                logger.warning(
                    "registerBroker: %s registers group %s as master (id 0) but the "
                    "controller's master is another broker; recorded as id %d",
                    header.broker_addr,
                    header.broker_name,
                    broker_id,
                )
        result = self.routes.register_broker(
            header.cluster_name,
            header.broker_addr,
            header.broker_name,
            broker_id,
            header.ha_server_addr,
            wrapper,
            filter_servers,
            conn,
        )
        logger.debug(
            "registerBroker: cluster=%s broker=%s id=%d addr=%s topics=%d dataVersion=%s from %s",
            header.cluster_name,
            header.broker_name,
            header.broker_id,
            header.broker_addr,
            len(wrapper.topic_config_table),
            wrapper.data_version,
            conn.remote_address,
        )
        order_conf = self.kv.get_kv_list_by_namespace(NAMESPACE_ORDER_TOPIC_CONFIG)
        return cmd.create_response(
            ResponseCode.SUCCESS,
            ext_fields=RegisterBrokerResponseHeader(result.ha_server_addr, result.master_addr).to_ext_fields(),
            body=None if order_conf is None else order_conf.to_json(),
        )

    def _unregister_broker(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = UnRegisterBrokerRequestHeader.from_ext_fields(cmd.ext_fields)
        self.routes.unregister_broker(header.cluster_name, header.broker_addr, header.broker_name, header.broker_id)
        return cmd.create_response(ResponseCode.SUCCESS)

    def _query_data_version(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        broker_addr = _required(cmd, "brokerAddr")
        for name in ("brokerName", "clusterName", "brokerId"):
            _required(cmd, name)
        parse_long("brokerId", _ext(cmd)["brokerId"])
        if not cmd.body:
            raise ProtocolError("QUERY_DATA_VERSION without a DataVersion body")
        data_version = DataVersion.from_json(cmd.body)
        changed = self.routes.is_broker_topic_config_changed(broker_addr, data_version)
        if not changed:
            # the broker asked instead of registering: that counts as a heartbeat
            self.routes.update_broker_info_update_timestamp(broker_addr)
        ours = self.routes.query_broker_topic_config(broker_addr)
        return cmd.create_response(
            ResponseCode.SUCCESS,
            ext_fields={"changed": "true" if changed else "false"},
            body=None if ours is None else ours.to_json(),
        )

    def _wipe_write_perm_of_broker(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return self._change_write_perm(conn, cmd, "wipe", self.routes.wipe_write_perm_of_broker, "wipeTopicCount")

    def _add_write_perm_of_broker(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return self._change_write_perm(conn, cmd, "add", self.routes.add_write_perm_of_broker, "addTopicCount")

    def _change_write_perm(
        self, conn: Connection, cmd: RemotingCommand, what: str, change: Callable[[str], int], count_key: str
    ) -> RemotingCommand:
        broker_name = _required(cmd, "brokerName")
        count = change(broker_name)
        logger.info(
            "%s write perm of broker=%s, client: %s, %d topic(s)", what, broker_name, conn.remote_address, count
        )
        return cmd.create_response(ResponseCode.SUCCESS, ext_fields={count_key: str(count)})

    # ------------------------------------------------------------------ routes
    def _get_route_info_by_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = GetRouteInfoRequestHeader.from_ext_fields(cmd.ext_fields)
        route = self.routes.pickup_topic_route_data(header.topic)
        if route is None:
            logger.debug("no route for topic=%s, asked by %s", header.topic, conn.remote_address)
            return cmd.create_response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {header.topic}" + TOPIC_NOT_EXIST_REMARK_SUFFIX,
            )
        if self.order_message_enable:
            route.order_topic_conf = self.kv.get_kv_config(NAMESPACE_ORDER_TOPIC_CONFIG, header.topic)
        standard = (
            cmd.version >= MQVersion.V4_9_4 or bool(header.accept_standard_json_only) or self.accept_standard_json_only
        )
        return cmd.create_response(ResponseCode.SUCCESS, body=route.to_json(standard))

    def _get_broker_cluster_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        # always the legacy encoding, whatever the client's version (as 4.9.8)
        return cmd.create_response(ResponseCode.SUCCESS, body=self.routes.get_all_cluster_info().to_json())

    def _get_all_topic_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.create_response(ResponseCode.SUCCESS, body=self.routes.get_all_topic_list().to_json())

    def _delete_topic_in_namesrv(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = _required(cmd, "topic")
        cluster = _ext(cmd).get("clusterName")
        self.routes.delete_topic(topic, cluster or None)
        logger.info("deleteTopicInNamesrv: topic=%s cluster=%s, client: %s", topic, cluster, conn.remote_address)
        return cmd.create_response(ResponseCode.SUCCESS)

    def _get_topics_by_cluster(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        cluster = _required(cmd, "cluster")
        return cmd.create_response(ResponseCode.SUCCESS, body=self.routes.get_topics_by_cluster(cluster).to_json())

    def _get_system_topic_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.create_response(ResponseCode.SUCCESS, body=self.routes.get_system_topic_list().to_json())

    def _get_unit_topic_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.create_response(ResponseCode.SUCCESS, body=self.routes.get_unit_topics().to_json())

    def _get_has_unit_sub_topic_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.create_response(ResponseCode.SUCCESS, body=self.routes.get_has_unit_sub_topic_list().to_json())

    def _get_has_unit_sub_ununit_topic_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.create_response(
            ResponseCode.SUCCESS, body=self.routes.get_has_unit_sub_ununit_topic_list().to_json()
        )

    # ------------------------------------------------------------------ config
    def _get_namesrv_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        # Configuration.getAllConfigsFormatString: MixAll.properties2String, no secrets
        props = config_properties(
            self.settings, listen_port=self.port, kv_path=str(self.kv.path), controller=self.controller is not None
        )
        return cmd.create_response(ResponseCode.SUCCESS, body=properties_text(props).encode())

    async def _update_namesrv_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """DefaultRequestProcessor.updateConfig: the body is properties text. Refused as a
        whole when a key is black-listed (NO_PERMISSION, as 4.9.8), secret, unknown or
        badly valued; else the live keys change at once and every key is written to
        configStorePath (the -c file). The remark names keys that wait for a restart."""
        try:
            props = parse_properties_text((cmd.body or b"").decode("utf-8"))
        except (UnicodeDecodeError, PropertiesError) as e:
            return cmd.create_response(ResponseCode.SYSTEM_ERROR, f"string2Properties error: {e}")
        async with self._config_write_lock:
            try:
                update = check_update(self.settings, props)
            except ConfigRefused as e:
                logger.warning("updateNamesrvConfig from %s refused: %s", conn.remote_address, e)
                code = ResponseCode.NO_PERMISSION if e.no_permission else ResponseCode.SYSTEM_ERROR
                return cmd.create_response(code, str(e))
            apply_update(self.settings, update)
            if "logLevel" in update.at_once:
                logging.getLogger().setLevel(self.settings.namesrv.logLevel)
            path = self.settings.namesrv.configStorePath
            if path:
                try:
                    await asyncio.to_thread(rewrite_properties_file, path, update.text)
                except OSError as e:
                    logger.error("updateNamesrvConfig: cannot write %s: %s", path, e)
                    return cmd.create_response(
                        ResponseCode.SYSTEM_ERROR, f"applied but not written to {path}: {e.strerror}"
                    )
        logger.info("updateNamesrvConfig from %s: %s", conn.remote_address, update.text)
        return cmd.create_response(ResponseCode.SUCCESS, update.remark)


class _BrokerExpiryScan(ServiceLoop):
    """RocketMQ's scanNotActiveBroker schedule: first after half the period, then every
    period."""

    def __init__(self, server: NameServer) -> None:
        super().__init__("namesrv-scan-not-active-broker", logger)
        self._server = server
        self._first = True

    def interval(self) -> float:
        first, self._first = self._first, False
        s = self._server
        return (s.scan_initial_delay_ms if first else s.scan_interval_ms) / 1000

    async def run_once(self) -> None:
        self._server.scan_not_active_broker()
