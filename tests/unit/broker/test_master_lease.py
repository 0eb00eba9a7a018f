"""MasterLease on an injected clock, and the send / end-transaction processors behind
it: a fenced master stores nothing and answers SERVICE_NOT_AVAILABLE with the lease's
remark; static roles (UNFENCED) are never fenced."""

from __future__ import annotations

from rmq.broker.master_lease import UNFENCED, MasterLease
from rmq.broker.processors.end_transaction import EndTransactionProcessor
from rmq.broker.processors.send import SendMessageProcessor
from rmq.protocol.bodies import TopicConfig
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import ConsumerSendMsgBackRequestHeader, EndTransactionRequestHeader
from rmq.protocol.message import SysFlag
from rmq.store.config import MessageStoreConfig

from .fakes import FakeConn, FakeStats, FakeStore, FakeSubscriptions, FakeTopics
from .test_processors import TOPIC, _broker_config, _send_request


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _lease() -> tuple[MasterLease, Clock]:
    clock = Clock()
    return MasterLease("broker-a", clock, lambda: "10.0.0.9:9876"), clock


def test_not_leading_is_never_fenced() -> None:
    lease, clock = _lease()
    assert lease.refusal() is None  # a slave / pending broker: its store refuses by itself
    lease.granted(clock.now, 1500)
    clock.now += 60
    assert lease.refusal() is None and lease.valid(clock.now)
    assert UNFENCED.refusal() is None


def test_lease_counts_from_the_heartbeat_send_time_not_the_answer() -> None:
    lease, clock = _lease()
    sent = clock.now
    clock.now += 0.4  # the answer took 400 ms
    lease.granted(sent, 1500, "controller 10.0.0.9:9876")
    lease.lead()
    clock.now = sent + 1.499
    assert lease.refusal() is None
    clock.now = sent + 1.500
    assert not lease.valid(clock.now)
    clock.now = sent + 2.312
    why = lease.refusal()
    assert why is not None
    assert "master lease of broker-a expired 812 ms ago" in why
    assert "controllers 10.0.0.9:9876" in why and "last granted by controller 10.0.0.9:9876" in why
    assert "retry elsewhere" in why


def test_a_grant_only_moves_the_deadline_later() -> None:
    lease, clock = _lease()
    lease.granted(clock.now, 1500)
    lease.lead()
    # an answer to an older heartbeat (or a shorter lease) does not cut a granted lease
    lease.granted(clock.now - 1.0, 1500)
    lease.granted(clock.now, 500)
    assert lease.remaining(clock.now) == 1.5
    lease.granted(clock.now + 1.0, 1500)
    assert lease.remaining(clock.now) == 2.5
    assert lease.lease_ms == 1500 and lease.longest_ms == 1500


def test_lapsed_lease_is_renewed_by_the_next_answer() -> None:
    lease, clock = _lease()
    lease.granted(clock.now, 1000)
    lease.lead()
    clock.now += 3
    assert lease.refusal() is not None
    lease.granted(clock.now, 1000)
    assert lease.refusal() is None


def test_failsafe_extends_from_when_the_checks_were_sent() -> None:
    lease, clock = _lease()
    lease.granted(clock.now, 1000)
    lease.lead()
    checks_sent = clock.now + 0.8
    clock.now += 1.2  # the answers came after the lease ran out
    assert lease.refusal() is not None
    lease.extend_failsafe(checks_sent, 1000, "10.0.0.2:10911")
    assert lease.remaining(clock.now) == checks_sent + 1.0 - clock.now
    assert lease.refusal() is None
    clock.now = checks_sent + 1.0
    why = lease.refusal()
    assert why is not None and "failsafe (10.0.0.2:10911)" in why
    # the in-sync set being this master alone
    lease.extend_failsafe(clock.now, 1000)
    assert lease.refusal() is None and "alone" in lease.source


def test_revoke_ends_the_lease_at_once_and_failsafe_cannot_undo_it() -> None:
    lease, clock = _lease()
    lease.granted(clock.now, 1500)
    lease.lead()
    lease.revoke("controller 10.0.0.9:9876 named 10.0.0.2:10911 master (epoch 3)")
    why = lease.refusal()
    assert why is not None and "named 10.0.0.2:10911 master" in why
    lease.extend_failsafe(clock.now, 1500)
    assert lease.refusal() is not None
    lease.granted(clock.now, 1500)  # named master again
    assert lease.refusal() is None


def test_drop_forgets_the_lease() -> None:
    lease, clock = _lease()
    lease.granted(clock.now, 1500)
    lease.lead()
    lease.drop()
    assert not lease.leading and lease.refusal() is None
    lease.lead()  # leading again without a new grant: no lease
    why = lease.refusal()
    assert why is not None and "holds no lease" in why


def test_a_slave_that_confirmed_a_failsafe_takes_no_write_within_a_lease_of_it() -> None:
    lease, clock = _lease()
    lease.granted(clock.now - 10, 1500)  # a lease time it learned earlier
    lease.drop()
    lease.promise(clock.now, "master 10.0.0.1:10911")
    clock.now += 0.5
    lease.granted(clock.now, 1500)  # elected: the answer naming it master
    lease.lead()
    why = lease.refusal()
    assert why is not None
    assert "failsafe check of master 10.0.0.1:10911 of broker-a" in why and "in 1000 ms" in why
    clock.now += 1.0
    assert lease.refusal() is None
    # re-adopted in an epoch it led already: no promise to keep (it was that master)
    lease.drop()
    lease.promise(clock.now, "10.0.0.1:10911")
    lease.granted(clock.now, 1500)
    lease.lead(new_epoch=False)
    assert lease.refusal() is None


# ---------------------------------------------------------------------- processors
def _fenced() -> MasterLease:
    lease, clock = _lease()
    lease.granted(clock.now - 5, 1000)
    lease.lead()
    return lease


def test_fenced_send_stores_nothing_and_answers_service_not_available() -> None:
    store = FakeStore()
    stats = FakeStats()
    lease = _fenced()
    p = SendMessageProcessor(
        _broker_config(), store, FakeTopics(TopicConfig(TOPIC, 4, 4)), FakeSubscriptions(), stats, None, lease
    )
    for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        req = _send_request()
        req.code = code
        resp = p.process(FakeConn(), req)
        assert isinstance(resp, RemotingCommand)
        assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE
        assert "master lease of broker-a expired 4000 ms ago" in (resp.remark or "")
    back = RemotingCommand(
        RequestCode.CONSUMER_SEND_MSG_BACK,
        ext_fields=ConsumerSendMsgBackRequestHeader(4096, "cg", 0, "msgid").to_ext_fields(),
    )
    resp = p.consumer_send_msg_back(FakeConn(), back)
    assert isinstance(resp, RemotingCommand) and resp.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert store.puts == [] and stats.puts == []
    lease.granted(lease._clock(), 1000)
    resp = p.process(FakeConn(), _send_request())
    assert isinstance(resp, RemotingCommand) and resp.code == ResponseCode.SUCCESS
    assert len(store.puts) == 1


def test_fenced_end_transaction_commits_nothing() -> None:
    store = FakeStore()

    class NoHalves:
        def look_half(self, offset: int) -> None:
            raise AssertionError("a fenced master must not even look")

    p = EndTransactionProcessor(MessageStoreConfig(), store, NoHalves(), _fenced())  # type: ignore[arg-type]
    h = EndTransactionRequestHeader("pg", 0, 4096, SysFlag.TRANSACTION_COMMIT_TYPE, "m1")
    resp = p.process(FakeConn(), RemotingCommand(RequestCode.END_TRANSACTION, ext_fields=h.to_ext_fields()))
    assert isinstance(resp, RemotingCommand)
    assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE and "expired" in (resp.remark or "")
    assert store.puts == []
