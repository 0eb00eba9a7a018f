"""Fill a tiny filesystem with a store until it refuses writes; then reopen and check.

Run by test_store_disk_full.py inside a private mount namespace with a size-limited
tmpfs at ROOT. Prints one JSON object on its last line.
"""

from __future__ import annotations

import asyncio
import json
import sys

from rmq.protocol.message import MessageExtBrokerInner, decode_record
from rmq.store.config import FlushDiskType, MessageStoreConfig
from rmq.store.message_store import MessageStore
from rmq.store.results import PutMessageStatus


def config(root: str) -> MessageStoreConfig:
    return MessageStoreConfig(
        storePathRootDir=root,
        mappedFileSizeCommitLog=128 * 1024,
        mappedFileSizeConsumeQueue=20 * 400,
        maxHashSlotNum=64,
        maxIndexNum=4096,
        flushDiskType=FlushDiskType.SYNC_FLUSH,
        # retention must not delete what this test checks is kept
        cleanFileForciblyEnable=False,
    )


def body_of(i: int) -> bytes:
    return (b"%08d" % i) * 128  # 1 KiB, recomputable


async def fill(root: str) -> dict:
    st = MessageStore(config(root))
    st.load()
    await st.start()
    acked = []
    refused: dict[str, int] = {}
    i = 0
    while True:
        m = MessageExtBrokerInner(
            topic="DiskFull", body=body_of(i), queue_id=i % 2, properties={"UNIQ_KEY": f"U{i}", "KEYS": f"k{i}"}
        )
        r = await st.put(m)
        if r.status is PutMessageStatus.PUT_OK:
            acked.append((i, r.wrote_offset, r.wrote_bytes, r.queue_offset, i % 2))
        else:
            refused[r.status.value] = refused.get(r.status.value, 0) + 1
            if sum(refused.values()) >= 50:
                break
        i += 1
        if i > 100_000:
            break
    flags = st.running_flags.flags
    await st.shutdown()
    return {"acked": acked, "refused": refused, "flags": flags, "attempts": i}


async def verify(root: str, acked: list) -> dict:
    st = MessageStore(config(root))
    st.load()
    await st.start()
    bad = []
    for i, off, size, qoff, _qid in acked:
        data = st.select_one_message_by_offset(off, size)
        if data is None:
            bad.append((i, "missing"))
            continue
        m = decode_record(data, check_crc=True)
        if m.body != body_of(i) or m.properties.get("UNIQ_KEY") != f"U{i}" or m.queue_offset != qoff:
            bad.append((i, "different"))
    queues = [st.get_max_offset_in_queue("DiskFull", q) for q in (0, 1)]
    await st.shutdown()
    return {"bad": bad[:20], "n_bad": len(bad), "queues": queues}


async def main(root: str) -> None:
    out = await fill(root)
    out["verify"] = await verify(root, out["acked"])
    out["acked"] = len(out["acked"])
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
