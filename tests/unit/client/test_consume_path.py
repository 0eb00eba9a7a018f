"""The concurrent consume path without a broker: ProcessQueue's offset bookkeeping under
out-of-order completion, and ConsumeMessageConcurrentlyService's request queue (workers,
batch size, retries, wait_idle, shutdown)."""

from __future__ import annotations

import asyncio
import random
import threading
import zlib
from types import SimpleNamespace

from rmq.client.consume_concurrently import ConsumeConcurrentlyContext, ConsumeMessageConcurrentlyService, ConsumeResult
from rmq.client.consumer_base import MessageModel
from rmq.client.consumer_stats import ConsumerStatsManager
from rmq.client.process_queue import ProcessQueue
from rmq.protocol.bodies import MessageQueue
from rmq.protocol.message import MessageConst, MessageExt, SysFlag, decode_records, decode_records_batch
from tests.unit.client.records import ext, record

MQ = MessageQueue("T", "b", 0)


# --------------------------------------------------------------------------- process queue
def test_commit_offset_never_passes_an_unconsumed_message_in_random_completion_order():
    rnd = random.Random(7)
    pq = ProcessQueue()
    in_flight: set[int] = set()
    committed = -1
    nxt = 0
    for _ in range(300):
        batch = [ext(nxt + i, body=b"ab") for i in range(rnd.randint(1, 40))]
        nxt += len(batch)
        pq.put_messages(batch)
        in_flight.update(m.queue_offset for m in batch)
        assert pq.msg_count == len(in_flight) and pq.msg_size == 2 * len(in_flight)
        done = rnd.sample(sorted(in_flight), rnd.randint(0, len(in_flight)))
        for off in done:
            in_flight.discard(off)
            offset = pq.remove_messages([pq.message_at(off) or ext(off)])
            want = min(in_flight) if in_flight else nxt
            assert offset == want  # the smallest in flight, or one past the largest seen
            assert offset >= committed
            committed = offset
        assert pq.min_offset == (min(in_flight) if in_flight else None)
        assert pq.max_span() == ((nxt - 1) - min(in_flight) if in_flight else 0)
    assert len(pq._order) - pq._head <= max(2 * len(in_flight), 1100)  # the passed head is compacted


def test_out_of_order_and_duplicate_puts_keep_offset_order():
    pq = ProcessQueue()
    pq.put_messages([ext(i) for i in (20, 21, 22)])
    assert pq.remove_messages([ext(20)]) == 21
    pq.put_messages([ext(20), ext(21), ext(19)])  # a re-pull of offsets seen before
    assert pq.msg_count == 4 and pq.min_offset == 19
    assert pq.cached_range() == (19, 22, 4)
    assert pq.remove_messages([ext(19), ext(20)]) == 21
    assert pq.remove_messages([ext(22)]) == 21
    assert pq.remove_messages([ext(21)]) == 23
    assert pq.min_offset is None and pq.cached_range() is None and pq.msg_count == 0


def test_orderly_take_and_put_back_with_many_messages():
    pq = ProcessQueue()
    pq.put_messages([ext(i) for i in range(3000)])
    taken = []
    while len(taken) < 2500:
        taken += pq.take_messages(100)
    assert [m.queue_offset for m in taken] == list(range(2500))
    pq.make_message_to_consume_again(taken[-10:])
    assert [m.queue_offset for m in pq.take_messages(12)] == list(range(2490, 2502))
    assert pq.commit() == 2502 and pq.msg_count == 498


# --------------------------------------------------------------------------- the service
class FakeStore:
    def __init__(self) -> None:
        self.offsets: dict[MessageQueue, int] = {}

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        if not increase_only or offset > self.offsets.get(mq, -1):
            self.offsets[mq] = offset


def service(listener, *, batch: int = 1, threads: int = 4, send_back_ok: bool = True):  # type: ignore[no-untyped-def]
    consumer = SimpleNamespace(
        group="G",
        instance=None,
        offset_store=FakeStore(),
        message_model=MessageModel.CLUSTERING,
        consume_thread_max=threads,
        consume_message_batch_max_size=batch,
        local_retry_delay_ms=10,
        consume_timeout_ms=0,
        send_back_to_broker=True,
        reset_retry_topic=lambda msgs: None,
    )
    svc = ConsumeMessageConcurrentlyService(consumer, listener)
    svc.sent_back = []  # type: ignore[attr-defined]

    async def send_back(m: MessageExt, ctx: ConsumeConcurrentlyContext, mq: MessageQueue) -> bool:
        svc.sent_back.append(m.queue_offset)  # type: ignore[attr-defined]
        return send_back_ok

    svc.send_message_back = send_back  # type: ignore[method-assign]
    return svc, consumer


def started(listener, n: int, **kw):  # type: ignore[no-untyped-def]
    """A started service with messages 0..n-1 pulled into a queue and submitted."""
    svc, consumer = service(listener, **kw)
    svc.start()
    pq = ProcessQueue()
    msgs = [ext(i) for i in range(n)]
    pq.put_messages(msgs)
    svc.submit_consume_request(msgs, pq, MQ)
    return svc, consumer, pq, msgs


async def test_requests_respect_the_batch_size_and_the_worker_count_and_commit_the_smallest():
    seen: list[list[int]] = []
    running = [0, 0]  # now, max
    gate = asyncio.Event()

    async def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        running[0] += 1
        running[1] = max(running)
        seen.append([m.queue_offset for m in msgs])
        if msgs[0].queue_offset == 0:
            await gate.wait()  # the first request is slow: the offset must wait for it
        else:
            await asyncio.sleep(0)
        running[0] -= 1
        return ConsumeResult.SUCCESS

    svc, consumer, pq, msgs = started(listener, 20, batch=3, threads=4)
    for _ in range(50):
        await asyncio.sleep(0)
    assert sorted(o for b in seen for o in b) == list(range(20))
    assert all(len(b) <= 3 for b in seen) and running[1] <= 4
    assert consumer.offset_store.offsets[MQ] == 0  # offset 0 still being consumed
    assert not await svc.wait_idle(pq, 0.01)
    gate.set()
    assert await svc.wait_idle(pq, 1.0)
    assert consumer.offset_store.offsets[MQ] == 20 and pq.msg_count == 0
    await svc.shutdown(0)


async def test_reconsume_later_sends_back_and_the_offset_moves_on():
    def listener(msgs, ctx):  # type: ignore[no-untyped-def]  # a blocking listener: the thread pool
        assert msgs[0].properties[MessageConst.CONSUME_START_TIMESTAMP]
        return ConsumeResult.RECONSUME_LATER if msgs[0].queue_offset % 2 else ConsumeResult.SUCCESS

    svc, consumer, pq, msgs = started(listener, 6, threads=2)
    assert await svc.wait_idle(pq, 5.0)
    assert sorted(svc.sent_back) == [1, 3, 5]  # type: ignore[attr-defined]
    assert consumer.offset_store.offsets[MQ] == 6
    await svc.shutdown(0)


async def test_failed_send_back_is_consumed_again_locally_and_holds_the_offset():
    calls: dict[int, int] = {}

    async def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        off = msgs[0].queue_offset
        calls[off] = calls.get(off, 0) + 1
        return ConsumeResult.RECONSUME_LATER if off == 1 and calls[off] == 1 else ConsumeResult.SUCCESS

    svc, consumer, pq, msgs = started(listener, 3, send_back_ok=False)
    assert await svc.wait_idle(pq, 1.0)
    assert consumer.offset_store.offsets[MQ] == 1  # 1 waits for its local retry
    for _ in range(100):
        if calls.get(1) == 2 and not svc._pending:
            break
        await asyncio.sleep(0.01)
    assert calls == {0: 1, 1: 2, 2: 1} and msgs[1].reconsume_times == 1
    assert consumer.offset_store.offsets[MQ] == 3
    await svc.shutdown(0)


async def test_shutdown_lets_queued_requests_finish_within_the_wait():
    done: list[int] = []

    async def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0.001)
        done.append(msgs[0].queue_offset)
        return ConsumeResult.SUCCESS

    svc, _, pq, msgs = started(listener, 10, threads=2)
    await svc.shutdown(5000)
    assert sorted(done) == list(range(10))
    assert all(t.done() for t in svc.tasks)


async def test_a_listener_that_never_suspends_does_not_starve_the_loop():
    async def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        return ConsumeResult.SUCCESS

    svc, consumer, pq, msgs = started(listener, 1000, threads=1)
    ticks = 0
    while svc._pending:
        await asyncio.sleep(0)
        ticks += 1
    assert ticks >= 1000 // 32 - 1  # the worker yielded every few dozen requests
    assert consumer.offset_store.offsets[MQ] == 1000
    await svc.shutdown(0)


# --------------------------------------------------------------------------- batch decode
def _fields(m: MessageExt) -> tuple:  # type: ignore[type-arg]
    return tuple(getattr(m, f) for f in MessageExt.__dataclass_fields__)


def test_batch_decoder_gives_what_decode_records_gives():
    rnd = random.Random(3)
    odd_props = [
        "",
        "A\x01b\x02",
        "A\x01b",
        "A\x01b\x02\x02C\x01\x01d\x02",  # an empty segment; a value holding \x01
        "\x01x\x02A\x01\x02B\x01y\x02",  # empty name, empty value: skipped
        "A\x01x\x02A\x01\x02",  # an empty value does not override
        "A\x01x\x02A\x01z\x02",  # the last one wins
        "noseparator\x02A\x01b\x02",
        "K\x01ü€\x02",
    ]
    records = [record(i, body=bytes([i % 256]) * rnd.randint(0, 50), props=None) for i in range(5)]
    for i, props in enumerate(odd_props):
        # a record with empty properties, its properties swapped for the raw string under test
        raw = props.encode()
        base = record(100 + i, props={})[:-2]  # everything up to the properties length
        rec = bytearray(base + len(raw).to_bytes(2, "big") + raw)
        rec[0:4] = len(rec).to_bytes(4, "big")
        records.append(bytes(rec))
    records.append(record(200, topic="%RETRY%G", props={MessageConst.RETRY_TOPIC: "T"}))
    records.append(record(201, body=zlib.compress(b"z" * 100), sys_flag=SysFlag.COMPRESSED))
    body = b"".join(records)
    want = [_fields(m) for m in decode_records(body)]
    assert len(want) == len(records)
    assert [_fields(m) for m in decode_records_batch(body)] == want
    assert [_fields(m) for m in decode_records_batch(memoryview(body))] == want
    # a bad record ends the batch in both, wherever it is cut or spoilt
    for _ in range(300):
        spoilt = bytearray(body)
        k = rnd.randrange(len(spoilt))
        if rnd.random() < 0.5:
            spoilt = spoilt[:k]
        else:
            spoilt[k] = rnd.randrange(256)
        want = [_fields(m) for m in decode_records(bytes(spoilt))]
        assert [_fields(m) for m in decode_records_batch(bytes(spoilt))] == want


async def test_consume_figures_reach_the_stats_when_the_workers_run_dry():
    async def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        return ConsumeResult.RECONSUME_LATER if msgs[0].queue_offset == 3 else ConsumeResult.SUCCESS

    stats = ConsumerStatsManager()
    svc, consumer = service(listener, threads=2)
    consumer.instance = SimpleNamespace(consumer_stats=stats)
    svc.start()
    pq = ProcessQueue()
    msgs = [ext(i) for i in range(10)]
    pq.put_messages(msgs)
    svc.submit_consume_request(msgs, pq, MQ)
    assert await svc.wait_idle(pq, 1.0)
    for _ in range(5):
        await asyncio.sleep(0)
    item = stats._items[("G", "T")]
    assert item.consume_ok.totals(stats.clock())[0] == 9
    assert item.consume_failed.totals(stats.clock())[0] == 1
    assert item.consume_rt.totals(stats.clock())[1] == 10  # one RT sample per listener call
    await svc.shutdown(0)


async def test_runs_of_requests_under_a_backlog_settle_together_and_never_pass_a_slow_one():
    gate = asyncio.Event()
    calls: list[int] = []

    async def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        off = msgs[0].queue_offset
        calls.append(len(msgs))
        if off == 50:
            await gate.wait()
        return ConsumeResult.RECONSUME_LATER if off % 7 == 3 else ConsumeResult.SUCCESS

    svc, consumer, pq, msgs = started(listener, 400, threads=2)
    for _ in range(200):
        await asyncio.sleep(0)
    assert consumer.offset_store.offsets[MQ] <= 50 and pq.message_at(50) is not None
    gate.set()
    assert await svc.wait_idle(pq, 2.0)
    assert set(calls) == {1} and len(calls) == 400  # consume_message_batch_max_size still 1
    assert sorted(svc.sent_back) == [i for i in range(400) if i % 7 == 3]  # type: ignore[attr-defined]
    assert consumer.offset_store.offsets[MQ] == 400 and pq.msg_count == 0
    await svc.shutdown(0)


async def test_a_blocking_listener_under_a_backlog_runs_requests_in_one_thread_job_each_run():
    seen: list[tuple[int, int]] = []

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        off = msgs[0].queue_offset
        assert len(msgs) == 1 and msgs[0].properties[MessageConst.CONSUME_START_TIMESTAMP]
        seen.append((off, threading.get_ident()))
        if off == 11:
            raise RuntimeError("listener bug")  # counted as RECONSUME_LATER
        return ConsumeResult.RECONSUME_LATER if off % 10 == 5 else ConsumeResult.SUCCESS

    svc, consumer, pq, msgs = started(listener, 300, threads=2)
    assert await svc.wait_idle(pq, 5.0)
    assert sorted(o for o, _ in seen) == list(range(300))
    assert sorted(svc.sent_back) == sorted([11] + [i for i in range(300) if i % 10 == 5])  # type: ignore[attr-defined]
    assert consumer.offset_store.offsets[MQ] == 300 and pq.msg_count == 0
    await svc.shutdown(0)
