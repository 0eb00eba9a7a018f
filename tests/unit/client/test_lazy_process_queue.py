"""The process queue with pulled batches kept undecoded until consumed: counts, sizes and
offsets from the header scan, out-of-order completion, tag-filtered records, orderly takes,
and the concurrent service taking a raw batch."""

from __future__ import annotations

import asyncio
import gc
import random
import zlib

from rmq.client.consume_concurrently import ConsumeResult
from rmq.client.message import PullResult, PullStatus
from rmq.client.process_queue import ProcessQueue, PulledBatch
from rmq.client.pull_api import PullAPIWrapper
from rmq.protocol.bodies import MessageQueue, SubscriptionData
from rmq.protocol.message import MessageConst, SysFlag, decode_records_batch, scan_records
from tests.unit.client.records import record
from tests.unit.client.test_consume_path import service

MQ = MessageQueue("T", "b", 0)


def body(offsets: range | list[int], tags: dict[int, str] | None = None) -> bytes:
    """A pull body: records at ``offsets`` whose body is ``offset`` bytes long (+1)."""
    return b"".join(record(o, b"x" * (o + 1), {"TAGS": (tags or {}).get(o, "a"), "UNIQ_KEY": f"u{o}"}) for o in offsets)


def pulled(offsets: range | list[int], tags: dict[int, str] | None = None, want: set[str] | None = None) -> PulledBatch:
    sub = SubscriptionData.build("T", "||".join(sorted(want)) if want else "*", None, 0)
    result = PullResult(PullStatus.FOUND, 0, 0, 1000, body=body(offsets, tags))
    batch = PullAPIWrapper(None, "G").pulled_batch(MQ, result, sub)  # type: ignore[arg-type]
    assert batch is not None and result.body is None
    return batch


def test_an_undecoded_batch_counts_messages_and_body_bytes_from_the_header_scan():
    pq = ProcessQueue()
    b = pulled(range(10, 20))
    assert b.data is not None and b.msgs is None  # nothing decoded
    assert pq.put_batch(b, 25) is True
    assert pq.msg_count == 10 and pq.msg_size == sum(o + 1 for o in range(10, 20))
    assert pq.queue_offset_max == 19 and pq.msg_acc_cnt == 6 and pq.min_offset == 10 and pq.max_span() == 9
    assert pq.cached_range() == (10, 19, 10)
    assert pq.message_at(10) is None  # not taken yet: nothing decoded to show
    assert b.msgs is None
    msgs = pq.messages(b)
    assert [m.queue_offset for m in msgs] == list(range(10, 20)) and b.data is None
    assert msgs[0].properties[MessageConst.MIN_OFFSET] == "0"
    assert msgs[0].properties[MessageConst.MAX_OFFSET] == "1000"
    assert pq.message_at(12) is msgs[2]


def test_out_of_order_completion_commits_the_smallest_in_flight():
    rnd = random.Random(3)
    pq = ProcessQueue()
    in_flight: set[int] = set()
    nxt = 0
    for _ in range(100):
        n = rnd.randint(1, 32)
        b = pulled(range(nxt, nxt + n))
        pq.put_batch(b, nxt + n)
        msgs = pq.messages(b)
        in_flight.update(range(nxt, nxt + n))
        nxt += n
        assert pq.msg_count == len(in_flight) and pq.msg_size == sum(o + 1 for o in in_flight)
        done = rnd.sample(sorted(in_flight), rnd.randint(0, len(in_flight)))
        by_offset = {m.queue_offset: m for m in msgs}
        for off in done:
            in_flight.discard(off)
            m = by_offset.get(off) or pq.message_at(off)
            assert m is not None
            assert pq.remove_messages([m]) == (min(in_flight) if in_flight else nxt)
        assert pq.min_offset == (min(in_flight) if in_flight else None)
        assert pq.cached_range() == ((min(in_flight), max(in_flight), len(in_flight)) if in_flight else None)
    assert len(pq._order) - pq._head <= 16  # consumed batches are passed and compacted


def test_a_consumed_batch_lets_go_of_its_bytes_and_messages():
    pq = ProcessQueue()
    b = pulled(range(4))
    pq.put_batch(b, 4)
    msgs = pq.messages(b)
    assert pq.remove_messages(msgs[:3]) == 3 and b.msgs is not None
    assert pq.remove_messages(msgs[3:]) == 4 and b.msgs is None and b.data is None


def test_tag_filtered_records_are_left_out_and_the_offset_passes_them():
    tags = {1: "b", 2: "b", 5: "c"}
    assert scan_records(body(range(6), tags), frozenset({b"a"})) is not None
    b = pulled(range(6), tags, want={"a"})
    assert list(b.offsets) == [0, 3, 4] and b.gappy
    pq = ProcessQueue()
    pq.put_batch(b, 6)
    assert pq.msg_count == 3 and pq.msg_size == 1 + 4 + 5 and pq.cached_range() == (0, 4, 3)
    msgs = pq.messages(b)
    assert [(m.queue_offset, m.tags) for m in msgs] == [(0, "a"), (3, "a"), (4, "a")]
    assert pq.remove_messages(msgs[:1]) == 3  # 1 and 2 were filtered out: not waited for
    assert pq.remove_messages(msgs[1:]) == 5
    # the eager decode filters the same records
    eager = [m.queue_offset for m in decode_records_batch(body(range(6), tags)) if m.tags == "a"]
    assert eager == list(b.offsets)


def test_a_compressed_or_truncated_body_is_decoded_at_once():
    raw = record(0, b"z") + record(1, zlib.compress(b"zz" * 50), sys_flag=SysFlag.COMPRESSED)
    assert scan_records(raw) is None
    b = PullAPIWrapper(None, "G").pulled_batch(MQ, PullResult(PullStatus.FOUND, 0, 0, 9, body=raw), None)  # type: ignore[arg-type]
    assert b is not None and b.msgs is not None and list(b.offsets) == [0, 1]
    assert list(b.sizes) == [1, 100] and b.msgs[1].body == b"zz" * 50  # the inflated size, as before
    result = PullResult(PullStatus.FOUND, 0, 0, 9, body=raw[: len(record(0, b"z")) + 5])
    b = PullAPIWrapper(None, "G").pulled_batch(MQ, result, None)  # type: ignore[arg-type]
    assert b is not None and list(b.offsets) == [0]  # the decode ends the batch at the bad record


def test_orderly_takes_in_offset_order_across_undecoded_batches_and_puts_back():
    pq = ProcessQueue()
    first, second = pulled(range(0, 3)), pulled(range(3, 6))
    assert pq.put_batch(first, 6) is True
    assert pq.put_batch(second, 6) is False  # the consume task is running
    assert second.msgs is None
    taken = pq.take_messages(4)
    assert [m.queue_offset for m in taken] == [0, 1, 2, 3] and pq.consuming_count == 4
    assert pq.cached_range() == (4, 5, 2) and pq.consuming_range() == (0, 3, 4)
    pq.make_message_to_consume_again(taken[2:])  # suspended: 2 and 3 come first again
    assert pq.commit() == 2 and pq.msg_count == 4
    assert [m.queue_offset for m in pq.take_messages(3)] == [2, 3, 4]
    assert pq.commit() == 5 and pq.msg_count == 1 and pq.msg_size == 6
    assert [m.queue_offset for m in pq.take_messages(3)] == [5]
    assert pq.take_messages(3) == [] and pq.consuming is False
    assert pq.commit() == 6 and pq.msg_count == 0 and pq.msg_size == 0
    assert pq.put_batch(pulled(range(6, 8)), 8) is True


def test_orderly_takes_a_re_pull_below_the_last_batch_in_order():
    pq = ProcessQueue()
    pq.put_batch(pulled(range(5, 8)), 8)
    pq.put_batch(pulled(range(3, 7)), 8)  # 5 and 6 already in flight: only 3 and 4 go in
    assert pq.msg_count == 5 and pq.cached_range() == (3, 7, 5)
    assert [m.queue_offset for m in pq.take_messages(10)] == [3, 4, 5, 6, 7]
    assert pq.commit() == 8 and pq.msg_count == 0


async def test_the_concurrent_service_decodes_a_raw_batch_when_a_worker_takes_it():
    seen: list[int] = []

    async def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        seen.extend(m.queue_offset for m in msgs)
        return ConsumeResult.SUCCESS if msgs[0].queue_offset != 6 else ConsumeResult.RECONSUME_LATER

    svc, consumer = service(listener, batch=2, threads=3)
    pq = ProcessQueue()
    b = pulled(range(20))
    pq.put_batch(b, 20)
    svc.submit_consume_request(b, pq, MQ)
    assert b.msgs is None  # queued undecoded
    svc.start()
    assert await svc.wait_idle(pq, 1.0)
    assert sorted(seen) == list(range(20))
    assert svc.sent_back == [6, 7]  # the request (6, 7) answered RECONSUME_LATER goes back
    assert consumer.offset_store.offsets[MQ] == 20 and pq.msg_count == 0 and pq.msg_size == 0
    await svc.shutdown(0)


def test_a_cached_batch_is_few_gc_tracked_objects():
    b = pulled(range(32))
    gc.collect()  # tuples of ints are untracked by the GC's first pass over them
    tracked = [o for o in (b, b.data, b.offsets, b.sizes, b.live, b.msgs) if gc.is_tracked(o)]
    assert tracked == [b]  # the messages, their dicts and strings do not exist yet
    b = pulled([0, 2, 3])
    gc.collect()
    assert isinstance(b.offsets, tuple) and not gc.is_tracked(b.offsets)


async def test_a_dropped_queue_does_not_decode_its_queued_batches():
    calls: list[int] = []

    async def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        calls.append(len(msgs))
        return ConsumeResult.SUCCESS

    svc, _ = service(listener)
    pq = ProcessQueue()
    b = pulled(range(8))
    pq.put_batch(b, 8)
    svc.submit_consume_request(b, pq, MQ)
    pq.dropped = True
    svc.start()
    assert await svc.wait_idle(pq, 1.0)
    await asyncio.sleep(0)
    assert calls == [] and b.msgs is None
    await svc.shutdown(0)


async def test_pull_thresholds_for_topic_are_shared_out_over_the_queues_held():
    from rmq.client.push_consumer import PushConsumer

    c = PushConsumer("G", "127.0.0.1:9876", pull_threshold_for_topic=1000, pull_threshold_size_for_topic=10)
    for i in range(4):
        c.rebalance.process_queue_table[MessageQueue("T", "b", i)] = ProcessQueue()
    await c.rebalance.message_queue_changed("T", set(), set())
    assert c.pull_threshold_for_queue == 250 and c.pull_threshold_size_for_queue == 2
    off = PushConsumer("G", "127.0.0.1:9876")  # -1: off, as Java's default
    off.rebalance.process_queue_table[MQ] = ProcessQueue()
    await off.rebalance.message_queue_changed("T", set(), set())
    assert off.pull_threshold_for_queue == 1000 and off.pull_threshold_size_for_queue == 100


def test_orderly_keeps_its_place_when_consumed_batches_are_compacted_away():
    pq = ProcessQueue()
    for start in range(0, 80, 2):
        pq.put_batch(pulled(range(start, start + 2)), 80)
    seen: list[int] = []
    for _ in range(80):
        taken = pq.take_messages(1)
        seen += [m.queue_offset for m in taken]
        assert pq.commit() == seen[-1] + 1
    assert seen == list(range(80)) and pq.msg_count == 0 and pq.take_messages(1) == []
