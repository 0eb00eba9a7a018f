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
        st.set_dispatch_limit(ends[-1])            # everything so far is confirmed
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
        for q in range(3):
            await st.put(msg(body=b"y", queue_id=1))
        await _settle(st)
        assert st.get_max_offset_in_queue("TopicA", 1) == 3
