"""NettyServerConfig: the key names RocketMQ gives a remoting server's settings in its
properties files (namesrv.properties, broker.conf), shared by every server that reads one,
and the ``tls.*`` keys (``take_tls_keys``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rmq.common.properties import PropertiesError
from rmq.remoting.tls import TlsMode, TlsSettings, client_context, load_tls_settings, server_context, tls_properties

__all__ = ["NettyServerConfig", "take_tls_keys"]


@dataclass
class NettyServerConfig:
    """RocketMQ's NettyServerConfig keys. The thread and buffer settings are accepted for
    compatibility; one event loop serves every connection here. ``validate`` raises
    ``PropertiesError`` naming the key."""

    listenPort: int = 9876
    bindAddress: str = "0.0.0.0"
    serverWorkerThreads: int = 8
    serverCallbackExecutorThreads: int = 0
    serverSelectorThreads: int = 3
    serverOnewaySemaphoreValue: int = 256
    serverAsyncSemaphoreValue: int = 64
    serverChannelMaxIdleTimeSeconds: int = 120
    serverSocketSndBufSize: int = 65535
    serverSocketRcvBufSize: int = 65535
    writeBufferHighWaterMark: int = 0
    writeBufferLowWaterMark: int = 0
    serverSocketBacklog: int = 1024
    serverPooledByteBufAllocatorEnable: bool = True
    useEpollNativeSelector: bool = False
    # RocketMQ's tls.* keys (JVM system properties there, keys of the same file here), set
    # by take_tls_keys. Not a dataclass field: the config commands (getBrokerConfig,
    # updateBrokerConfig) list and change the plain keys only, as RocketMQ's do.
    tls = TlsSettings()

    def validate(self) -> None:
        if not 0 <= self.listenPort < 65536:
            raise PropertiesError(f"listenPort: {self.listenPort} is not a TCP port (0 = any free port)")


def take_tls_keys(
    config: NettyServerConfig, props: Mapping[str, str], *, outbound: bool = False
) -> tuple[dict[str, str], list[str]]:
    """Parse the ``tls.*`` keys of ``props`` (and the tls.config.file) into ``config.tls``;
    returns the other keys and the TLS keys not taken (for a warning). Certificate, key and
    CA files are loaded once here (a server's, unless test mode makes its own; the client
    side's too when ``outbound`` and the settings make the process's own links TLS), so
    that a wrong path or password stops the start naming the key. ``PropertiesError``."""
    tls_props, rest = tls_properties(props)
    tls, ignored = load_tls_settings(tls_props)
    if tls.server_mode != TlsMode.DISABLED and not tls.test_mode:
        server_context(tls)
    if outbound and tls.outbound_tls:
        client_context(tls)
    config.tls = tls
    return rest, ignored
