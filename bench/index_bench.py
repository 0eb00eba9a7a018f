"""IndexService throughput: build_index (one record at a time) vs build_index_batch.

Run from the repo root: .venv/bin/python bench/index_bench.py [--records N]

Realistic keys: `topic#UNIQ_KEY` (32 hex digits, as the Java client makes them) plus one
or two KEYS tokens per record, default file sizes (5,000,000 slots, 20,000,000 entries),
files in a temporary directory. Also measures query_offset latency on the built index.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rmq.protocol.message import UniqueIdGenerator
from rmq.protocol.record import DispatchRequest
from rmq.store.checkpoint import StoreCheckpoint
from rmq.store.config import MessageStoreConfig
from rmq.store.index import IndexService

TOPIC = "BenchmarkTest"


def make_requests(n: int, seed: int = 7) -> list[DispatchRequest]:
    rnd = random.Random(seed)
    gen = UniqueIdGenerator()
    now = int(time.time() * 1000)
    reqs = []
    off = 0
    for i in range(n):
        ntok = 1 + (i % 2)
        keys = " ".join(f"order-{rnd.randrange(10**9)}" for _ in range(ntok))
        size = 200 + rnd.randrange(800)
        reqs.append(
            DispatchRequest(
                topic=TOPIC,
                queue_id=i % 8,
                commit_log_offset=off,
                msg_size=size,
                tags_code=0,
                store_timestamp=now + i // 100,
                consume_queue_offset=i // 8,
                keys=keys,
                uniq_key=gen.next_id(now + i // 100),
                sys_flag=0,
            )
        )
        off += size
    return reqs


def count_keys(reqs: list[DispatchRequest]) -> int:
    return sum(1 + len([k for k in (r.keys or "").split(" ") if k]) for r in reqs)


def new_service(root: str) -> IndexService:
    cfg = MessageStoreConfig(storePathRootDir=root)
    return IndexService(cfg, StoreCheckpoint(cfg.checkpoint_path))


def run(reqs: list[DispatchRequest], batch: int | None) -> tuple[float, IndexService, str]:
    root = tempfile.mkdtemp(prefix="rmq-index-bench-")
    svc = new_service(root)
    # Create the file up front: its fallocate is not what is being measured.
    svc.build_index(reqs[0])
    rest = reqs[1:]
    t0 = time.perf_counter()
    if batch is None:
        b = svc.build_index
        for r in rest:
            b(r)
    else:
        bb = svc.build_index_batch
        for i in range(0, len(rest), batch):
            bb(rest[i : i + batch])
    return time.perf_counter() - t0, svc, root


def cleanup(svc: IndexService, root: str) -> None:
    svc.destroy()
    svc.checkpoint.close()
    for dirpath, _dirnames, filenames in os.walk(root, topdown=False):
        for n in filenames:
            os.unlink(os.path.join(dirpath, n))
        os.rmdir(dirpath)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3, help="best of N runs")
    args = ap.parse_args()
    reqs = make_requests(args.records)
    nkeys = count_keys(reqs[1:])
    nrec = len(reqs) - 1
    print(
        f"{nrec} records, {nkeys} keys ({nkeys / nrec:.2f} keys/record, "
        f"~{len(TOPIC) + 1 + 32} chars per topic#UNIQ_KEY), best of {args.repeat}"
    )
    print(f"{'mode':<28}{'batch':>7}{'keys/s':>14}{'records/s':>14}{'us/key':>9}")
    svc_for_query = None
    for batch in (None, 32, 256, 4096):
        best = None
        for _ in range(args.repeat):
            dt, svc, root = run(reqs, batch)
            if best is None or dt < best:
                best = dt
            if batch == 4096 and svc_for_query is None:
                svc_for_query = (svc, root)
            else:
                cleanup(svc, root)
        mode = "build_index (per record)" if batch is None else "build_index_batch"
        print(f"{mode:<28}{batch or 1:>7}{nkeys / best:>14,.0f}{nrec / best:>14,.0f}{best / nkeys * 1e6:>9.2f}")

    assert svc_for_query is not None
    svc, root = svc_for_query
    rnd = random.Random(1)
    sample = [reqs[rnd.randrange(len(reqs))] for _ in range(20_000)]
    lat_uniq, lat_key, lat_miss = [], [], []
    for r in sample:
        t0 = time.perf_counter()
        res = svc.query_offset(TOPIC, r.uniq_key, 32, 0, 2**62)
        lat_uniq.append(time.perf_counter() - t0)
        assert r.commit_log_offset in res.phy_offsets
        k = r.keys.split(" ")[0]
        t0 = time.perf_counter()
        svc.query_offset(TOPIC, k, 32, 0, 2**62)
        lat_key.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        svc.query_offset(TOPIC, "no-such-key-" + k, 32, 0, 2**62)
        lat_miss.append(time.perf_counter() - t0)
    print()
    print(f"query_offset latency over {len(sample)} queries, {svc.index_files[-1].entry_count:,} entries in the file:")
    print(f"{'query':<22}{'p50 us':>9}{'p99 us':>9}{'max us':>9}")
    for name, lat in (("UNIQ_KEY (hit)", lat_uniq), ("KEYS token (hit)", lat_key), ("absent key", lat_miss)):
        lat.sort()
        print(
            f"{name:<22}{statistics.median(lat) * 1e6:>9.1f}"
            f"{lat[int(len(lat) * 0.99)] * 1e6:>9.1f}{lat[-1] * 1e6:>9.1f}"
        )
    cleanup(svc, root)


if __name__ == "__main__":
    main()
