"""CommitRound: callbacks run inside the commit (not a loop iteration later); awaitable."""

from __future__ import annotations

import asyncio
import logging

import pytest

from rmq.store.commit_round import CommitRound
from rmq.store.results import PutMessageStatus


async def test_callbacks_run_at_once_in_order_and_awaiters_wake() -> None:
    r = CommitRound()
    seen: list[tuple[str, PutMessageStatus]] = []
    r.add_done_callback(lambda x: seen.append(("a", x.result())))
    r.add_done_callback(lambda x: seen.append(("b", x.result())))
    waiter = asyncio.ensure_future(_await(r))
    await asyncio.sleep(0)
    assert not r.done() and not waiter.done() and seen == []
    with pytest.raises(asyncio.InvalidStateError):
        r.result()
    r.set_result(PutMessageStatus.PUT_OK)
    assert seen == [("a", PutMessageStatus.PUT_OK), ("b", PutMessageStatus.PUT_OK)]  # no loop turn needed
    assert await waiter is PutMessageStatus.PUT_OK
    r.set_result(PutMessageStatus.UNKNOWN_ERROR)  # a round ends once
    assert r.result() is PutMessageStatus.PUT_OK and not r.cancelled()
    late: list[PutMessageStatus] = []
    r.add_done_callback(lambda x: late.append(x.result()))
    assert late == [PutMessageStatus.PUT_OK]
    assert await r is PutMessageStatus.PUT_OK


async def _await(r: CommitRound) -> PutMessageStatus:
    return await r


def test_a_failing_callback_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    r = CommitRound()
    got: list[PutMessageStatus] = []

    def boom(_: CommitRound) -> None:
        raise RuntimeError("boom")

    r.add_done_callback(boom)
    r.add_done_callback(lambda x: got.append(x.result()))
    with caplog.at_level(logging.ERROR, logger="rmq.store.commitlog"):
        r.set_result(PutMessageStatus.UNKNOWN_ERROR)
    assert got == [PutMessageStatus.UNKNOWN_ERROR]
    assert any("commit round callback failed" in rec.getMessage() for rec in caplog.records)


def test_after_callbacks_run_once_per_key_after_every_callback() -> None:
    r = CommitRound()
    order: list[str] = []
    r.add_done_callback(lambda _: order.append("answer 1"))
    r.after_callbacks("conn-a", lambda: order.append("flush a"))
    r.add_done_callback(lambda _: order.append("answer 2"))
    r.after_callbacks("conn-a", lambda: order.append("flush a again"))  # same key: once
    r.after_callbacks("conn-b", lambda: order.append("flush b"))
    r.set_result(PutMessageStatus.PUT_OK)
    assert order == ["answer 1", "answer 2", "flush a", "flush b"]
