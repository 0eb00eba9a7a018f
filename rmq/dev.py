"""`rmq dev` / `make run`: a local cluster under one data directory with a live status line.

The broker and NameServer are not built yet (issue 3), so this runs what exists: the
real storage engine under <data>/store, fed by an in-process producer, with the
status line showing what the store is doing. Ctrl-C shuts it down cleanly.
"""
from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

from rmq.protocol.message import MessageExtBrokerInner, UniqueIdGenerator
from rmq.store.config import MessageStoreConfig
from rmq.store.message_store import MessageStore


async def _dev(data: str) -> int:
    root = os.path.abspath(os.path.join(data, "store"))
    print(f"rmq dev: broker and NameServer are not built yet; running the storage engine "
          f"at {root} with an in-process producer (Ctrl-C stops it)", flush=True)
    st = MessageStore(MessageStoreConfig(storePathRootDir=root,
                                         mappedFileSizeCommitLog=64 * 1024 * 1024))
    st.load()
    await st.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    ids = UniqueIdGenerator()
    put = 0

    async def producer() -> None:
        nonlocal put
        while not stop.is_set():
            for _ in range(100):
                m = MessageExtBrokerInner(topic="DevTopic", body=b"x" * 256, queue_id=put % 4,
                                          properties={"UNIQ_KEY": ids.next_id(), "TAGS": "dev"})
                await st.put(m)
                put += 1
            await asyncio.sleep(0.1)

    task = asyncio.create_task(producer())
    last, last_t = 0, time.monotonic()
    try:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), 1.0)
            except asyncio.TimeoutError:
                pass
            now = time.monotonic()
            tps = (put - last) / (now - last_t)
            last, last_t = put, now
            line = (f"\rstore: {tps:8.0f} puts/s | {put} this run | CommitLog "
                    f"{st.max_phy_offset / 1e6:.1f} MB | dispatch lag {st.dispatch_behind_bytes} B")
            sys.stdout.write(line)
            sys.stdout.flush()
    finally:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        await st.shutdown()
        print("\nrmq dev: stopped cleanly", flush=True)
    return 0


def run_dev(data: str) -> int:
    try:
        import uvloop
        return uvloop.run(_dev(data))
    except ImportError:
        return asyncio.run(_dev(data))
