import time

from rmq.broker.locks import RebalanceLockManager
from rmq.protocol.bodies import MessageQueue

Q0, Q1 = MessageQueue("T", "b", 0), MessageQueue("T", "b", 1)


def test_free_queue_is_locked_and_renewed_by_its_holder():
    m = RebalanceLockManager()
    assert m.try_lock_batch("G", [Q0, Q1], "c1") == {Q0, Q1}
    assert m.try_lock_batch("G", [Q0], "c1") == {Q0}  # renewal
    assert m.is_locked("G", Q0, "c1") and m.holder("G", Q1) == "c1"


def test_other_client_is_refused_until_expiry():
    m = RebalanceLockManager(max_live_ms=50)
    m.try_lock_batch("G", [Q0], "c1")
    assert m.try_lock_batch("G", [Q0, Q1], "c2") == {Q1}
    time.sleep(0.08)
    assert m.try_lock_batch("G", [Q0], "c2") == {Q0}
    assert m.holder("G", Q0) == "c2"


def test_groups_are_independent_and_unlock_only_by_holder():
    m = RebalanceLockManager()
    m.try_lock_batch("G1", [Q0], "c1")
    assert m.try_lock_batch("G2", [Q0], "c2") == {Q0}
    m.unlock_batch("G1", [Q0], "c2")  # not the holder: ignored
    assert m.holder("G1", Q0) == "c1"
    m.unlock_batch("G1", [Q0], "c1")
    assert m.holder("G1", Q0) is None
    assert m.try_lock_batch("G1", [Q0], "c3") == {Q0}
