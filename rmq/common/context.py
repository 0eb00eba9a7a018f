"""``async with`` for the objects that start and shut down, and for those that only close."""

from __future__ import annotations

from typing import Self

__all__ = ["ClosingContext", "ServingContext", "StartedContext"]


class StartedContext:
    """``async with x:`` is ``await x.start()`` ... ``await x.shutdown()``: a producer's or a
    consumer's life, started and shut down as Java's are."""

    async def start(self) -> None:
        raise NotImplementedError

    async def shutdown(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()


class ServingContext(StartedContext):
    """``async with server:`` is ``await server.start()`` ... ``await server.stop()``: servers
    (NameServer, RemotingServer) say stop where clients say shutdown; both words work."""

    async def stop(self) -> None:
        raise NotImplementedError

    async def shutdown(self) -> None:
        await self.stop()


class ClosingContext:
    """``async with x:`` closes x on the way out (x is usable when made: nothing to start)."""

    async def close(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
