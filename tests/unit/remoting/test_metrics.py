"""The dispatcher's rpc observer and the metrics building blocks of rmq.remoting.metrics."""

from __future__ import annotations

import asyncio
import threading

import pytest

from rmq.protocol.codes import ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.remoting.metrics import (
    Families,
    LabelledHistograms,
    LoopHistogram,
    LoopSnapshot,
    NodeLabels,
    RpcLatencyRecorder,
)
from tests.unit.waiting import wait_until

from .conftest import echo

pytestmark = pytest.mark.timeout(30)


async def test_observer_sees_sync_async_and_failed_requests_not_oneway_or_taken_over(make_server, make_client):
    seen: list[tuple[int, int, float]] = []
    parked: list = []

    async def slow(conn, cmd):
        await asyncio.sleep(0.05)
        return cmd.create_response(ResponseCode.SYSTEM_BUSY)

    def boom(conn, cmd):
        raise RuntimeError("boom")

    def park(conn, cmd):  # answered later by the processor itself (long polling)
        parked.append((conn, cmd))
        return None

    server = await make_server()
    for code, fn in ((1000, echo), (1001, slow), (1002, boom), (1003, park)):
        server.register_processor(code, fn)
    client = make_client()
    await client.invoke(server.address, RemotingCommand(1000), 3)
    assert seen == []  # no observer: nothing recorded
    server.set_rpc_observer(lambda rq, rs, s: seen.append((rq, rs, s)))
    await client.invoke(server.address, RemotingCommand(1000), 3)
    await client.invoke(server.address, RemotingCommand(1001), 3)
    await client.invoke(server.address, RemotingCommand(1002), 3)
    await client.invoke_oneway(server.address, RemotingCommand(1000))
    fut = asyncio.ensure_future(client.invoke(server.address, RemotingCommand(1003), 3))
    await wait_until(lambda: bool(parked))
    conn, req = parked[0]
    conn.send_response(req.create_response(ResponseCode.SUCCESS))
    await fut
    await client.invoke(server.address, RemotingCommand(9999), 3)  # not supported
    assert [(rq, rs) for rq, rs, _ in seen] == [
        (1000, ResponseCode.SUCCESS),
        (1001, ResponseCode.SYSTEM_BUSY),
        (1002, ResponseCode.SYSTEM_ERROR),
    ]
    assert seen[1][2] >= 0.05 and all(s >= 0 for _, _, s in seen)
    server.set_rpc_observer(None)
    await client.invoke(server.address, RemotingCommand(1000), 3)
    assert len(seen) == 3


def test_histogram_buckets_are_le_and_cumulative_when_exposed():
    h = LoopHistogram((1.0, 5.0))
    for v in (0.5, 1.0, 1.5, 5.0, 7.0):
        h.observe(v)
    assert h.snapshot() == ((2, 2, 1), 15.0)
    f = Families(NodeLabels(cluster="c", node_type="broker", node_id="b"))
    f.histogram("x", "doc", ["k"])
    f.histogram_sample("x", h.bounds, h.snapshot(), ["v"])
    (fam,) = list(f)
    got = {(s.name, s.labels.get("le")): s.value for s in fam.samples}
    assert got == {
        ("x_bucket", "1.0"): 2,
        ("x_bucket", "5.0"): 4,
        ("x_bucket", "+Inf"): 5,
        ("x_count", None): 5,
        ("x_sum", None): 15.0,
    }
    assert all(s.labels["cluster"] == "c" and s.labels["k"] == "v" for s in fam.samples)


def test_rpc_recorder_names_codes_like_rocketmq_5():
    r = RpcLatencyRecorder()
    r(310, 0, 0.002)
    r(310, 0, 0.0005)
    r(12345, 17, 1.0)
    snap = r.snapshot()
    assert snap[(310, 0)] == ((1, 1, 0, 0, 0, 0, 0, 0, 0, 0), 2.5)
    assert RpcLatencyRecorder.label_values((310, 0)) == ("send_message_v2", "success")
    assert RpcLatencyRecorder.label_values((12345, 17)) == ("12345", "topic_not_exist")


def test_labelled_histograms_keep_one_per_label_set():
    h = LabelledHistograms((10.0,))
    h.observe(("a",), 1)
    h.observe(("b",), 20)
    h.observe(("a",), 30)
    assert h.snapshot() == {("a",): ((1, 1), 31.0), ("b",): ((0, 1), 20.0)}


async def test_loop_snapshot_runs_on_the_loop_for_another_thread():
    loop = asyncio.get_running_loop()
    ran_on: list[threading.Thread] = []

    def take() -> int:
        ran_on.append(threading.current_thread())
        return 42

    snap = LoopSnapshot(loop, take)
    assert snap.get() == 42  # on the loop itself: direct call
    got = await asyncio.to_thread(snap.get)  # from another thread: via the loop
    assert got == 42 and ran_on == [threading.main_thread()] * 2

    def broken() -> int:
        raise ValueError("bad state")

    assert await asyncio.to_thread(LoopSnapshot(loop, broken).get) is None

    # a loop that does not answer in time: None, not a hang
    slow = LoopSnapshot(loop, take, timeout=0.1)
    t = threading.Thread(target=lambda: ran_on.append(slow.get()))
    t.start()
    t.join(1)  # blocks the loop past the timeout
    assert ran_on[-1] is None
    await asyncio.sleep(0)
