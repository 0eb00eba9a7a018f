"""NettyServerConfig: the key names RocketMQ gives a remoting server's settings in its
properties files (namesrv.properties, broker.conf), shared by every server that reads one."""

from __future__ import annotations

from dataclasses import dataclass

from rmq.common.properties import PropertiesError

__all__ = ["NettyServerConfig"]


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
    serverPooledByteBufAllocatorEnable: bool = True
    useEpollNativeSelector: bool = False

    def validate(self) -> None:
        if not 0 <= self.listenPort < 65536:
            raise PropertiesError(f"listenPort: {self.listenPort} is not a TCP port (0 = any free port)")
