"""BROADCASTING consumption: every consumer gets every message; offsets live in a local
file per client (``<dir>/<clientId>/<group>/offsets.json``), so a restarted consumer
resumes where it stopped.

How many duplicates a crash can cause: offsets are written every
``persist_consumer_offset_interval`` (5 s; and on shutdown), so a consumer killed -9
gets again at most what it consumed since the last write. The crash test kills a
consumer process with a 1 s interval and checks that only messages consumed in the
last interval come back, never older ones.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from rmq.client import ConsumeFromWhere, ConsumeResult, LitePullConsumer, Message, MessageModel, Producer, PushConsumer
from rmq.client.config import local_ip
from rmq.protocol.bodies import loads_object_keyed_map
from tests.integration.admin_util import REPO, repo_env
from tests.integration.rigs import module_cluster
from tests.integration.test_client import create_topic, poll_at_least, unique, wait_until

pytestmark = pytest.mark.timeout(120)


cluster = module_cluster("broadcast")


class Sink:
    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def __call__(self, msgs, ctx):
        self.bodies.extend(m.body for m in msgs)
        return ConsumeResult.SUCCESS


def broadcasting(name: str, store: Path) -> dict[str, Any]:
    """Consumer options of a broadcasting instance ``name`` keeping its offsets under ``store``."""
    return dict(
        message_model=MessageModel.BROADCASTING,
        instance_name=name,
        local_offset_store_dir=str(store),
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )


def broadcast_consumer(cluster, group: str, topic: str, name: str, sink, store: Path, **kw) -> PushConsumer:
    c = PushConsumer(group, cluster.namesrv, listener=sink, **broadcasting(name, store), **kw)
    c.subscribe(topic, "*")
    return c


async def send(cluster, topic: str, bodies: list[bytes]) -> None:
    async with Producer(unique("BcP"), cluster.namesrv) as p:
        for b in bodies:
            await p.send(Message(topic, b))


def offsets_file(store: Path, name: str, group: str) -> Path:
    return store / f"{local_ip()}@{name}" / group / "offsets.json"


async def test_every_consumer_gets_every_message_and_a_restart_resumes(cluster, tmp_path):
    topic, group = unique("BcT"), unique("BcG")
    await create_topic(cluster.namesrv, cluster.broker, topic, 4)
    store = tmp_path / "offsets"
    names = [unique("bc") for _ in range(3)]
    sinks = [Sink() for _ in names]
    consumers = [broadcast_consumer(cluster, group, topic, n, s, store) for n, s in zip(names, sinks, strict=False)]
    first = [f"a{i}".encode() for i in range(40)]
    try:
        for c in consumers:
            await c.start()
        await send(cluster, topic, first)
        await wait_until(lambda: all(len(s.bodies) >= 40 for s in sinks), 20, what="every consumer has every message")
        await asyncio.sleep(0.3)
    finally:
        for c in consumers:
            await c.shutdown()
    for s in sinks:
        assert sorted(s.bodies) == sorted(first)  # each one, once
    # the file: RocketMQ's OffsetSerializeWrapper, one entry per queue, 40 in all
    f = offsets_file(store, names[0], group)
    table = {k["queueId"]: v for k, v in loads_object_keyed_map(f.read_bytes(), "offsetTable") if k["topic"] == topic}
    assert sorted(table) == [0, 1, 2, 3] and sum(table.values()) == 40
    assert not f.with_name("offsets.json.tmp").exists()

    second = [f"b{i}".encode() for i in range(20)]
    await send(cluster, topic, second)
    again = Sink()
    c = broadcast_consumer(cluster, group, topic, names[0], again, store)
    await c.start()
    try:
        await wait_until(lambda: len(again.bodies) >= 20, 20, what="the new messages")
        await asyncio.sleep(1.0)
    finally:
        await c.shutdown()
    assert sorted(again.bodies) == sorted(second)  # nothing of the first 40 again


CRASHING_CONSUMER = textwrap.dedent("""
    import asyncio, sys, threading
    from rmq.client import ConsumeFromWhere, ConsumeResult, MessageModel, PushConsumer

    out = threading.Lock()

    def listener(msgs, ctx):                      # runs on a pool of threads
        with out:
            for m in msgs:
                sys.stdout.write(f"GOT {m.body.decode()}\\n")
            sys.stdout.flush()
        return ConsumeResult.SUCCESS

    async def main(ns, topic, group, name, store):
        c = PushConsumer(group, ns, listener=listener, message_model=MessageModel.BROADCASTING,
                         instance_name=name, local_offset_store_dir=store,
                         persist_consumer_offset_interval=1000,
                         consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        c.subscribe(topic, "*")
        await c.start()
        print("STARTED", flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main(*sys.argv[1:6]))
""")


@pytest.mark.slow
async def test_a_crash_redelivers_only_what_was_consumed_since_the_last_write(cluster, tmp_path):
    topic, group, name = unique("BcT"), unique("BcG"), unique("crash")
    await create_topic(cluster.namesrv, cluster.broker, topic, 2)
    store = tmp_path / "offsets"
    proc = subprocess.Popen(
        [sys.executable, "-c", CRASHING_CONSUMER, cluster.namesrv, topic, group, name, str(store)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=repo_env(),
        cwd=REPO,
        start_new_session=True,
    )
    lines: list[str] = []
    reader = threading.Thread(
        target=lambda: lines.extend(ln.decode().strip() for ln in iter(proc.stdout.readline, b"")), daemon=True
    )
    reader.start()
    got = lambda prefix: {ln.split()[1] for ln in lines if ln.startswith(f"GOT {prefix}")}  # noqa: E731
    try:
        await wait_until(lambda: "STARTED" in lines, 30, what="the consumer process")
        old = [f"old{i}" for i in range(10)]
        await send(cluster, topic, [b.encode() for b in old])
        await wait_until(lambda: got("old") == set(old), 20, what="the old messages")
        await asyncio.sleep(2.5)  # > 1 s: their offsets are on disk
        recent = [f"new{i}" for i in range(10)]
        await send(cluster, topic, [b.encode() for b in recent])
        await wait_until(lambda: got("new") == set(recent), 20, what="the recent messages")
    finally:
        proc.kill()  # kill -9: no shutdown, no last write
        proc.wait(10)
        reader.join(5)
        proc.stdout.close()
    again = Sink()
    c = broadcast_consumer(cluster, group, topic, name, again, store)
    await c.start()
    try:
        await asyncio.sleep(2.0)
    finally:
        await c.shutdown()
    redelivered = {b.decode() for b in again.bodies}
    assert redelivered <= set(recent), redelivered  # never anything older
    assert len(again.bodies) == len(redelivered)


async def test_lite_pull_broadcast_keeps_local_offsets(cluster, tmp_path):
    topic, group, name = unique("BcT"), unique("BcG"), unique("lite")
    await create_topic(cluster.namesrv, cluster.broker, topic, 2)
    store = tmp_path / "offsets"

    def lite() -> LitePullConsumer:
        c = LitePullConsumer(group, cluster.namesrv, **broadcasting(name, store))
        c.subscribe(topic, "*")
        return c

    await send(cluster, topic, [f"x{i}".encode() for i in range(10)])
    c = lite()
    await c.start()
    try:
        await poll_at_least(c, 10, "10 polled", 20)
        await c.commit()
    finally:
        await c.shutdown()
    assert offsets_file(store, name, group).exists()
    await send(cluster, topic, [b"y0", b"y1"])
    c = lite()
    await c.start()
    try:
        more = [m.body for m in await poll_at_least(c, 2, "the 2 new ones", 20)]
        more.extend(m.body for m in await c.poll(500))
    finally:
        await c.shutdown()
    assert sorted(more) == [b"y0", b"y1"]
