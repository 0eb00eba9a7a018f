"""``Endpoint``: what ``RemotingClient`` and ``RemotingServer`` share."""

from __future__ import annotations

from rmq.remoting.connection import Connection, ConnectionCallback, RemotingStats
from rmq.remoting.dispatch import Processor, RequestDispatcher

__all__ = ["Endpoint"]


class Endpoint:
    """A name, the stats of its connections, the dispatcher of the requests that arrive on
    them, and the limits every one of its connections is made with."""

    def __init__(
        self,
        name: str,
        max_inflight_per_connection: int,
        max_frame_length: int,
        coalesce_limit: int,
        write_buffer_high: int | None = 1 << 20,
    ) -> None:
        self.name = name
        self.stats = RemotingStats()
        self._dispatcher = RequestDispatcher(name, self.stats)
        self._max_inflight = max_inflight_per_connection
        self._max_frame_length = max_frame_length
        self._coalesce_limit = coalesce_limit
        self._write_buffer_high = write_buffer_high

    def register_processor(self, code: int, fn: Processor) -> None:
        """A processor for the requests with this code that arrive on our connections."""
        self._dispatcher.register(code, fn)

    def _connection(
        self,
        *,
        pause_reading_on_write_pressure: bool,
        on_lost: ConnectionCallback,
        on_made: ConnectionCallback | None = None,
    ) -> Connection:
        return Connection(
            dispatch=self._dispatcher.dispatch,
            stats=self.stats,
            name=self.name,
            max_inflight=self._max_inflight,
            max_frame_length=self._max_frame_length,
            pause_reading_on_write_pressure=pause_reading_on_write_pressure,
            write_buffer_high=self._write_buffer_high,
            coalesce_limit=self._coalesce_limit,
            on_made=on_made,
            on_lost=on_lost,
        )
