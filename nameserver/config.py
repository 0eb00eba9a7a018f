"""The NameServer's configuration: RocketMQ's key names, one properties file (``-c``).

As with RocketMQ's NamesrvStartup, one file feeds several objects and a key lands in
whichever knows it: ``NamesrvConfig`` (RocketMQ's keys, plus rmq's own NameServer options),
``NettyServerConfig`` (``listenPort``, ``bindAddress``, ...) and the failover controller's
``ControllerConfig``; the ``tls.*`` keys (``tls.server.mode``, certificates, ...; also read
without ``-c``, from ``/etc/rocketmq/tls.properties`` when it exists) land in ``netty.tls``
(``rmq.remoting.tls``). Values come as the file gives them (text: ``true``/``false``,
numbers); an unknown key is warned about in one line naming it, a bad value stops the
start with the key named. Every command-line option of ``rmq namesrv`` has a key here;
an option given on the command line wins over the file. New NameServer settings (ACL,
TLS, ...) are new fields here, not new parsers.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from nameserver.controller.config import ControllerConfig
from nameserver.kvconfig import default_kv_path
from nameserver.routes import BROKER_CHANNEL_EXPIRED_TIME_MS
from rmq.auth.credentials import Credential, CredentialError, parse_credential
from rmq.common.properties import PropertiesError, apply_properties, parse_properties_text
from rmq.remoting.config import NettyServerConfig, take_tls_keys

__all__ = [
    "NamesrvConfig",
    "NettyServerConfig",
    "NamesrvSettings",
    "load_namesrv_config",
    "PropertiesError",
    "LOG_LEVELS",
]

log = logging.getLogger("rmq.nameserver")

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


@dataclass
class NamesrvConfig:
    """RocketMQ's NamesrvConfig keys, then rmq's NameServer options under their names."""

    rocketmqHome: str = field(default_factory=lambda: os.environ.get("ROCKETMQ_HOME", ""))
    # "" = rmq's default, ~/namesrv/kvConfig.msgpack (RocketMQ's file is kvConfig.json;
    # rmq keeps the same table as msgpack)
    kvConfigPath: str = ""
    # where updateNamesrvConfig writes (NamesrvStartup: the -c file); "" = nowhere
    configStorePath: str = ""
    productEnvName: str = "center"
    clusterTest: bool = False
    orderMessageEnable: bool = False
    # keys updateNamesrvConfig refuses, ";"-separated; configBlackList, configStorePath,
    # kvConfigPath and rocketmqHome always (DefaultRequestProcessor.initConfigBlackList)
    configBlackList: str = "configBlackList;configStorePath;kvConfigPath"
    scanNotActiveBrokerInterval: int = 10_000  # ms; the first scan after half of it
    # rmq's (RocketMQ's are constants or absent)
    brokerExpiredTimeMillis: int = BROKER_CHANNEL_EXPIRED_TIME_MS
    acceptStandardJsonOnly: bool = False
    metricsPromExporterPort: int = 0  # /metrics; 0 = off (the broker's key)
    logLevel: str = "INFO"
    # ACL (4.9.8's NameServer has none): writes need an admin account of
    # <rocketmqHome>/conf/plain_acl.yml (+ conf/acl/**) or the cluster credential
    # (rmq/auth/namesrv_rules.py); reads stay open.
    aclEnable: bool = False
    innerClientAuthenticationCredentials: str = field(default="", repr=False, metadata={"secret": True})

    @property
    def inner_credential(self) -> Credential | None:
        return parse_credential(self.innerClientAuthenticationCredentials)

    @property
    def kv_path(self) -> Path:
        return Path(self.kvConfigPath) if self.kvConfigPath else default_kv_path()

    def validate(self) -> None:
        if not 0 <= self.metricsPromExporterPort < 65536:
            raise PropertiesError(
                f"metricsPromExporterPort: {self.metricsPromExporterPort} is not a TCP port (0 = no /metrics)"
            )
        for key in ("scanNotActiveBrokerInterval", "brokerExpiredTimeMillis"):
            if getattr(self, key) <= 0:
                raise PropertiesError(f"{key}: must be positive, got {getattr(self, key)}")
        try:
            parse_credential(self.innerClientAuthenticationCredentials)
        except CredentialError as e:
            raise PropertiesError(str(e)) from None
        if self.logLevel.upper() not in LOG_LEVELS:
            raise PropertiesError(f"logLevel: expected one of {', '.join(LOG_LEVELS)}, got {self.logLevel!r}")
        self.logLevel = self.logLevel.upper()


@dataclass
class NamesrvSettings:
    """Everything ``rmq namesrv`` starts from."""

    namesrv: NamesrvConfig = field(default_factory=NamesrvConfig)
    netty: NettyServerConfig = field(default_factory=NettyServerConfig)
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    unknown_keys: list[str] = field(default_factory=list)
    path: str | None = None  # the -c file

    def objects(self) -> tuple[NamesrvConfig, NettyServerConfig, ControllerConfig]:
        """The config objects a key may land in, in the order they are searched."""
        return self.namesrv, self.netty, self.controller

    def validate(self) -> None:
        self.namesrv.validate()
        self.netty.validate()
        if self.controller.enableControllerInNamesrv:
            try:
                self.controller.validate()
            except ValueError as e:  # its message starts with the key
                raise PropertiesError(str(e)) from None

    @property
    def controller_config(self) -> ControllerConfig | None:
        """The controller's config when it runs here, else None."""
        return self.controller if self.controller.enableControllerInNamesrv else None


def load_namesrv_config(path: str | None, overrides: dict[str, object] | None = None) -> NamesrvSettings:
    """Read the file (if any), apply the command line's ``overrides`` (key -> typed value,
    already parsed), warn about unknown keys and validate. ``PropertiesError`` names the
    key (or the line)."""
    s = NamesrvSettings(path=path)
    props: dict[str, str] = {}
    if path is not None:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise PropertiesError(f"cannot read {path}: {e.strerror}") from None
        props = parse_properties_text(text)
        # NamesrvStartup: updateNamesrvConfig writes back to the file it started from
        props["configStorePath"] = path
    props, tls_ignored = take_tls_keys(s.netty, props)
    unknown = set(apply_properties(s.namesrv, props))
    unknown &= set(apply_properties(s.netty, props))
    unknown &= set(apply_properties(s.controller, props))
    s.unknown_keys = [k for k in props if k in unknown] + tls_ignored
    for key in s.unknown_keys:
        log.warning("NameServer config %s: unknown key %r ignored", path, key)
    for key, value in (overrides or {}).items():
        target = next((o for o in s.objects() if hasattr(o, key)), None)
        if target is None:
            raise KeyError(f"no NameServer config key {key!r}")  # a programming error
        setattr(target, key, value)
    s.validate()
    return s
