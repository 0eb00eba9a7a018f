"""ClientConfig: what every producer and consumer shares (Java ``ClientConfig``).

Durations keep RocketMQ's names and units: milliseconds. The one rule for the whole
client API is the same: every duration is in milliseconds, and a method parameter that
takes one ends in ``_ms``.
"""

from __future__ import annotations

import ipaddress
import os
import time
from dataclasses import dataclass, field
from ssl import SSLContext
from typing import Any

from rmq.client.acl import AclClientRPCHook, signing_hook
from rmq.common.net import local_ip
from rmq.protocol.codes import LanguageCode, SerializeType
from rmq.remoting.tls import TlsSettings, client_context

__all__ = ["ClientConfig", "local_ip", "DEFAULT_INSTANCE_NAME", "NAMESRV_ADDR_ENV"]

DEFAULT_INSTANCE_NAME = "DEFAULT"
#: Environment variable read when no NameServer address is configured (MixAll.NAMESRV_ADDR_ENV).
NAMESRV_ADDR_ENV = "NAMESRV_ADDR"


@dataclass
class ClientConfig:
    """Settings of one client process identity (``ip@instanceName``).

    ``namesrv_addr`` is ``"host:port;host:port"`` (or None: the ``NAMESRV_ADDR``
    environment variable). ``serialize_type`` is the header encoding of the requests
    this client sends (JSON, as Java's default; ``SerializeType.ROCKETMQ`` for the
    binary one); responses are decoded whatever their encoding.

    ``access_key`` / ``secret_key`` (both or neither): every request is signed as Java's
    ``AclClientRPCHook`` signs it, for brokers with ``aclEnable=true``. The secret is
    kept out of ``repr``.

    ``use_tls`` (Java's ``useTLS``, ``-Dtls.enable=true``): every connection, NameServers and
    brokers, is TLS. ``tls`` holds RocketMQ's ``tls.client.*`` keys; with its default
    (``test_mode=True``, as 4.9.8) any server certificate is accepted and none is sent.
    """

    namesrv_addr: str | None = None
    client_ip: str = field(default_factory=local_ip)
    instance_name: str = field(default_factory=lambda: os.environ.get("ROCKETMQ_CLIENT_NAME", DEFAULT_INSTANCE_NAME))
    unit_name: str | None = None
    unit_mode: bool = False
    poll_name_server_interval: int = 30000
    heartbeat_broker_interval: int = 30000
    persist_consumer_offset_interval: int = 5000
    # Java: system property rocketmq.client.rebalance.waitInterval
    rebalance_interval: int = 20000
    pull_time_delay_millis_when_exception: int = 1000
    mq_client_api_timeout: int = 3000
    connect_timeout: int = 3000
    serialize_type: int = SerializeType.JSON
    language: int = LanguageCode.PYTHON
    #: Root of BROADCASTING consumers' offset files (``LocalFileOffsetStore``):
    #: ``<dir>/<clientId>/<group>/offsets.json``. None: ``$ROCKETMQ_CLIENT_LOCAL_OFFSET_STORE_DIR``,
    #: else ``~/.rocketmq_offsets`` (Java: rocketmq.client.localOffsetStoreDir).
    local_offset_store_dir: str | None = None
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    use_tls: bool = False
    tls: TlsSettings = field(default_factory=TlsSettings)

    @classmethod
    def of_client(
        cls, config: ClientConfig | None, namesrv_addr: str | None, overrides: dict[str, Any]
    ) -> ClientConfig:
        """A producer's or consumer's own copy: ``config`` (or the defaults) with the
        keyword overrides and the NameServer address given to its constructor."""
        own = config.copy() if config is not None else cls(**overrides)
        if config is not None:
            for k, v in overrides.items():
                setattr(own, k, v)
        if namesrv_addr is not None:
            own.namesrv_addr = namesrv_addr
        return own

    def request_hook(self) -> AclClientRPCHook | None:
        """The signing hook for this config's credentials (``acl.signing_hook``)."""
        return signing_hook(self.access_key, self.secret_key)

    def ssl_context(self) -> SSLContext | None:
        """The TLS context of this config's connections, None for plaintext; reads the
        certificate files when ``tls`` names them (``PropertiesError`` names the key)."""
        return client_context(self.tls) if self.use_tls else None

    # ------------------------------------------------------------------ identity
    def build_mq_client_id(self) -> str:
        """``ip@instanceName[@unitName]``: the key of the shared MQClientInstance."""
        cid = f"{self.client_ip}@{self.instance_name}"
        if self.unit_name:
            cid += f"@{self.unit_name}"
        return cid

    def change_instance_name_to_pid(self) -> None:
        """4.9.x: the default instance name becomes ``pid#nanotime``, so two clients
        started in one process get two identities (and two MQClientInstances)."""
        if self.instance_name == DEFAULT_INSTANCE_NAME:
            self.instance_name = f"{os.getpid()}#{time.monotonic_ns()}"

    def namesrv_addr_list(self) -> list[str]:
        raw = self.namesrv_addr if self.namesrv_addr is not None else os.environ.get(NAMESRV_ADDR_ENV, "")
        return [a.strip() for a in raw.split(";") if a.strip()]

    def client_ip_bytes(self) -> bytes:
        """The client IP packed (4 or 16 bytes), for UNIQ_KEY generation."""
        try:
            addr = ipaddress.ip_address(self.client_ip)
        except ValueError:
            return b"\x7f\x00\x00\x01"
        if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        return addr.packed

    def copy(self) -> ClientConfig:
        return ClientConfig(**{f: getattr(self, f) for f in self.__dataclass_fields__})
