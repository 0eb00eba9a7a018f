"""PopService without a broker: the consumer offset moves past popped messages only after
the check point is stored, a ck the store refuses leaves the offset and returns nothing,
and a new group starts where RocketMQ 5 starts it (initMode)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

from rmq.broker.pop.order_info import ConsumerOrderInfoManager
from rmq.broker.pop.pop_service import PopRequest, PopService
from rmq.protocol.bodies import TopicConfig
from rmq.protocol.pop import INIT_MODE_MAX, INIT_MODE_MIN, PopCheckPoint
from rmq.store.message_filter import TagsMessageFilter
from rmq.store.results import GetMessageResult, GetMessageStatus
from tests.unit.broker.fakes import FakeOffsets

TC = TopicConfig("T", 1, 1, 6)


class _Store:
    """One queue of ``n`` one-byte records; offset 0 'in memory' unless told otherwise."""

    def __init__(self, n: int, min_offset: int = 0, in_disk: bool = False) -> None:
        self.n, self.min, self.in_disk = n, min_offset, in_disk

    def get_messages(self, group: str, topic: str, qid: int, offset: int, want: int, f: Any = None) -> GetMessageResult:
        offs = list(range(offset, min(offset + want, self.n)))
        status = GetMessageStatus.FOUND if offs else GetMessageStatus.OFFSET_OVERFLOW_ONE
        nxt = offs[-1] + 1 if offs else offset
        return GetMessageResult(status, nxt, self.min, self.n, [b"x" for _ in offs], offs)

    def get_max_offset_in_queue(self, topic: str, qid: int) -> int:
        return self.n

    def get_min_offset_in_queue(self, topic: str, qid: int) -> int:
        return self.min

    def check_in_disk_by_consume_offset(self, topic: str, qid: int, offset: int) -> bool:
        return self.in_disk


class _ReviveLog:
    def __init__(self) -> None:
        self.stored: asyncio.Future[bool] | None = None
        self.cks: list[PopCheckPoint] = []

    async def append_ck(self, ck: PopCheckPoint, revive_qid: int) -> bool:
        self.cks.append(ck)
        assert self.stored is not None
        return await self.stored


class _Topics:
    def select(self, topic: str) -> TopicConfig | None:
        return TC if topic == "T" else None


def _service(store: _Store, tmp_path: Path) -> tuple[PopService, FakeOffsets, _ReviveLog]:
    offsets, log = FakeOffsets(), _ReviveLog()
    svc = PopService(
        "b",
        store,  # type: ignore[arg-type]
        _Topics(),
        offsets,  # type: ignore[arg-type]
        log,  # type: ignore[arg-type]
        ConsumerOrderInfoManager(str(tmp_path)),
        rand=random.Random(1),
    )
    return svc, offsets, log


def _req(init_mode: int = INIT_MODE_MAX) -> PopRequest:
    return PopRequest("g", "T", 0, 8, 1000, init_mode, False, None, TagsMessageFilter(None), "c")


def test_offset_moves_only_after_the_ck_is_stored(tmp_path: Path) -> None:
    async def run() -> None:
        svc, offsets, log = _service(_Store(3), tmp_path)
        log.stored = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(svc.pop(_req(), TC))
        await asyncio.sleep(0.01)
        assert not task.done()
        assert log.cks[0].offsets() == [0, 1, 2]
        assert offsets.query_offset("g", "T", 0) == 0  # (the new group's start, committed)
        log.stored.set_result(True)
        result = await task
        assert len(result.buffers) == 3 and offsets.query_offset("g", "T", 0) == 3
        assert [(q.queue_id, q.start_offset, q.msg_offsets) for q in result.queues] == [(0, 0, (0, 1, 2))]

    asyncio.run(run())


def test_a_refused_ck_returns_nothing_and_keeps_the_offset(tmp_path: Path) -> None:
    async def run() -> None:
        svc, offsets, log = _service(_Store(3), tmp_path)
        log.stored = asyncio.get_running_loop().create_future()
        log.stored.set_result(False)
        result = await svc.pop(_req(), TC)
        assert result.buffers == [] and offsets.query_offset("g", "T", 0) == 0

    asyncio.run(run())


def test_where_a_new_group_starts(tmp_path: Path) -> None:
    # initMode MAX: from 0 while the queue begins at 0 in memory (the sends before the
    # consumer count), else the last message; MIN: the queue's first message
    svc, offsets, _ = _service(_Store(5), tmp_path)
    assert svc.pop_offset("g1", "T", 0, INIT_MODE_MAX) == 0
    svc, offsets, _ = _service(_Store(5, in_disk=True), tmp_path)
    assert svc.pop_offset("g2", "T", 0, INIT_MODE_MAX) == 4
    assert offsets.query_offset("g2", "T", 0) == 4  # committed at once
    svc, _, _ = _service(_Store(5, min_offset=2), tmp_path)
    assert svc.pop_offset("g3", "T", 0, INIT_MODE_MAX) == 4
    assert svc.pop_offset("g4", "T", 0, INIT_MODE_MIN) == 2
    assert svc.pop_offset("g5", "%RETRY%g5_T", 0, INIT_MODE_MAX) == 2  # retry topics: from the start


def test_a_change_in_the_pops_own_millisecond_names_a_new_ck(tmp_path: Path, monkeypatch: Any) -> None:
    """The new ck must not take the old ck's name (same start offset and popTime), or the
    ack of the old ck settles the new one and the message never comes back."""
    import rmq.broker.pop.pop_service as pop_service_module
    from rmq.protocol.pop import ExtraInfo

    class _Log(_ReviveLog):
        def __init__(self) -> None:
            super().__init__()
            self.acks: list[Any] = []

        async def append_ack(self, ack: Any, revive_qid: int) -> bool:
            self.acks.append(ack)
            return True

    async def run() -> None:
        offsets, log = FakeOffsets(), _Log()
        svc = PopService(
            "b",
            _Store(1),  # type: ignore[arg-type]
            _Topics(),
            offsets,  # type: ignore[arg-type]
            log,  # type: ignore[arg-type]
            ConsumerOrderInfoManager(str(tmp_path)),
            rand=random.Random(1),
        )
        log.stored = asyncio.get_running_loop().create_future()
        log.stored.set_result(True)
        await svc.pop(_req(), TC)
        old = log.cks[0]
        monkeypatch.setattr(pop_service_module, "now_ms", lambda: old.pop_time)  # the same millisecond
        handle = ExtraInfo(0, old.pop_time, old.invisible_time, 0, 0, "b", 0, 0).encode()
        answer = await svc.change_invisible_time("g", "T", 0, 0, handle, 1000)
        assert answer.code == 0, answer
        new = log.cks[1]
        assert new.key() != old.key()
        assert [a.ck_key() for a in log.acks] == [old.key()]

    asyncio.run(run())
