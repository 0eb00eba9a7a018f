"""The real mqadmin 4.9.8 against a real rmq master + slave (issue 14): one case per
subcommand, asserting what the output says."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from rmq.client import Message, Producer
from rmq.protocol.codes import RequestCode
from tests.cluster.ha_util import CLUSTER, GROUP, HAGroup, ha_group, master_conf, slave_conf, wait_in_sync
from tests.integration.broker_util import BrokerApi, unique, wait_until
from tests.interop.mqadmin_util import MqadminRun, mqadmin, mqadmin_available

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(mqadmin_available() is not None, reason=str(mqadmin_available())),
]

TOPIC = "MqadminTopic"
OFFLINE_GROUP = "MqadminOfflineGroup"  # committed 30 of each queue's 50: a lag of 80


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    """Master + slave of broker-a with TOPIC holding 200 messages, the slave in sync (its
    metadata copied from the master every half second, not RocketMQ's 10 s)."""
    with ha_group(master_conf(), slave_conf(slaveSyncInterval=500)) as g:

        async def fill() -> None:
            async with BrokerApi(g.master.addr) as api:
                for i in range(200):
                    await api.send_ok(TOPIC, b"m-%d" % i, queue_id=i % 4)
                for q in range(4):
                    await api.wait_max_offset(TOPIC, q, 50)
                    assert (await api.update_offset(OFFLINE_GROUP, TOPIC, q, 30)).code == 0
            await wait_in_sync(g)

        asyncio.run(fill())
        yield g


@pytest.fixture(scope="module")
def run(group: HAGroup, tmp_path_factory):
    home = tmp_path_factory.mktemp("mqadmin-home")

    def run(*args: str) -> MqadminRun:
        r = mqadmin(home, *args, "-n", group.ns.addr)
        assert "Exception" not in r.text, r.text
        return r

    return run


def _rows(out: str) -> list[list[str]]:
    return [ln.split() for ln in out.splitlines() if ln.strip() and not ln.startswith("#")]


def test_cluster_list_shows_master_and_slave_with_live_tps(group, run):
    async def load() -> None:  # clusterList's #InTPS is putTps' first figure: 10 s
        topic = unique("MqadminLoad")
        async with BrokerApi(group.master.addr) as api:
            for _ in range(100):
                await api.send_ok(topic, b"x", queue_id=0)

    asyncio.run(load())
    # the broker samples its counters once a second: on a loaded machine the first
    # clusterList may come before the sample that follows the load
    for _ in range(5):
        r = run("clusterList")
        assert r.rc == 0, r.text
        rows = {row[2]: row for row in _rows(r.out)}
        assert set(rows) == {"0", "1"}, r.out
        assert rows["0"][:4] == [CLUSTER, GROUP, "0", group.master.addr]
        assert rows["1"][:4] == [CLUSTER, GROUP, "1", group.slave.addr]
        assert rows["0"][4] == "V4_9_8"
        in_tps = float(re.match(r"[\d.]+", rows["0"][5]).group())  # "4281.89(0,0ms)"
        if in_tps > 0:
            break
    assert in_tps > 0, r.out


@pytest.mark.parametrize("which", ["master", "slave"])
def test_broker_status(group, run, which):
    addr = getattr(group, which).addr
    r = run("brokerStatus", "-b", addr)
    assert r.rc == 0, r.text
    kv = dict(re.match(r"(\S+)\s*: ?(.*)$", ln).groups() for ln in r.out.splitlines() if ": " in ln)
    assert kv["brokerRole"] == ("ASYNC_MASTER" if which == "master" else "SLAVE")
    assert int(kv["commitLogMaxOffset"]) > 0
    assert len(kv["putTps"].split(" ")) == 3


@pytest.mark.parametrize("which", ["master", "slave"])
def test_broker_consume_stats(group, run, which):
    # 317 reports the broker's subscription groups, as 4.9.8 does
    assert run("updateSubGroup", "-b", group.master.addr, "-g", OFFLINE_GROUP).rc == 0
    addr = getattr(group, which).addr

    async def knows_group() -> bool:  # a slave has it once its metadata sync ran
        async with BrokerApi(addr) as api:
            r = await api.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
            return OFFLINE_GROUP.encode() in (r.body or b"")

    asyncio.run(wait_until(knows_group, 15.0, f"the {which} to know {OFFLINE_GROUP}"))
    r = run("brokerConsumeStats", "-b", addr)
    assert r.rc == 0, r.text
    rows = [row for row in _rows(r.out) if row[:2] == [TOPIC, OFFLINE_GROUP]]
    assert sorted((int(row[3]), int(row[4]), int(row[5]), int(row[6])) for row in rows) == [
        (q, 50, 30, 20) for q in range(4)
    ], r.out
    total = int(re.search(r"Diff Total: (\d+)", r.out).group(1))
    assert total >= 80


@pytest.mark.parametrize("which", ["master", "slave"])
@pytest.mark.parametrize("command", ["cleanExpiredCQ", "cleanUnusedTopic", "deleteExpiredCommitLog"])
def test_store_maintenance_commands(group, run, command, which):
    # what each does to the store: tests/unit/store/test_cleanup.py; here mqadmin's view
    addr = getattr(group, which).addr
    r = run(command, "-b", addr)
    assert (r.rc, r.out.strip()) == (0, "success"), r.text

    async def held() -> int:  # on the broker asked
        async with BrokerApi(addr) as api:
            return sum([await api.max_offset(TOPIC, q) for q in range(4)])

    # the topic with its config keeps its messages
    assert asyncio.run(held()) == 200
    if which == "master":  # mqadmin's view reads the master only
        r = run("topicStatus", "-t", TOPIC)
        assert sum(int(row[3]) for row in _rows(r.out) if row[0] == GROUP) == 200, r.out


@pytest.mark.parametrize("what", ["Metadata", "Metrics", "Configs"])
def test_export(group, run, what, tmp_path):
    r = run(f"export{what}", "-c", CLUSTER, "-f", str(tmp_path))
    assert r.rc == 0 and "success" in r.out, r.text
    doc = json.loads((tmp_path / f"{what.lower()}.json").read_text())
    text = json.dumps(doc)
    if what == "Metadata":
        assert TOPIC in text, text[:500]
    elif what == "Configs":  # the master's config, and the group's size
        assert doc["brokerConfigs"][GROUP]["brokerRole"] == "ASYNC_MASTER", doc
        assert doc["brokerConfigs"][GROUP]["useTLS"] == "false"
        assert doc["clusterScale"] == {"namesrvSize": 1, "masterBrokerSize": 1, "slaveBrokerSize": 1}
    else:
        assert doc


@pytest.mark.parametrize("which", ["master", "slave"])
def test_query_cq(group, run, which):
    r = run(
        "queryCq", "-t", TOPIC, "-q", "1", "-i", "10", "-c", "3", "-g", OFFLINE_GROUP, "-b", getattr(group, which).addr
    )
    assert r.rc == 0, r.text
    assert "max: 50, min: 0" in r.out, r.out
    assert f"{OFFLINE_GROUP}@{TOPIC} is not online!" in r.out
    idx = [int(i) for i in re.findall(r"^idx: (\d+)$", r.out, re.M)]
    units = re.findall(r"physicOffset=(\d+), physicSize=(\d+)", r.out)
    assert idx == [10, 11, 12] and len(units) == 3, r.out
    offsets = [int(o) for o, _ in units]
    assert offsets == sorted(offsets) and all(int(s) > 0 for _, s in units)


def test_producer_lists_online_producers(group, run):
    async def with_producer() -> MqadminRun:
        async with Producer("MqadminProducerGroup", group.ns.addr) as p, BrokerApi(group.master.addr) as api:
            await p.send(Message(TOPIC, b"from a producer"))  # a send makes it heartbeat the broker

            async def known() -> bool:  # the heartbeat travels after the send, on its own
                r = await api.call(RequestCode.GET_ALL_PRODUCER_INFO)
                return b"MqadminProducerGroup" in (r.body or b"")

            await wait_until(known, 10.0, "the broker to know the producer")
            return await asyncio.to_thread(run, "producer", "-b", group.master.addr)

    r = asyncio.run(with_producer())
    assert r.rc == 0, r.text
    line = next(ln for ln in r.out.splitlines() if "(MqadminProducerGroup)" in ln)
    assert re.search(r"remoteIP=/127\.0\.0\.1:\d+, language=PYTHON, version=\d+, lastUpdateTimestamp=\d+", line), line
