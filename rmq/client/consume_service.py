"""What the concurrent and the orderly consume services share: running the listener
(a coroutine function on the loop, anything else on a thread pool) and owning tasks."""
from __future__ import annotations

import asyncio
import inspect
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from rmq.client._util import cancel_and_wait

if TYPE_CHECKING:
    from rmq.client.push_consumer import PushConsumer

__all__ = ["ConsumeServiceBase"]


class ConsumeServiceBase:
    def __init__(self, consumer: PushConsumer, listener: Callable[..., Any]) -> None:
        self.consumer = consumer
        self.listener = listener
        call = getattr(listener, "__call__", None)
        self.is_async = inspect.iscoroutinefunction(listener) or inspect.iscoroutinefunction(call)
        self.executor: ThreadPoolExecutor | None = None
        # an async listener runs on the loop: this bounds how many run at once, as the
        # thread pool bounds a blocking one
        self.semaphore = asyncio.Semaphore(consumer.consume_thread_max)
        self.tasks: set[asyncio.Task] = set()
        self._stop = asyncio.Event()

    def _start_executor(self) -> None:
        if not self.is_async:
            self.executor = ThreadPoolExecutor(self.consumer.consume_thread_max,
                                               thread_name_prefix=f"consume-{self.consumer.group}")

    async def _end_tasks(self) -> None:
        await cancel_and_wait(list(self.tasks), 5.0, f"{self.consumer.group} consume tasks")
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)

    def _spawn(self, coro: Awaitable[None]) -> asyncio.Task:
        t = asyncio.ensure_future(coro)
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)
        return t

    async def _call_listener(self, msgs: list, ctx: object) -> Any:
        if self.is_async:
            async with self.semaphore:
                return await self.listener(msgs, ctx)
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(self.executor, self.listener, msgs, ctx)
        if inspect.isawaitable(result):
            result = await result
        return result
