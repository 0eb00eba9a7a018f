"""A store written by our real broker, for the Spark job to rebuild.

`write_stores(workdir)` starts `rmq namesrv` + a master `rmq broker` + its slave
(tests/harness.py), sends through rmq.client what the ConsumeQueue rules care about, waits
for the delays and transaction checks to play out, stops the brokers cleanly and returns
where their stores and broker.conf files are. Small files everywhere (CommitLog 32 KiB, ConsumeQueue 6 units,
index 400 entries) so every kind of file rolls several times.

The slave (HA, ASYNC_MASTER) has caught up before both stop: its CommitLog arrived over
the HA port and its ConsumeQueues/index were built by its own dispatch, which is the store
the Spark job is meant to read.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from pathlib import Path

from rmq.client import LocalTransactionState, Message, Producer, TransactionListener, TransactionProducer
from tests.cluster.ha_util import HAGroup, wait_in_sync
from tests.harness import start_broker, start_namesrv
from tests.integration.test_client import create_topic

S = LocalTransactionState

BROKER_CONF = {
    "mappedFileSizeCommitLog": 32 * 1024,
    "mappedFileSizeConsumeQueue": 20 * 6,
    "maxHashSlotNum": 97,
    "maxIndexNum": 400,
    "messageDelayLevel": "1s 2s 3s",
    "transactionTimeOut": 1000,
    "transactionCheckInterval": 500,
    "transactionCheckMax": 5,
}
TOPICS = [f"Rebuild{i:02d}" for i in range(22)]
QUEUES = 4


@dataclass
class BrokerStore:
    store: Path  # the store root (commitlog/, consumequeue/, index/)
    conf: Path  # the broker.conf it was written with
    sent: int  # messages sent (batches count each message)


class Decide(TransactionListener):
    """execute: as the body says; the broker's check: commit or rollback, by body."""

    def execute_local_transaction(self, msg, arg):
        return arg

    def check_local_transaction(self, msg):
        return S.COMMIT_MESSAGE if msg.body.endswith(b"-c") else S.ROLLBACK_MESSAGE


async def _produce(namesrv: str, broker: str) -> int:
    await asyncio.gather(*(create_topic(namesrv, broker, t, QUEUES) for t in TOPICS))
    rng = random.Random(7)
    sent = 0
    p = Producer("RebuildPG", namesrv)
    tx = TransactionProducer("RebuildTxPG", namesrv, transaction_listener=Decide())
    await p.start()
    await tx.start()
    try:
        for i in range(14):
            for t in TOPICS:
                tags = rng.choice([None, "TagA", "TagB", "标签"])
                keys = rng.choice([None, f"k-{t}-{i}", f"k{i} shared-{i % 3}"])
                body = bytes(rng.randrange(256) for _ in range(rng.randrange(10, 400)))
                await p.send(Message(t, body, tags=tags, keys=keys))
                sent += 1
        for t in TOPICS[:8]:  # batches
            await p.send_batch(
                [Message(t, f"batch-{t}-{j}".encode(), tags="Batch", keys=f"b{j}") for j in range(rng.randrange(2, 9))]
            )
            sent += 1
        for i in range(24):  # delay levels 1..3
            await p.send(
                Message(TOPICS[i % 5], f"delay-{i}".encode(), tags="Delayed", delay_time_level=1 + i % 3, keys=f"d{i}")
            )
            sent += 1
        for i in range(12):  # transactions
            decision = [S.COMMIT_MESSAGE, S.ROLLBACK_MESSAGE, S.UNKNOW][i % 3]
            suffix = b"-c" if i % 2 else b"-r"  # what a check answers
            await tx.send_message_in_transaction(
                Message(TOPICS[i % 4], b"tx-%d" % i + suffix, tags="Tx", keys=f"tx{i}"), decision
            )
            sent += 1
        # delays fire after 1-3 s, unknown transactions are checked after 1 s
        await asyncio.sleep(4.5)
    finally:
        await tx.shutdown()
        await p.shutdown()
    return sent


def write_stores(workdir: Path) -> tuple[BrokerStore, BrokerStore]:
    """(master, slave) stores of one broker group; the slave caught up before both stop."""
    slave_conf = {**BROKER_CONF, "brokerRole": "SLAVE", "brokerId": 1}
    with (
        start_namesrv(workdir) as ns,
        start_broker(workdir, ns.addr, name="broker-a", conf=BROKER_CONF) as br,
        start_broker(workdir / "slave", ns.addr, name="broker-a", conf=slave_conf) as sl,
    ):
        sent = asyncio.run(_produce(ns.addr, br.addr))
        asyncio.run(wait_in_sync(HAGroup(ns, br, sl, workdir), timeout=60))
        stores = (BrokerStore(br.store_dir, br.conf_path, sent), BrokerStore(sl.store_dir, sl.conf_path, sent))
    return stores
