"""GroupTransferService's in-sync replica rules with fake acks: n different slaves,
every member of the in-sync set, and the one-slave rule left as it was."""

from __future__ import annotations

import asyncio

from ha.group_transfer import GroupTransferService
from rmq.store.results import PutMessageStatus

OK = PutMessageStatus.PUT_OK
TIMEOUT = PutMessageStatus.FLUSH_SLAVE_TIMEOUT


async def test_n_slaves_need_acks_from_different_slaves():
    gt = GroupTransferService(3000)
    f = gt.submit_n(100, 2)
    assert f is not None and gt.pending == 1
    gt.on_ack(150, slave=1)
    gt.on_ack(200, slave=1)  # the same slave again (another connection too) counts once
    assert not f.done()
    gt.on_ack(99, slave=2)
    assert not f.done()
    gt.on_ack(100, slave=2)
    assert f.result() is OK and gt.pending == 0 and gt.completed == 1
    # the one-slave rule saw the same acks: the highest of any slave
    assert gt.acked == 200


async def test_n_slaves_complete_at_the_nth_highest_ack():
    gt = GroupTransferService(3000)
    gt.on_ack(500, slave=1)
    gt.on_ack(300, slave=2)
    gt.on_ack(100, slave=3)
    assert gt.acked_by(1) == 500 and gt.acked_by(2) == 300 and gt.acked_by(3) == 100 and gt.acked_by(4) == -1
    assert gt.submit_n(300, 2) is None  # two slaves have it already
    three = gt.submit_n(300, 3)
    await asyncio.sleep(0)
    two = gt.submit_n(400, 2)
    assert three is not None and two is not None and three is not two  # a lane per rule
    gt.on_ack(400, slave=2)
    assert two.result() is OK and not three.done()
    gt.on_ack(300, slave=3)
    assert three.result() is OK


async def test_a_gone_slave_counts_only_for_what_it_acked():
    gt = GroupTransferService(3000)
    gt.on_ack(1000, slave=1)
    f = gt.submit_n(800, 2)
    # slave 1 disconnects (nothing is said: its ack of 1000 stays a fact); slave 2 acks
    gt.on_ack(800, slave=2)
    assert f is not None and f.result() is OK
    await asyncio.sleep(0)
    g = gt.submit_n(1200, 2)
    gt.on_ack(1500, slave=2)
    assert g is not None and not g.done()  # slave 1 never had 1200
    # slave 1 comes back truncated: its latest report is what counts
    gt.on_ack(700, slave=1)
    assert gt.acked_by(2) == 700
    gt.on_ack(1200, slave=1)
    assert g.result() is OK


async def test_n_slaves_time_out_with_their_own_timer():
    gt = GroupTransferService(60)
    one = gt.submit(100)
    two = gt.submit_n(100, 2)
    gt.on_ack(100, slave=1)
    assert one is not None and one.result() is OK
    assert two is not None and not two.done()
    await asyncio.sleep(0.1)
    assert two.result() is TIMEOUT
    assert gt.timeouts == 1 and gt.completed == 1 and gt.pending == 0


async def test_all_members_of_the_in_sync_set():
    gt = GroupTransferService(3000)
    assert gt.submit_all(100) is None  # only this master in sync: nothing to wait for
    gt.set_required(frozenset({1, 2}))
    f = gt.submit_all(100)
    assert f is not None
    gt.on_ack(100, slave=1)
    gt.on_ack(500, slave=3)  # not a member: does not count
    assert not f.done()
    gt.on_ack(100, slave=2)
    assert f.result() is OK


async def test_all_members_a_member_that_never_acked_holds_the_round():
    gt = GroupTransferService(3000)
    gt.set_required(frozenset({1}))
    gt.on_ack(100, slave=1)
    f = gt.submit_all(200)
    assert f is not None
    # a member joins while the round waits: it is waited for too
    gt.set_required(frozenset({1, 2}))
    gt.on_ack(200, slave=1)
    assert not f.done()
    # it leaves and the controller confirms the smaller set: the round completes
    gt.set_required(frozenset({1}))
    assert f.result() is OK


async def test_all_members_the_set_emptied_answers_ok():
    gt = GroupTransferService(3000)
    gt.set_required(frozenset({1}))
    f = gt.submit_all(100)
    gt.set_required(frozenset())
    assert f is not None and f.result() is OK and gt.completed == 1


async def test_all_members_departed_not_released_times_out():
    gt = GroupTransferService(60)
    gt.set_required(frozenset({1, 2}))
    gt.on_ack(100, slave=1)
    gt.on_ack(100, slave=2)
    f = gt.submit_all(200)
    gt.on_ack(200, slave=1)
    # slave 2 is gone but still in the set (the controller has not confirmed the shrink)
    await asyncio.sleep(0.1)
    assert f is not None and f.result() is TIMEOUT


async def test_fail_all_answers_every_lane():
    gt = GroupTransferService(3000)
    gt.set_required(frozenset({1}))
    a, b, c = gt.submit(10), gt.submit_n(10, 2), gt.submit_all(10)
    assert gt.pending == 3
    gt.fail_all(TIMEOUT)
    assert [x.result() for x in (a, b, c) if x is not None] == [TIMEOUT] * 3
    assert gt.pending == 0


async def test_one_slave_rule_ignores_who_acked():
    """submit() is the rule rmq always had: the highest ack of any slave, unnamed too."""
    gt = GroupTransferService(3000)
    f = gt.submit(100)
    gt.on_ack(100)
    assert f is not None and f.result() is OK
    await asyncio.sleep(0)
    g = gt.submit(200)
    gt.on_ack(200, slave=7)
    assert g is not None and g.result() is OK and gt.submit_n(200, 1) is None
