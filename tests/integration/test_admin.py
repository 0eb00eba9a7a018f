"""`rmq admin` against real processes: clusterList, topicList, topicRoute, topicStatus,
brokerStatus, updateTopic — exit codes, mqadmin's tables, `--json`, and the error path.

Every command runs as `python -m rmq.cli admin ...` in a subprocess, flags after the
subcommand name (the NameServer flag last, to show order does not matter).
"""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from rmq.admin.output import human_time
from tests.harness import start_broker, start_namesrv
from tests.integration.admin_util import admin, closed_port, failed, header_cols, mqadmin_route_text, ok, wait_route
from tests.integration.broker_util import BrokerApi, unique

pytestmark = pytest.mark.timeout(120)

COMMANDS = ("brokerStatus", "clusterList", "topicList", "topicRoute", "topicStatus", "updateTopic")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    d = tmp_path_factory.mktemp("admin")
    # --order-message-enable: route data then carry orderTopicConf (updateTopic -o true)
    with start_namesrv(d, "--order-message-enable") as ns, start_broker(d, ns.addr, name="broker-a") as br:
        yield ns, br


# =========================================================================== help / usage
def test_help_lists_every_command_and_their_flags():
    for args in ((), ("help",)):
        r = ok(*args)
        assert r.out.startswith("The most commonly used rmq admin commands are:\n")
        for c in COMMANDS:
            assert re.search(rf"^   {c} +\S", r.out, re.M), c
        assert "See 'rmq admin help <command>'" in r.out

    r = ok("help", "updateTopic")
    assert r.out.startswith("usage: rmq admin updateTopic")
    for flag in (
        "-t TOPIC, --topic TOPIC",
        "-b ADDR, --brokerAddr ADDR",
        "-c CLUSTER",
        "-r N",
        "-w N",
        "-p PERM",
        "-o BOOL",
        "-n ADDR, --namesrvAddr ADDR",
        "--json",
    ):
        assert flag in r.out, flag
    # mqadmin matches command names without regard to case
    assert ok("help", "TOPICROUTE").out.startswith("usage: rmq admin topicRoute")

    r = admin("noSuchCommand")
    assert r.rc == 2 and r.out == ""
    assert r.err == ("rmq admin: the sub command noSuchCommand not exist; see 'rmq admin help'\n")


def test_bad_usage_exits_2_with_argparse_message():
    r = admin("topicRoute")
    assert r.rc == 2 and r.out == ""
    assert r.err.startswith("usage: rmq admin topicRoute")
    assert "rmq admin topicRoute: error: the following arguments are required: -t/--topic" in r.err

    r = admin("updateTopic", "-t", "T", "-c", "C", "-r", "many")
    assert r.rc == 2 and "argument -r/--readQueueNums: invalid int value: 'many'" in r.err
    r = admin("updateTopic", "-t", "T", "-c", "C", "-o", "maybe")
    assert r.rc == 2 and "expected true or false" in r.err
    r = admin("updateTopic", "-t", "T")
    assert r.rc == 2 and "exactly one of -b/--brokerAddr or -c/--clusterName" in r.err
    r = admin("brokerStatus")
    assert r.rc == 2 and "exactly one of -b/--brokerAddr or -c/--clusterName" in r.err


# =========================================================================== clusterList
def test_cluster_list(cluster):
    ns, br = cluster
    r = ok("clusterList", "-n", ns.addr)
    head, *rows = r.out.splitlines()
    assert [t for _, t in header_cols(head)] == [
        "#Cluster Name",
        "#Broker Name",
        "#BID",
        "#Addr",
        "#Version",
        "#InTPS(LOAD)",
        "#OutTPS(LOAD)",
        "#PCWait(ms)",
        "#Hour",
        "#SPACE",
    ]
    assert len(rows) == 1
    cells = rows[0].split()
    assert cells[:5] == ["TestCluster", "broker-a", "0", br.addr, "V4_9_8"]
    # left-aligned columns start under their headers (mqadmin's %-16s  %-22s  %-4s  %-22s)
    starts = dict((t, c) for c, t in header_cols(head))
    for title, value in (("#Broker Name", "broker-a"), ("#Addr", br.addr), ("#Version", "V4_9_8")):
        assert rows[0].index(value) == starts[title], title
    # right-aligned numbers end under their headers (%19s ... %6s)
    assert len(rows[0]) == len(head)
    assert re.search(r"\b0\.00\(.*\)\s+0\.00\(.*\)\s+0\s+\d+\.\d\d\s+\d\.\d{4}$", rows[0])

    doc = ok("clusterList", "--json", "-n", ns.addr).json()
    (b,) = doc["brokers"]
    assert (b["cluster"], b["brokerName"], b["brokerId"], b["addr"], b["version"]) == (
        "TestCluster",
        "broker-a",
        0,
        br.addr,
        "V4_9_8",
    )
    assert isinstance(b["inTps"], float) and isinstance(b["outTps"], float)

    r = ok("clusterList", "-m", "-n", ns.addr)
    head, row = r.out.splitlines()
    assert [t for _, t in header_cols(head)] == [
        "#Cluster Name",
        "#Broker Name",
        "#InTotalYest",
        "#OutTotalYest",
        "#InTotalToday",
        "#OutTotalToday",
    ]
    assert row.split()[:2] == ["TestCluster", "broker-a"]


# =========================================================================== updateTopic & co
def test_update_topic_on_cluster_then_route_and_list(cluster):
    ns, br = cluster
    topic = unique("AdminCluster")
    r = ok("updateTopic", "-c", "TestCluster", "-t", topic, "-r", "4", "-w", "4", "-n", ns.addr)
    assert r.out == (
        f"create topic to {br.addr} success.\n"
        f"TopicConfig [topicName={topic}, readQueueNums=4, writeQueueNums=4, perm=RW-, "
        f"topicFilterType=SINGLE_TAG, topicSysFlag=0, order=false]\n"
    )

    r = wait_route(ns.addr, topic)
    assert r.rc == 0, r
    assert r.out == mqadmin_route_text("TestCluster", f'0:"{br.addr}"') + "\n"
    doc = ok("topicRoute", "--json", "-t", topic, "-n", ns.addr).json()
    assert doc == {
        "brokerDatas": [{"brokerAddrs": {"0": br.addr}, "brokerName": "broker-a", "cluster": "TestCluster"}],
        "filterServerTable": {},
        "queueDatas": [
            {"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0, "writeQueueNums": 4}
        ],
    }

    assert topic in ok("topicList", "-n", ns.addr).out.splitlines()
    assert topic in ok("topicList", "--json", "-n", ns.addr).json()["topics"]
    r = ok("topicList", "-c", "-n", ns.addr)
    head, *rows = r.out.splitlines()
    assert [t for _, t in header_cols(head)] == ["#Cluster Name", "#Topic", "#Consumer Group"]
    assert [row.split() for row in rows if topic in row] == [["TestCluster", topic]]
    starts = [c for c, _ in header_cols(head)]
    row = next(row for row in rows if topic in row)
    assert row.index(topic) == starts[1]
    entries = ok("topicList", "-c", "--json", "-n", ns.addr).json()["topics"]
    assert {"cluster": "TestCluster", "topic": topic, "consumerGroups": []} in entries


def test_update_topic_on_broker_defaults_perm_order_and_json(cluster):
    ns, br = cluster
    topic = unique("AdminBroker")
    r = ok("updateTopic", "-b", br.addr, "-t", topic)
    assert r.out == (
        f"create topic to {br.addr} success.\n"
        f"TopicConfig [topicName={topic}, readQueueNums=8, writeQueueNums=8, perm=RW-, "
        f"topicFilterType=SINGLE_TAG, topicSysFlag=0, order=false]\n"
    )
    assert wait_route(ns.addr, topic).rc == 0
    qd = ok("topicRoute", "-t", topic, "--json", "-n", ns.addr).json()["queueDatas"]
    assert [(q["readQueueNums"], q["writeQueueNums"], q["perm"]) for q in qd] == [(8, 8, 6)]

    # update: read-only, 2 queues; --json document
    doc = ok("updateTopic", "--json", "-t", topic, "-p", "4", "-w", "2", "-r", "2", "-b", br.addr).json()
    assert doc == {
        "brokers": [br.addr],
        "topicConfig": {
            "order": False,
            "perm": 4,
            "readQueueNums": 2,
            "topicFilterType": "SINGLE_TAG",
            "topicName": topic,
            "topicSysFlag": 0,
            "writeQueueNums": 2,
        },
    }
    deadline = time.monotonic() + 10
    while True:
        qd = ok("topicRoute", "-t", topic, "--json", "-n", ns.addr).json()["queueDatas"]
        if qd[0]["perm"] == 4 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert [(q["readQueueNums"], q["writeQueueNums"], q["perm"]) for q in qd] == [(2, 2, 4)]

    # ordered: the NameServer's ORDER_TOPIC_CONFIG gets brokerName:writeQueueNums
    ordered = unique("AdminOrdered")
    r = ok("updateTopic", "-b", br.addr, "-t", ordered, "-o", "true", "-w", "3", "-n", ns.addr)
    assert r.out.splitlines() == [
        "set broker orderConf. isOrder=true, orderConf=[broker-a:3]",
        f"create topic to {br.addr} success.",
        f"TopicConfig [topicName={ordered}, readQueueNums=8, writeQueueNums=3, perm=RW-, "
        f"topicFilterType=SINGLE_TAG, topicSysFlag=0, order=true]",
    ]
    assert wait_route(ns.addr, ordered).rc == 0
    assert ok("topicRoute", "-t", ordered, "--json", "-n", ns.addr).json()["orderTopicConf"] == "broker-a:3"
    text = ok("topicRoute", "-t", ordered, "-n", ns.addr).out
    assert '\n\t"orderTopicConf":"broker-a:3",\n' in text


async def test_topic_status(cluster):
    ns, br = cluster
    topic = unique("AdminStatus")
    ok("updateTopic", "-b", br.addr, "-t", topic, "-r", "2", "-w", "2")
    assert wait_route(ns.addr, topic).rc == 0
    async with BrokerApi(br.addr) as api:
        for _ in range(3):
            await api.send_ok(topic, b"q0", queue_id=0)
        await api.send_ok(topic, b"q1", queue_id=1)
        await api.wait_max_offset(topic, 0, 3)
        await api.wait_max_offset(topic, 1, 1)

    doc = ok("topicStatus", "-t", topic, "--json", "-n", ns.addr).json()
    assert doc["topic"] == topic
    assert [(q["brokerName"], q["queueId"], q["minOffset"], q["maxOffset"]) for q in doc["queues"]] == [
        ("broker-a", 0, 0, 3),
        ("broker-a", 1, 0, 1),
    ]
    now = time.time() * 1000
    assert all(now - 60_000 < q["lastUpdateTimestamp"] <= now + 1000 for q in doc["queues"])

    r = ok("topicStatus", "-t", topic, "-n", ns.addr)
    head, *rows = r.out.splitlines()
    assert [t for _, t in header_cols(head)] == ["#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated"]
    # mqadmin: %-32s  %-4s  %-20s  %-20s    %s
    assert (
        head.index("#QID") == 34
        and head.index("#Min Offset") == 40
        and head.index("#Max Offset") == 62
        and head.index("#Last Updated") == 86
    )
    assert rows == [
        "%-32s  %-4d  %-20d  %-20d    %s"
        % ("broker-a", q["queueId"], q["minOffset"], q["maxOffset"], human_time(q["lastUpdateTimestamp"]))
        for q in doc["queues"]
    ]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}", rows[0][86:])


# =========================================================================== brokerStatus
def test_broker_status(cluster):
    ns, br = cluster
    r = ok("brokerStatus", "-b", br.addr)
    lines = r.out.splitlines()
    keys = [ln.partition(": ")[0].rstrip() for ln in lines]
    assert keys == sorted(keys) and len(keys) > 5
    # "%-32s: %s": a longer key (commitLogDiskRatio_<path>) pushes its colon right, as in mqadmin
    assert all(ln[32:34] == ": " for ln, k in zip(lines, keys, strict=True) if len(k) <= 32)
    assert "%-32s: %s" % ("brokerVersionDesc", "V4_9_8") in lines
    assert any(ln.startswith("putTps ") for ln in lines)

    doc = ok("brokerStatus", "--json", "-b", br.addr).json()
    assert list(doc) == [br.addr]
    assert doc[br.addr]["brokerVersionDesc"] == "V4_9_8"
    assert list(doc[br.addr]) == sorted(doc[br.addr])

    r = ok("brokerStatus", "-c", "TestCluster", "-n", ns.addr)
    lines = r.out.splitlines()
    assert all(ln.startswith("%-24s " % br.addr) for ln in lines)
    assert "%-24s %-32s: %s" % (br.addr, "brokerVersionDesc", "V4_9_8") in lines
    assert list(ok("brokerStatus", "-c", "TestCluster", "--json", "-n", ns.addr).json()) == [br.addr]


# =========================================================================== errors
def test_errors_are_one_line_and_exit_1(cluster):
    ns, br = cluster
    dead = f"127.0.0.1:{closed_port()}"

    msg = failed("topicRoute", "-t", "NoSuchTopicHere", "-n", ns.addr)
    assert msg == "No topic route info in name server for the topic: NoSuchTopicHere"
    assert "NoSuchTopicHere" in failed("topicStatus", "-t", "NoSuchTopicHere", "-n", ns.addr)

    msg = failed("brokerStatus", "-b", dead)
    assert msg.startswith(f"connect to {dead} failed")
    assert failed("updateTopic", "-b", dead, "-t", "T1").startswith(f"connect to {dead} failed")

    msg = failed("updateTopic", "-c", "NoSuchCluster", "-t", "T1", "-n", ns.addr)
    assert msg == (f"cluster NoSuchCluster not found on NameServer {ns.addr} (known: TestCluster)")
    assert "NoSuchCluster" in failed("brokerStatus", "-c", "NoSuchCluster", "-n", ns.addr)

    # the broker refuses a bad name: its answer is the error line
    msg = failed("updateTopic", "-b", br.addr, "-t", "bad topic!")
    assert msg.startswith(f"broker {br.addr} answered SYSTEM_ERROR (1): ")


def test_namesrv_down_and_env_default(cluster, tmp_path):
    ns, br = cluster
    with start_namesrv(tmp_path, name="ns-gone") as gone:
        addr = gone.addr
    for cmd, extra in (
        ("clusterList", ()),
        ("topicList", ()),
        ("topicRoute", ("-t", "T")),
        ("topicStatus", ("-t", "T")),
        ("updateTopic", ("-c", "TestCluster", "-t", "T")),
    ):
        msg = failed(cmd, *extra, "-n", addr)
        assert msg.startswith(f"NameServer {addr} unreachable: connect to {addr} failed"), msg

    # -n defaults to $NAMESRV_ADDR; a list may name a dead NameServer first
    assert "TBW102" in ok("topicList", env={"NAMESRV_ADDR": ns.addr}).out.splitlines()
    assert "TBW102" in ok("topicList", "-n", f"{addr};{ns.addr}").out.splitlines()


def test_a_silent_broker_still_listed_and_reported(tmp_path):
    """clusterList reports what the NameServer knows (exit 0, a warning per silent broker);
    brokerStatus -c reports the brokers that answer and fails for the others."""
    with (
        start_namesrv(tmp_path) as ns,
        start_broker(tmp_path, ns.addr, name="broker-x") as bx,
        start_broker(tmp_path, ns.addr, name="broker-y") as by,
    ):
        os.kill(by.pid, signal.SIGSTOP)  # registered and connected, but never answers
        try:
            r = admin("clusterList", "-n", ns.addr, "--timeout", "1000")
            assert r.rc == 0, r
            assert re.fullmatch(
                rf"rmq admin clusterList: broker broker-y \(0, {by.addr}\): "
                rf"wait response on {by.addr} timeout \d+ms, .*\n",
                r.err,
            ), r.err
            rows = [ln.split() for ln in r.out.splitlines()[1:]]
            assert rows[0][:5] == ["TestCluster", "broker-x", "0", bx.addr, "V4_9_8"]
            assert rows[1][:4] == ["TestCluster", "broker-y", "0", by.addr] and len(rows) == 2

            r = admin("brokerStatus", "-c", "TestCluster", "-n", ns.addr, "--timeout", "1000")
            assert r.rc == 1
            assert r.err.startswith(f"rmq admin brokerStatus: broker {by.addr}: wait response")
            assert len(r.err.splitlines()) == 1
            assert {ln.split()[0] for ln in r.out.splitlines()} == {bx.addr}
        finally:
            os.kill(by.pid, signal.SIGCONT)
