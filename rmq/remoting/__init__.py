"""asyncio transport over ``rmq.protocol``: RemotingServer (code -> processor table),
RemotingClient (connection per address, opaque -> future, oneway, timeouts, reconnect)."""

from rmq.remoting.client import RemotingClient
from rmq.remoting.connection import Connection, RemotingStats
from rmq.remoting.dispatch import Processor, RequestDispatcher
from rmq.remoting.errors import (
    RemotingClosedError,
    RemotingConnectError,
    RemotingError,
    RemotingSendRequestError,
    RemotingTimeoutError,
)
from rmq.remoting.server import RemotingServer

__all__ = [
    "Connection",
    "Processor",
    "RemotingClient",
    "RemotingClosedError",
    "RemotingConnectError",
    "RemotingError",
    "RemotingSendRequestError",
    "RemotingServer",
    "RemotingStats",
    "RemotingTimeoutError",
    "RequestDispatcher",
]
