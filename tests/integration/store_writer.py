"""Crash-test writer: hammers a MessageStore until it is SIGKILLed (not a test).

    python tests/integration/store_writer.py DIR MODE SEED [KNOB=VALUE ...]

MODE is SYNC_FLUSH or ASYNC_FLUSH. The knobs (pace, flush and checkpoint intervals)
are drawn from SEED; KNOB=VALUE pins one (`pause=2.0`, `flushConsumeQueueThoroughInterval=200`). The process prints, one line each, written with a
single os.write so a kill never leaves half a line:

    LOADING <pid>                  before MessageStore.load() (recovery runs in load)
    READY <max_phy_offset>         once start() returned (recovery and dispatch done)
    CONF <key>=<value> ...         the seed-derived knobs of this run
    ACK <uniq> <topic> <queue_id> <queue_offset> <phys_offset> <size>
                                   after a put (or one message of a batch) returned PUT_OK
    NACK <status> <uniq>           a put that did not return PUT_OK (not an error by itself)

Every message is a pure function of its UNIQ_KEY (see `message_spec`), so the checker
can recompute body, tags and keys of anything it finds in the store. A batch's topic
and queue come from the batch id, which is the UNIQ_KEY of its first item without the
item suffix; the checker takes topic and queue from the ACK line and the record.

It runs until killed; it never shuts the store down.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import random
import sys
from dataclasses import dataclass

if __name__ == "__main__":  # runnable as a plain script from anywhere
    sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

from rmq.protocol.message import BatchItem, MessageExtBatch, MessageExtBrokerInner, properties_to_string
from rmq.store.config import FlushDiskType, MessageStoreConfig
from rmq.store.message_store import MessageStore
from rmq.store.results import PutMessageStatus

TOPICS = ("CrashA", "CrashB", "CrashC", "CrashD")
QUEUES = 4
TASKS = 64
MAX_BODY = 8 * 1024

COMMITLOG_FILE_SIZE = 64 * 1024
CQ_FILE_SIZE = 20 * 200
HASH_SLOTS = 512
INDEX_NUM = 2048


def store_config(root: str, mode: FlushDiskType | str, **overrides) -> MessageStoreConfig:
    """Small files: the CommitLog, every ConsumeQueue and the index roll constantly."""
    cfg = dict(
        storePathRootDir=root,
        mappedFileSizeCommitLog=COMMITLOG_FILE_SIZE,
        mappedFileSizeConsumeQueue=CQ_FILE_SIZE,
        flushDiskType=FlushDiskType(mode),
        maxHashSlotNum=HASH_SLOTS,
        maxIndexNum=INDEX_NUM,
    )
    cfg.update(overrides)
    return MessageStoreConfig(**cfg)


def _digest(s: str) -> bytes:
    return hashlib.sha256(s.encode("ascii")).digest()


@dataclass(frozen=True)
class MessageSpec:
    body: bytes
    tags: str | None
    keys: str | None

    def properties(self, uniq: str) -> dict[str, str]:
        props = {"UNIQ_KEY": uniq}
        if self.keys is not None:
            props["KEYS"] = self.keys
        if self.tags is not None:
            props["TAGS"] = self.tags
        return props


def message_spec(uniq: str) -> MessageSpec:
    """Body, TAGS and KEYS of the message with this UNIQ_KEY (deterministic)."""
    d = _digest(uniq)
    r = int.from_bytes(d[:8], "big")
    # log-uniform 1 B .. 8 KiB: mostly small, some large enough to force rolls
    size = min(MAX_BODY, max(1, int(2 ** ((r % 10_000) / 10_000 * 13.0))))
    block = hashlib.sha256(d).digest()
    body = (block * (size // len(block) + 1))[:size]
    sel = (r >> 20) % 8
    tags = None if sel == 0 else f"tag{(r >> 24) % 5}"
    # KEYS tokens are unique per message so a key query has exactly one answer
    if sel == 1:
        keys = None
    elif sel < 5:
        keys = f"K{uniq}"
    else:
        keys = f"K{uniq} {uniq}-x"
    return MessageSpec(body, tags, keys)


def batch_target(batch_id: str) -> tuple[str, int]:
    r = int.from_bytes(_digest("q" + batch_id)[:4], "big")
    return TOPICS[r % len(TOPICS)], (r >> 8) % QUEUES


def _emit(line: str) -> None:
    # one write(2) per line: a SIGKILL cannot split it, and nothing sits in a buffer
    os.write(1, (line + "\n").encode("ascii"))


async def _producer(
    st: MessageStore, run: str, task: int, rng: random.Random, pause: float, stats: dict[str, int]
) -> None:
    seq = 0
    while True:
        batch_id = f"{run}-{task}-{seq}"
        seq += 1
        topic, qid = batch_target(batch_id)
        n = 1 if rng.random() < 0.6 else rng.randint(2, 5)
        uniqs = [batch_id if n == 1 else f"{batch_id}-{i}" for i in range(n)]
        specs = [message_spec(u) for u in uniqs]
        if n == 1:
            r = await st.put(
                MessageExtBrokerInner(
                    topic=topic, body=specs[0].body, queue_id=qid, properties=specs[0].properties(uniqs[0])
                )
            )
            offsets = [r.wrote_offset]
        else:
            items = [
                BatchItem(0, s.body, properties_to_string(s.properties(u))) for u, s in zip(uniqs, specs, strict=False)
            ]
            r = await st.put_batch(MessageExtBatch(topic=topic, items=items, queue_id=qid))
            offsets = r.batch_offsets
        if r.status is PutMessageStatus.PUT_OK:
            ends = offsets[1:] + [r.wrote_offset + r.wrote_bytes]
            for i, u in enumerate(uniqs):
                _emit(f"ACK {u} {topic} {qid} {r.queue_offset + i} {offsets[i]} {ends[i] - offsets[i]}")
            stats["acked"] += n
        else:
            _emit(f"NACK {r.status.value} {batch_id}")
            stats["nacked"] += 1
            if r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE:
                await asyncio.sleep(0.05)
        if pause > 0:
            await asyncio.sleep(rng.uniform(0, pause))
        else:
            await asyncio.sleep(0)


def knobs(seed: int, pinned: dict[str, str] | None = None) -> dict[str, float | int]:
    """The run's knobs. How often the checkpoint is persisted decides where abnormal
    recovery starts and which index files it throws away; the pace (each producer
    sleeps up to `pause` s between puts) decides how long an index file lives."""
    rng = random.Random(seed)
    k: dict[str, float | int] = dict(
        pause=rng.choice([0.05, 0.2, 0.5, 2.0]),
        flushIntervalConsumeQueue=rng.choice([50, 200, 1000]),
        flushConsumeQueueThoroughInterval=rng.choice([200, 1000, 60_000]),
        flushIntervalCommitLog=rng.choice([20, 100, 500]),
        flushCommitLogThoroughInterval=rng.choice([200, 10_000]),
    )
    for name, value in (pinned or {}).items():
        if name not in k:
            raise SystemExit(f"unknown knob {name!r}; known: {', '.join(sorted(k))}")
        k[name] = type(k[name])(float(value))
    return k


async def _main(root: str, mode: str, seed: int, pinned: dict[str, str]) -> None:
    overrides = knobs(seed, pinned)
    pause = float(overrides.pop("pause"))
    _emit("CONF " + " ".join(f"{k}={v}" for k, v in sorted({**overrides, "pause": pause, "seed": seed}.items())))
    cfg = store_config(root, mode, **overrides)
    st = MessageStore(cfg)
    _emit(f"LOADING {os.getpid()}")
    st.load()
    await st.start()
    _emit(f"READY {st.max_phy_offset}")
    run = f"s{seed}"
    stats = {"acked": 0, "nacked": 0}
    tasks = [
        asyncio.create_task(_producer(st, run, t, random.Random(f"{seed}/{t}"), pause, stats)) for t in range(TASKS)
    ]
    await asyncio.gather(*tasks)  # forever: only SIGKILL ends this process


def main(argv: list[str]) -> None:
    if len(argv) < 4 or not all("=" in a for a in argv[4:]):
        sys.stderr.write(__doc__ or "")
        raise SystemExit(2)
    root, mode, seed = argv[1], argv[2], int(argv[3])
    pinned = dict(a.split("=", 1) for a in argv[4:])
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(_main(root, mode, seed, pinned))


if __name__ == "__main__":
    main(sys.argv)
