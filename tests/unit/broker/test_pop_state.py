"""POP state without a broker: FIFO OrderInfo blocking / counts / commit, and the revive
loop's merge of acks into cks and its progress (oldest pending ck) over a fake log."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from rmq.broker.pop.order_info import ConsumerOrderInfoManager
from rmq.broker.pop.revive import PopReviveService, _ReviveQueue, original_topic
from rmq.common.clock import now_ms
from rmq.protocol.message import MessageExt
from rmq.protocol.pop import ACK_TAG, CK_TAG, REVIVE_GROUP, AckMsg, PopCheckPoint
from tests.unit.broker.fakes import FakeOffsets


def test_order_info_blocks_counts_and_commits(tmp_path: Path) -> None:
    m = ConsumerOrderInfoManager(str(tmp_path))
    assert m.update("a1", "T", "g", 0, 1000, 500, [5, 6]) == {5: 0, 6: 0}
    assert m.check_block(None, "T", "g", 0, 500, now=1200)
    assert not m.check_block("a1", "T", "g", 0, 500, now=1200)  # the same attempt retried
    assert not m.check_block(None, "T", "g", 0, 500, now=1500)  # expired
    assert m.update("a2", "T", "g", 0, 1600, 500, [5, 6]) == {5: 1, 6: 1}  # popped again: + 1
    assert m.commit_and_next("T", "g", 0, 6, 1600) == 5  # 5 not acked yet
    assert m.commit_and_next("T", "g", 0, 5, 999) == -2  # an older pop's handle
    assert m.commit_and_next("T", "g", 0, 5, 1600) == 7
    assert not m.check_block(None, "T", "g", 0, 500, now=1700)  # all acked
    m.update_next_visible_time("T", "g", 0, 5, 1600, 9999)
    again = ConsumerOrderInfoManager(str(tmp_path))
    again.table = {}
    again.file.write_blocking(m.snapshot())
    again.load()
    info = again.get("T", "g", 0)
    assert info is not None and info.consumed == {5: 1, 6: 1} and info.next_visible == {5: 9999}


def _rec(tag: str, body: bytes, qoff: int) -> MessageExt:
    return MessageExt(0, 0, 0, 0, 0, qoff, 0, 0, 0, b"", 0, b"", 0, 0, body, "rev", {"TAGS": tag})


def test_revive_merges_acks_and_commits_progress_to_the_oldest_pending_ck() -> None:
    offsets = FakeOffsets()
    svc = PopReviveService("rev", Any, Any, offsets, Any)  # type: ignore[arg-type]
    q = _ReviveQueue(0, 0)
    done = PopCheckPoint(10, 1000, 60_000, 1, "T", "g", "b", [0, 1])
    waiting = PopCheckPoint(12, now_ms(), 60_000, 1, "T", "g", "b", [0])
    svc._apply(q, _rec(CK_TAG, done.encode(), 0))
    svc._apply(q, _rec(CK_TAG, waiting.encode(), 1))
    for ao in (10, 11):
        svc._apply(q, _rec(ACK_TAG, AckMsg([ao], 10, "g", "T", 1, 1000, "b").encode(), 2))
    svc._apply(q, _rec(ACK_TAG, AckMsg([99], 10, "g", "T", 1, 5, "b").encode(), 3))  # no such ck: ignored
    svc._apply(q, _rec(CK_TAG, b"garbage", 4))  # logged and skipped
    q.read_offset = 5
    svc._queues = [q]
    assert svc.backlog() == 1  # the fully acked ck holds nothing back
    asyncio.run(svc._revive_due(q))  # nothing is due: the acked ck goes, the other waits
    assert list(q.pending) == [waiting.key()]
    svc._commit_progress(q)
    assert offsets.query_offset(REVIVE_GROUP, "rev", 0) == 1
    assert original_topic("%RETRY%g_T", "g") == "T" and original_topic("T", "g") == "T"
