"""BrokerConfig (RocketMQ key names and defaults) and broker.conf loading.

One properties file feeds three RocketMQ objects (BrokerConfig, NettyServerConfig and
MessageStoreConfig); a key lands in whichever knows it. Here BrokerConfig inherits the
NettyServerConfig keys (rmq/remoting/config.py, shared with the NameServer), so the broker
holds two objects. Unknown keys are warned about, wrong values rejected with the key named
(``ConfigError``, the store's, for all of them).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from rmq.auth.credentials import Credential, CredentialError, parse_credential
from rmq.common.net import local_ip
from rmq.common.properties import PropertiesError, apply_properties, parse_properties_text
from rmq.remoting.config import NettyServerConfig, take_tls_keys
from rmq.store.config import BrokerRole, ConfigError, MessageStoreConfig

log = logging.getLogger("rmq.broker")

# PERM_READ | PERM_WRITE
PERM_RW = 6


@dataclass
class BrokerConfig(NettyServerConfig):
    """RocketMQ's BrokerConfig keys after the inherited NettyServerConfig ones (listenPort,
    serverWorkerThreads, ...; listenPort defaults to 10911 here)."""

    brokerClusterName: str = "DefaultCluster"
    brokerName: str = field(default_factory=lambda: socket.gethostname() or "DEFAULT_BROKER")
    brokerId: int = 0
    brokerIP1: str = ""
    brokerIP2: str = ""
    namesrvAddr: str = ""
    brokerPermission: int = PERM_RW
    defaultTopicQueueNums: int = 8
    autoCreateTopicEnable: bool = True
    clusterTopicEnable: bool = True
    brokerTopicEnable: bool = True
    autoCreateSubscriptionGroup: bool = True
    rejectTransactionMessage: bool = False
    registerNameServerPeriod: int = 30000
    registerBrokerTimeoutMills: int = 6000
    forceRegister: bool = True
    compressedRegister: bool = False
    longPollingEnable: bool = True
    shortPollingTimeMills: int = 1000
    notifyConsumerIdsChangedEnable: bool = True
    transferMsgByHeap: bool = True
    slaveReadEnable: bool = False
    # Ours: how often a slave copies topics/offsets/delay offsets/groups from its master
    # (RocketMQ's SlaveSynchronize runs every 10 s, not configurable).
    slaveSyncInterval: int = 10000
    regionId: str = "DefaultRegion"
    # RocketMQ's request pool queue capacities: reported by GET_BROKER_RUNTIME_INFO only,
    # since rmq handles requests on its event loop without pool queues.
    sendThreadPoolQueueCapacity: int = 10000
    pullThreadPoolQueueCapacity: int = 100000
    queryThreadPoolQueueCapacity: int = 20000
    endTransactionPoolQueueCapacity: int = 100000
    traceOn: bool = True
    # RocketMQ's message trace topic, created at start when traceTopicEnable is set
    traceTopicEnable: bool = False
    msgTraceTopicName: str = "RMQ_SYS_TRACE_TOPIC"
    # Filter servers (FilterServer class filtering) are not run: always 0, as 4.9.8's default
    filterServerNums: int = 0
    transactionTimeOut: int = 6000
    transactionCheckMax: int = 15
    transactionCheckInterval: int = 60000
    flushConsumerOffsetInterval: int = 5000
    channelNotActiveInterval: int = 120000  # a client silent this long is dropped
    # /metrics is served only when the port is set (RocketMQ enables it with
    # metricsExporterType=PROM; here the port alone decides, 0 = off). An empty host
    # binds every interface, not brokerIP1 as RocketMQ does: in a container
    # brokerIP1 is the docker host's address, which the container cannot bind.
    metricsPromExporterPort: int = 0
    metricsPromExporterHost: str = ""
    # Controller mode (RocketMQ 5's keys): automatic failover driven by the controller
    # in a NameServer (nameserver/controller.py; rmq/broker/controller_role.py). brokerRole then
    # names the role this broker takes while it leads (SYNC_MASTER or ASYNC_MASTER);
    # whether it leads is the controller's decision. brokerId 0 lets the controller
    # adopt it as the group's first master; brokerId > 0 starts it as a slave.
    enableControllerMode: bool = False
    controllerAddr: str = ""  # "host:port;..."; empty: the NameServers
    brokerHeartbeatInterval: int = 1000
    sendHeartbeatTimeoutMillis: int = 1000
    listenPort: int = 10911  # NettyServerConfig's key, the broker's default
    # Plain ACL (RocketMQ's key): accounts from <rocketmqHome>/conf/plain_acl.yml and
    # conf/acl/**; rocketmqHome empty: $ROCKETMQ_HOME, else the working directory.
    aclEnable: bool = False
    # BrokerStartup accepts these in the file too
    rocketmqHome: str = ""
    # RocketMQ 5's key: the cluster's AccessKey/SecretKey ({"accessKey":..,"secretKey":..}
    # or ak:sk). The broker signs its own requests with it and proves it in the HA
    # handshake; with aclEnable it is accepted as an admin account. Never printed
    # (GET_BROKER_CONFIG leaves fields marked secret out).
    innerClientAuthenticationCredentials: str = field(default="", repr=False, metadata={"secret": True})
    sendMessageThreadPoolNums: int = 1
    pullMessageThreadPoolNums: int = 16
    waitTimeMillsInSendQueue: int = 200
    # Timer messages (RocketMQ 5's MessageStoreConfig keys and defaults; rmq/broker/timer.py):
    # TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS further ahead than timerMaxDelaySec
    # are refused; delivery times are rounded to timerPrecisionMs slots.
    timerWheelEnable: bool = True
    timerMaxDelaySec: int = 3600 * 24 * 3
    timerPrecisionMs: int = 1000

    @property
    def broker_addr(self) -> str:
        """host:port clients reach this broker at (listenPort is the bound port once the
        server started, also when configured 0)."""
        return f"{self.brokerIP1}:{self.listenPort}"

    @property
    def inner_credential(self) -> Credential | None:
        """innerClientAuthenticationCredentials parsed (None when unset); validated at load."""
        return parse_credential(self.innerClientAuthenticationCredentials)

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in self.namesrvAddr.split(";") if a.strip()]

    @property
    def controller_mode(self) -> bool:
        return self.enableControllerMode or bool(self.controllerAddr.strip())

    @property
    def controller_addrs(self) -> list[str]:
        own = [a.strip() for a in self.controllerAddr.split(";") if a.strip()]
        return own or self.namesrv_addrs

    def validate_with(self, store: MessageStoreConfig) -> None:
        """Check the keys, the NettyServerConfig ones too, and the rules across this and
        the store's config; ConfigError names the key."""
        if not self.brokerName:
            raise ConfigError("brokerName: must not be empty")
        with _config_error():
            self.validate()
        if not 0 <= self.metricsPromExporterPort < 65536:
            raise ConfigError(
                f"metricsPromExporterPort: {self.metricsPromExporterPort} is not a TCP port (0 = no /metrics)"
            )
        if self.brokerId < 0:
            raise ConfigError("brokerId: must be >= 0")
        if self.controller_mode:
            self._validate_controller_mode(store)
        elif store.brokerRole == BrokerRole.SLAVE and self.brokerId == 0:
            raise ConfigError("brokerId: a SLAVE needs brokerId > 0")
        elif store.brokerRole != BrokerRole.SLAVE and self.brokerId != 0:
            raise ConfigError(f"brokerId: a {store.brokerRole.value} must have brokerId 0")
        if self.defaultTopicQueueNums < 1:
            raise ConfigError("defaultTopicQueueNums: must be >= 1")
        if self.timerMaxDelaySec < 1:
            raise ConfigError("timerMaxDelaySec: must be >= 1")
        if not 100 <= self.timerPrecisionMs <= 10_000:
            raise ConfigError("timerPrecisionMs: must be between 100 and 10000")
        if self.timerWheelEnable and store.fileReservedTime * 3600 < self.timerMaxDelaySec:
            log.warning(
                "timerMaxDelaySec=%d is longer than fileReservedTime=%gh: a timer message may be "
                "deleted with its CommitLog file before it is due",
                self.timerMaxDelaySec,
                store.fileReservedTime,
            )
        try:
            parse_credential(self.innerClientAuthenticationCredentials)
        except CredentialError as e:
            raise ConfigError(str(e)) from None
        for addr in self.namesrv_addrs:
            host, _, port = addr.rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError(f"namesrvAddr: {addr!r} is not host:port")

    def _validate_controller_mode(self, store: MessageStoreConfig) -> None:
        if store.brokerRole == BrokerRole.SLAVE:
            raise ConfigError(
                "brokerRole: in controller mode brokerRole is the role this broker takes "
                "while it leads (SYNC_MASTER or ASYNC_MASTER); the controller decides "
                "whether it leads; brokerId > 0 starts it as a slave"
            )
        if not self.controller_addrs:
            raise ConfigError("controllerAddr: controller mode needs controllerAddr or namesrvAddr")
        for addr in self.controller_addrs:
            host, _, port = addr.rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError(f"controllerAddr: {addr!r} is not host:port")
        for key in ("brokerHeartbeatInterval", "sendHeartbeatTimeoutMillis"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"{key}: must be positive")


@contextmanager
def _config_error() -> Iterator[None]:
    """rmq.common.properties' errors as the broker's ConfigError (same message: the key first)."""
    try:
        yield
    except PropertiesError as e:
        raise ConfigError(str(e)) from None


def apply_broker_properties(broker: BrokerConfig, store: MessageStoreConfig, props: Mapping[str, str]) -> list[str]:
    """Set each key on the config that knows it (on both where both do); returns the keys
    neither knows, sorted. ConfigError names a bad value's key."""
    with _config_error():
        return sorted(set(apply_properties(broker, props)) & set(apply_properties(store, props)))


def ha_address(broker: BrokerConfig, store: MessageStoreConfig) -> str:
    """host:port slaves replicate from (brokerIP2, haListenPort)."""
    return f"{broker.brokerIP2}:{store.haListenPort}"


@dataclass
class LoadedConfig:
    broker: BrokerConfig
    store: MessageStoreConfig
    unknown_keys: list[str]


def load_broker_config(
    path: str | None, namesrv: str | None = None, overrides: dict[str, str] | None = None
) -> LoadedConfig:
    """Read a broker.conf; -n beats namesrvAddr in the file, as with mqbroker."""
    props: dict[str, str] = {}
    if path is not None:
        try:
            with open(path, encoding="utf-8") as f, _config_error():
                props = parse_properties_text(f.read())
        except OSError as e:
            raise ConfigError(f"cannot read {path}: {e.strerror}") from None
    if overrides:
        props.update(overrides)
    broker = BrokerConfig()
    store = MessageStoreConfig()
    with _config_error():
        props, tls_ignored = take_tls_keys(broker, props, outbound=True)
    for k in tls_ignored:
        log.warning("broker config: TLS key %r ignored", k)
    unknown = apply_broker_properties(broker, store, props)
    if namesrv:
        broker.namesrvAddr = namesrv
    if not broker.namesrvAddr:
        broker.namesrvAddr = os.environ.get("NAMESRV_ADDR", "")
    if not broker.brokerIP1:
        broker.brokerIP1 = local_ip()
    if not broker.brokerIP2:
        broker.brokerIP2 = broker.brokerIP1
    if "haListenPort" not in props:
        # RocketMQ: listenPort + 1; with an ephemeral listen port, an ephemeral HA port
        store.haListenPort = broker.listenPort + 1 if broker.listenPort else 0
    for k in unknown:
        log.warning("broker config: unknown key %r ignored", k)
    broker.validate_with(store)
    store.validate()
    return LoadedConfig(broker, store, unknown)
