"""The dispatch limit (a controller-mode master's confirm offset): records past it are
stored and readable by HA but not in any ConsumeQueue until the limit moves."""

from __future__ import annotations

import asyncio

from .conftest import msg


async def _settle(st) -> None:
    for _ in range(20):
        await asyncio.sleep(0.01)


async def test_dispatch_stops_at_the_limit_and_resumes(open_store):
    async with open_store() as st:
        ends = []
        for i in range(10):
            r = await st.put(msg(body=b"m%d" % i))
            ends.append(r.end_offset)
        await _settle(st)
        assert st.get_max_offset_in_queue("TopicA", 0) == 10
        st.set_dispatch_limit(ends[-1])  # everything so far is confirmed
        for i in range(10, 20):
            r = await st.put(msg(body=b"m%d" % i))
            ends.append(r.end_offset)
        await _settle(st)
        assert st.get_max_offset_in_queue("TopicA", 0) == 10
        assert st.dispatched_offset == ends[9] and st.max_phy_offset == ends[-1]
        # a limit in the middle of a record dispatches the records before it only
        st.set_dispatch_limit(ends[14] + 7)
        await _settle(st)
        assert st.get_max_offset_in_queue("TopicA", 0) == 15
        st.set_dispatch_limit(None)
        await _settle(st)
        assert st.get_max_offset_in_queue("TopicA", 0) == 20
        assert st.dispatch_behind_bytes == 0


async def test_a_restarted_store_dispatches_from_the_file_up_to_the_limit(open_store, tmp_path):
    root = tmp_path / "s"
    async with open_store(root) as st:
        for i in range(8):
            await st.put(msg(body=b"x%d" % i))
    # records written before a restart are parsed from the file (the slow path)
    async with open_store(root) as st:
        st.set_dispatch_limit(None)
        assert st.get_max_offset_in_queue("TopicA", 0) == 8
        for _q in range(3):
            await st.put(msg(body=b"y", queue_id=1))
        await _settle(st)
        assert st.get_max_offset_in_queue("TopicA", 1) == 3


async def test_a_slave_with_part_of_a_blank_waits_for_the_rest_and_cuts_it_to_lead(open_store, tmp_path):
    from rmq.store.config import BrokerRole

    async with open_store(tmp_path / "m") as m:
        ends = []
        while m.max_phy_offset <= 16 * 1024:  # file 0 ends in a BLANK
            ends.append((await m.put(msg(body=b"b" * 1000))).end_offset)
        blank = max(e for e in ends if e <= 16 * 1024)
        data = m.get_commitlog_data(0, 16 * 1024)
        assert len(data) == 16 * 1024
    async with open_store(tmp_path / "s", brokerRole=BrokerRole.SLAVE) as s:
        # what a slave has when its master's connection ends in the BLANK's padding
        assert s.commitlog.append_data(0, bytes(data[: blank + 100]))
        await _settle(s)
        assert s.dispatched_offset == blank < s.max_phy_offset == blank + 100
        assert s.reput.is_caught_up()
        dropped = await s.prepare_to_lead()
        assert dropped == 100 and s.max_phy_offset == blank
        s.set_role(BrokerRole.ASYNC_MASTER)
        r = await s.put(msg(body=b"b" * 1000))
        assert r.wrote_offset == 16 * 1024  # BLANK again, then the next file
        await _settle(s)
        assert s.get_max_offset_in_queue("TopicA", 0) == len([e for e in ends if e <= blank]) + 1
