"""TransactionProducer end to end: half messages, the local transaction, END_TRANSACTION,
and the broker's checks answered by a live producer of the group (spec 2.12, 7.3).

The broker checks quickly here: first check 1 s after the half message was born
(``transactionTimeOut``), every 0.5 s (``transactionCheckInterval``).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time

import pytest

from rmq.client import (
    ConsumeFromWhere,
    ConsumeResult,
    LocalTransactionState,
    Message,
    MQClientError,
    PushConsumer,
    SendStatus,
    TransactionListener,
    TransactionProducer,
)
from tests.integration.admin_util import REPO, repo_env
from tests.integration.rigs import module_cluster
from tests.integration.test_client import create_topic, unique, wait_until

pytestmark = pytest.mark.timeout(120)
CONF = {"transactionTimeOut": 1000, "transactionCheckInterval": 500, "transactionCheckMax": 10}
S = LocalTransactionState


cluster = module_cluster("tx", CONF)


class Visible:
    """A push consumer of the topic: what became visible, and when."""

    def __init__(self, cluster, topic: str) -> None:
        self.got: dict[bytes, tuple[float, object]] = {}
        self.c = PushConsumer(
            unique("TxC"), cluster.namesrv, listener=self, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        )
        self.c.subscribe(topic, "*")

    def __call__(self, msgs, ctx):
        for m in msgs:
            self.got.setdefault(m.body, (time.monotonic(), m))
        return ConsumeResult.SUCCESS

    def bodies(self) -> set[bytes]:
        return set(self.got)


class Listener(TransactionListener):
    """execute: as the ``arg`` says; check: as ``answers`` says for the body."""

    def __init__(self, answers: dict[bytes, LocalTransactionState]) -> None:
        self.answers = answers
        self.executed: list[tuple[bytes, object, str | None]] = []
        self.checked: list[tuple[bytes, float, str | None]] = []

    def execute_local_transaction(self, msg, arg):
        self.executed.append((msg.body, arg, msg.transaction_id))
        if arg == "raise":
            raise RuntimeError("local transaction failed")
        return arg

    async def check_local_transaction(self, msg):  # a coroutine works too
        self.checked.append((msg.body, time.monotonic(), getattr(msg, "transaction_id", None)))
        return self.answers.get(msg.body, S.UNKNOW)


@pytest.mark.slow
async def test_commit_rollback_and_checked_unknowns(cluster):
    topic = unique("TxT")
    group = unique("TxPG")
    await create_topic(cluster.namesrv, cluster.broker, topic, 2)
    listener = Listener(
        {
            b"unknown-then-commit": S.COMMIT_MESSAGE,
            b"unknown-then-rollback": S.ROLLBACK_MESSAGE,
            b"raised-then-commit": S.COMMIT_MESSAGE,
            b"none-then-commit": S.COMMIT_MESSAGE,
        }
    )
    visible = Visible(cluster, topic)
    await visible.c.start()
    p = TransactionProducer(group, cluster.namesrv, transaction_listener=listener)
    await p.start()
    try:
        results = {}
        for body, arg in (
            (b"commit", S.COMMIT_MESSAGE),
            (b"rollback", S.ROLLBACK_MESSAGE),
            (b"unknown-then-commit", S.UNKNOW),
            (b"unknown-then-rollback", S.UNKNOW),
            (b"raised-then-commit", "raise"),
            (b"none-then-commit", None),
        ):
            results[body] = (
                await p.send_message_in_transaction(Message(topic, body, tags="tx", keys=body.decode()), arg),
                time.monotonic(),
            )
        await wait_until(lambda: b"commit" in visible.bodies(), 10, what="the committed one")
        assert visible.bodies() == {b"commit"}  # the unknowns are still half
        want = {b"commit", b"unknown-then-commit", b"raised-then-commit", b"none-then-commit"}
        await wait_until(lambda: visible.bodies() >= want, 20, what="the checked commits")
        await asyncio.sleep(1.5)  # rolled back ones never show
        assert visible.bodies() == want
    finally:
        await p.shutdown()
        await visible.c.shutdown()
    for r, _ in results.values():
        assert r.status is SendStatus.SEND_OK and r.transaction_id == r.msg_id
    states = {b: r.local_transaction_state for b, (r, _) in results.items()}
    assert states == {
        b"commit": S.COMMIT_MESSAGE,
        b"rollback": S.ROLLBACK_MESSAGE,
        b"unknown-then-commit": S.UNKNOW,
        b"unknown-then-rollback": S.UNKNOW,
        b"raised-then-commit": S.UNKNOW,
        b"none-then-commit": S.UNKNOW,
    }
    # execute saw the message with its transaction id (= its UNIQ_KEY)
    assert [(b, tid) for b, _, tid in listener.executed] == [(b, results[b][0].msg_id) for b in results]
    checked = {b for b, _, _ in listener.checked}
    assert checked == {b"unknown-then-commit", b"unknown-then-rollback", b"raised-then-commit", b"none-then-commit"}
    assert {tid for b, _, tid in listener.checked} == {results[b][0].msg_id for b in checked}
    assert p.checks_answered >= 4
    # checked ones became visible only after the check, ≥ transactionTimeOut after birth
    for body in (b"unknown-then-commit", b"raised-then-commit", b"none-then-commit"):
        t_check = min(t for b, t, _ in listener.checked if b == body)
        t_seen, m = visible.got[body]
        assert t_seen >= t_check >= results[body][1] + 0.5
        assert m.uniq_key == results[body][0].msg_id and m.tags == "tx"


async def test_transaction_listener_required(cluster):
    p = TransactionProducer(unique("TxPG"), cluster.namesrv)
    await p.start()
    try:
        with pytest.raises(MQClientError, match="TransactionListener is null"):
            await p.send_message_in_transaction(Message("T", b"x"))
    finally:
        await p.shutdown()


ORPHAN_SCRIPT = textwrap.dedent("""
    import asyncio, sys
    from rmq.client import LocalTransactionState, Message, TransactionListener, TransactionProducer

    class Unknown(TransactionListener):
        def execute_local_transaction(self, msg, arg):
            return LocalTransactionState.UNKNOW
        def check_local_transaction(self, msg):
            return LocalTransactionState.UNKNOW

    async def main(ns, topic, group):
        p = TransactionProducer(group, ns, transaction_listener=Unknown())
        await p.start()
        r = await p.send_message_in_transaction(Message(topic, b"orphan"))
        print("SENT", r.msg_id, flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main(*sys.argv[1:4]))
""")


@pytest.mark.slow
async def test_producer_that_died_is_checked_through_another_producer_of_the_group(cluster):
    topic = unique("TxT")
    group = unique("TxPG")
    await create_topic(cluster.namesrv, cluster.broker, topic, 1)
    visible = Visible(cluster, topic)
    await visible.c.start()
    proc = subprocess.Popen(
        [sys.executable, "-c", ORPHAN_SCRIPT, cluster.namesrv, topic, group],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=repo_env(),
        cwd=REPO,
        start_new_session=True,
    )
    survivor = None
    try:
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 30)
        assert line.startswith(b"SENT "), line
        msg_id = line.split()[1].decode()
        proc.kill()  # SIGKILL: no unregister, no answer
        proc.wait(10)
        listener = Listener({b"orphan": S.COMMIT_MESSAGE})
        survivor = TransactionProducer(group, cluster.namesrv, transaction_listener=listener)
        await survivor.start()
        await wait_until(
            lambda: b"orphan" in visible.bodies(), 20, what="the orphan committed by the surviving producer"
        )
        assert [b for b, _, _ in listener.checked][:1] == [b"orphan"]
        assert visible.got[b"orphan"][1].uniq_key == msg_id
        assert listener.checked[0][2] == msg_id
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
        if survivor is not None:
            await survivor.shutdown()
        await visible.c.shutdown()
