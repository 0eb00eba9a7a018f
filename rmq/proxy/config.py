"""``ProxyConfig``: RocketMQ 5's proxy keys (``ProxyConfig.java``) where they exist, in a
properties file or a JSON object (``rmq-proxy.json``) given with ``rmq proxy -c FILE``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmq.common.properties import PropertiesError, apply_properties, parse_properties_text
from rmq.proxy.convert import DEFAULT_DELAY_LEVELS, SendLimits, parse_delay_levels

__all__ = ["ProxyConfig", "load_proxy_config", "PropertiesError"]


@dataclass
class ProxyConfig:
    # --- where (ProxyConfig.java names)
    namesrvAddr: str = ""
    grpcServerPort: int = 8081
    #: the host:port written into QueryRoute answers when a request names no access point
    #: ("" = this host's IP and grpcServerPort)
    proxyAdvertiseAddress: str = ""
    bindAddress: str = "0.0.0.0"
    proxyClusterName: str = "DefaultCluster"
    # --- publishing (ProxyConfig.java defaults)
    maxMessageSize: int = 4 * 1024 * 1024
    maxUserPropertySize: int = 16 * 1024
    userPropertyMaxNum: int = 128
    maxMessageGroupSize: int = 64
    #: the broker's timerMaxDelaySec default (3 days), so the proxy refuses nothing the broker
    #: takes (RocketMQ 5's proxy says 1 day)
    maxDelayTimeMills: int = 3 * 24 * 3600 * 1000
    #: RocketMQ 5's default: a delivery time goes to the broker's timer messages as
    #: TIMER_DELIVER_MS; true rounds it up to a delay level instead (imprecise, never early)
    useDelayLevel: bool = False
    messageDelayLevel: str = DEFAULT_DELAY_LEVELS
    defaultTopicQueueNums: int = 4
    grpcClientProducerMaxAttempts: int = 3
    grpcClientProducerBackoffInitialMillis: int = 10
    grpcClientProducerBackoffMaxMillis: int = 1000
    grpcClientProducerBackoffMultiplier: int = 2
    # --- consuming
    grpcClientConsumerMinLongPollingTimeoutMillis: int = 5000
    grpcClientConsumerMaxLongPollingTimeoutMillis: int = 20000
    #: retryMaxTimes of a subscription group + 1 (a group's own value needs the broker's config)
    consumerMaxAttempts: int = 17
    # --- remoting towards the brokers
    sendMessageTimeoutMillis: int = 3000
    # --- metrics: Prometheus text on this port (0 = off)
    metricsPromExporterPort: int = 0

    def send_limits(self) -> SendLimits:
        return SendLimits(
            max_body_size=self.maxMessageSize,
            max_user_properties=self.userPropertyMaxNum,
            max_properties_size=self.maxUserPropertySize,
            max_message_group_size=self.maxMessageGroupSize,
            max_delay_ms=self.maxDelayTimeMills,
            delay_levels_ms=tuple(parse_delay_levels(self.messageDelayLevel)),
            use_delay_level=self.useDelayLevel,
        )

    def namesrv_list(self) -> list[str]:
        return [a.strip() for a in self.namesrvAddr.replace(",", ";").split(";") if a.strip()]


def load_proxy_config(path: str | None, overrides: dict[str, str] | None = None) -> tuple[ProxyConfig, dict[str, str]]:
    """The config from ``path`` (JSON object or properties) plus ``overrides``; also returns every
    key read (the TLS and ACL keys live beside the proxy's own). Raises ``PropertiesError``."""
    raw: dict[str, str] = {}
    if path:
        text = Path(path).read_text(encoding="utf-8")
        if text.lstrip().startswith("{"):
            try:
                obj: dict[str, Any] = json.loads(text)
            except ValueError as e:
                raise PropertiesError(f"{path}: not valid JSON: {e}") from None
            raw = {k: (json.dumps(v) if isinstance(v, dict | list) else str(v).lower() if isinstance(v, bool) else str(v))
                   for k, v in obj.items()}  # fmt: skip
        else:
            raw = parse_properties_text(text)
    raw.update(overrides or {})
    cfg = ProxyConfig()
    apply_properties(cfg, raw)
    try:
        cfg.send_limits()
    except ValueError as e:
        raise PropertiesError(f"messageDelayLevel: {e}") from None
    return cfg, raw
