"""The real mqadmin 4.9.8 against real rmq processes (issue 14), the subcommands the other
mqadmin modules do not cover: one case per subcommand, asserting what the output says and,
for one that changes state, reading the state back.

One module-scoped group: a NameServer started with ``-c`` (so updateNamesrvConfig has a
file to write to), master + slave of broker-a, TOPIC with KEYED messages (keys k-0 ..),
and OFFLINE_GROUP with committed offsets behind the queue ends.
"""

from __future__ import annotations

import asyncio
import re
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from rmq.protocol.bodies import BrokerStatsData
from rmq.protocol.codes import ResponseCode
from tests.cluster.ha_util import CLUSTER, GROUP, HAGroup, master_conf, slave_conf, wait_in_sync
from tests.harness import BrokerProcess, broker_process, namesrv_process
from tests.integration.broker_util import BrokerApi, props, uniq_key
from tests.interop.mqadmin_util import MqadminRun, mqadmin, mqadmin_available

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(mqadmin_available() is not None, reason=str(mqadmin_available())),
]

TOPIC = "MoreTopic"
OFFLINE_GROUP = "MoreOfflineGroup"  # committed 5 of each queue's 10
KEYED = 40  # messages k-0 .. k-39, queue i % 4, tag tag-<i % 2>


@pytest.fixture(scope="module")
def g(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    with tempfile.TemporaryDirectory(prefix="rmq-mqadmin-more-", ignore_cleanup_errors=True) as d:
        wd = Path(d)
        conf = wd / "namesrv.properties"
        conf.write_text("# namesrv for test_mqadmin_more\nproductEnvName=more\n")
        ns = namesrv_process(wd, "-c", str(conf))
        m: BrokerProcess | None = None
        s: BrokerProcess | None = None
        try:
            ns.start()
            m = broker_process(wd, ns.addr, GROUP, master_conf())
            m.start()
            s = broker_process(wd / "slave", ns.addr, GROUP, slave_conf())
            s.start()
            group = HAGroup(ns, m, s, wd)  # type: ignore[arg-type]
            uniq: list[str] = []

            async def fill() -> None:
                async with BrokerApi(m.addr) as api:
                    for i in range(KEYED):
                        u = uniq_key()
                        uniq.append(u)
                        p = props(tags=f"tag-{i % 2}", keys=f"k-{i}", uniq=u, wait="true")
                        await api.send_ok(TOPIC, b"body-%d" % i, queue_id=i % 4, properties=p)
                    for q in range(4):
                        await api.wait_max_offset(TOPIC, q, KEYED // 4)
                        assert (await api.update_offset(OFFLINE_GROUP, TOPIC, q, 5)).code == ResponseCode.SUCCESS
                await wait_in_sync(group)

            asyncio.run(fill())
            home = tmp_path_factory.mktemp("mqadmin-more-home")

            def run(*args: str, ok: bool = True) -> MqadminRun:
                r = mqadmin(home, *args, "-n", ns.addr)
                if ok:
                    assert "Exception" not in r.text, r.text
                return r

            yield SimpleNamespace(
                ns=ns.addr, master=m.addr, slave=s.addr, conf=conf, run=run, uniq=uniq, group=group, home=home
            )
        finally:
            for p in (s, m, ns):
                if p is not None:
                    p.stop()


def _kv(out: str) -> dict[str, str]:
    """getNamesrvConfig / getBrokerConfig lines: ``key<spaces>=  value``."""
    return {k.strip(): v.strip() for k, sep, v in (ln.partition("=  ") for ln in out.splitlines()) if sep}


# =========================================================================== NameServer config
def test_get_namesrv_config(g):
    r = g.run("getNamesrvConfig")
    assert f"============{g.ns}============" in r.out
    kv = _kv(r.out)
    assert kv["listenPort"] == g.ns.rsplit(":", 1)[1]
    assert kv["kvConfigPath"].endswith("kvConfig.msgpack")
    assert kv["configStorePath"] == str(g.conf) and kv["productEnvName"] == "more"
    for key in ("rocketmqHome", "clusterTest", "orderMessageEnable", "serverWorkerThreads", "configBlackList"):
        assert key in kv, key


def test_update_namesrv_config_order_message_enable_reaches_routes(g):
    order = g.run("updateOrderConf", "-t", TOPIC, "-m", "put", "-v", f"{GROUP}:4")
    assert "update orderConf success" in order.out, order.out
    route = g.run("topicRoute", "-t", TOPIC)
    assert "orderTopicConf" not in route.out  # orderMessageEnable is false by default
    try:
        r = g.run("updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "true")
        assert "update name server config success" in r.out and "orderMessageEnable : true" in r.out, r.out
        assert _kv(g.run("getNamesrvConfig").out)["orderMessageEnable"] == "true"
        route = g.run("topicRoute", "-t", TOPIC)
        assert re.search(rf'"orderTopicConf"\s*:\s*"{GROUP}:4"', route.out), route.out
        assert "orderMessageEnable=true" in g.conf.read_text()  # written to the -c file
        assert g.conf.read_text().startswith("# namesrv for test_mqadmin_more\n")
    finally:
        g.run("updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "false")
        g.run("updateOrderConf", "-t", TOPIC, "-m", "delete")


def test_update_namesrv_config_refuses_black_listed_key(g):
    r = g.run("updateNamesrvConfig", "-k", "kvConfigPath", "-v", "/tmp/elsewhere", ok=False)
    assert "Can not update config in black list: kvConfigPath" in r.text, r.text
    assert "CODE: 16" in r.text, r.text  # NO_PERMISSION
    r = g.run("updateNamesrvConfig", "-k", "noSuchKey", "-v", "1", ok=False)
    assert "noSuchKey: not a NameServer config key" in r.text, r.text
    assert "/tmp/elsewhere" not in g.conf.read_text()
    assert _kv(g.run("getNamesrvConfig").out)["kvConfigPath"] != "/tmp/elsewhere"


def test_update_order_conf_put_get_delete(g):
    topic = "MoreOrderTopic"

    async def kv() -> tuple[int, str | None]:  # GET_KV_CONFIG (101) of the NameServer itself
        async with BrokerApi(g.ns) as api:
            r = await api.call(101, {"namespace": "ORDER_TOPIC_CONFIG", "key": topic})
            return r.code, (r.ext_fields or {}).get("value")

    r = g.run("updateOrderConf", "-t", topic, "-m", "put", "-v", f"{GROUP}:2;broker-z:3")
    assert f"update orderConf success. topic=[{topic}], orderConf=[{GROUP}:2;broker-z:3]" in r.out, r.out
    assert asyncio.run(kv()) == (ResponseCode.SUCCESS, f"{GROUP}:2;broker-z:3")
    r = g.run("updateOrderConf", "-t", topic, "-m", "get")
    assert f"get orderConf success. topic=[{topic}], orderConf=[{GROUP}:2;broker-z:3]" in r.out, r.out
    r = g.run("updateOrderConf", "-t", topic, "-m", "delete")
    assert f"delete orderConf success. topic=[{topic}]" in r.out, r.out
    assert asyncio.run(kv())[0] == ResponseCode.QUERY_NOT_FOUND
    r = g.run("updateOrderConf", "-t", topic, "-m", "get", ok=False)
    assert "orderConf=[" not in r.out and "CODE: 22" in r.text, r.text  # QUERY_NOT_FOUND


# =========================================================================== topics
def test_update_topic_route_cluster_list_and_delete(g):
    r = g.run("updateTopic", "-b", g.master, "-t", "MoreNewTopic", "-r", "8", "-w", "8")
    assert f"create topic to {g.master} success." in r.out, r.out
    route = g.run("topicRoute", "-t", "MoreNewTopic").out
    assert '"readQueueNums":8' in route.replace(" ", "") and GROUP in route, route
    assert CLUSTER in g.run("topicClusterList", "-t", "MoreNewTopic").out
    rows = [ln.split() for ln in g.run("topicList", "-c").out.splitlines()]
    assert [CLUSTER, "MoreNewTopic"] in [row[:2] for row in rows], rows
    r = g.run("deleteTopic", "-c", CLUSTER, "-t", "MoreNewTopic")
    assert "delete topic [MoreNewTopic] from cluster [TestCluster] success." in r.out, r.out
    assert "MoreNewTopic" not in g.run("topicList").out


def test_update_topic_perm_then_route_shows_it(g):
    try:
        r = g.run("updateTopicPerm", "-b", g.master, "-t", TOPIC, "-p", "4")
        assert "update topic perm from 6 to 4 in" in r.out and "success" in r.out, r.out
        assert '"perm":4' in g.run("topicRoute", "-t", TOPIC).out.replace(" ", "")
    finally:
        g.run("updateTopicPerm", "-b", g.master, "-t", TOPIC, "-p", "6")
    assert '"perm":6' in g.run("topicRoute", "-t", TOPIC).out.replace(" ", "")


def test_wipe_and_add_write_perm(g):
    r = g.run("wipeWritePerm", "-b", GROUP)
    assert re.search(rf"wipe write perm of broker\[{GROUP}\] in name server\[{re.escape(g.ns)}\] OK, [1-9]", r.out), (
        r.out
    )
    assert '"perm":4' in g.run("topicRoute", "-t", TOPIC).out.replace(" ", "")
    r = g.run("addWritePerm", "-b", GROUP)
    assert re.search(rf"add write perm of broker\[{GROUP}\] in name server\[{re.escape(g.ns)}\] OK, [1-9]", r.out), (
        r.out
    )
    assert '"perm":6' in g.run("topicRoute", "-t", TOPIC).out.replace(" ", "")


STATS_TOPIC, STATS_GROUP = "MoreStatsTopic", "MoreStatsGroup"  # statsAll under load


class _Load:
    """Sends to STATS_TOPIC and pulls it as STATS_GROUP on the master, in a thread of its
    own, until stopped: live figures for the broker's stats items."""

    def __init__(self, addr: str) -> None:
        self.addr = addr
        self.stop = threading.Event()
        self.sent = self.got = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, name="stats-load", daemon=True)

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as e:  # read by the test
            self.error = e

    async def _run(self) -> None:
        async with BrokerApi(self.addr) as api:
            await api.send_ok(STATS_TOPIC, b"first", queue_id=0)
            # committed offsets make the group one statsAll lists (queryTopicConsumeByWho)
            assert (await api.update_offset(STATS_GROUP, STATS_TOPIC, 0, 0)).code == ResponseCode.SUCCESS
            offset = 0
            while not self.stop.is_set():
                await api.send_ok(STATS_TOPIC, b"load-%d" % self.sent, queue_id=0)
                self.sent += 1
                r = await api.pull(STATS_TOPIC, 0, offset, group=STATS_GROUP)
                if r.code == ResponseCode.SUCCESS:
                    offset = int(r.ext_fields["nextBeginOffset"])
                    self.got = offset
                await asyncio.sleep(0.05)

    async def _figures(self) -> tuple[float, float]:
        """The master's minute TPS of the topic's puts and of the group's gets (315)."""
        out = []
        async with BrokerApi(self.addr) as api:
            for name, key in (("TOPIC_PUT_NUMS", STATS_TOPIC), ("GROUP_GET_NUMS", f"{STATS_TOPIC}@{STATS_GROUP}")):
                r = await api.call(315, {"statsName": name, "statsKey": key})
                out.append(
                    BrokerStatsData.from_json(r.body).stats_minute.tps if r.code == ResponseCode.SUCCESS else 0.0
                )
        return out[0], out[1]

    def wait_for_figures(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while min(asyncio.run(self._figures())) <= 0:
            assert self.error is None and self.thread.is_alive(), self.error
            assert time.monotonic() < deadline, "the master's stats items never showed the load"
            time.sleep(0.5)


def test_stats_all_and_allocate_mq(g):
    out = g.run("statsAll", "-t", TOPIC).out
    assert re.search(rf"^{TOPIC}\s", out, re.M), out
    load = _Load(g.master)
    load.thread.start()
    try:
        # the broker samples every 10 s (StatsItemSet): wait for a sample after the load starts
        load.wait_for_figures()
        out = g.run("statsAll", "-t", STATS_TOPIC).out
    finally:
        load.stop.set()
        load.thread.join(30)
    assert load.error is None, load.error
    # #Topic #Consumer Group #Accumulation #InTPS #OutTPS #InMsg24Hour #OutMsg24Hour
    row = re.search(rf"^{STATS_TOPIC}\s+{STATS_GROUP}\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+(\d+)\s*$", out, re.M)
    assert row, out
    assert float(row[2]) > 0 and float(row[3]) > 0, out  # InTPS, OutTPS
    assert int(row[4]) > 0 and int(row[5]) > 0, out  # InMsg24Hour, OutMsg24Hour
    out = g.run("allocateMQ", "-t", TOPIC, "-i", "10.0.0.1@a,10.0.0.2@b").out
    assert "10.0.0.1@a" in out and "10.0.0.2@b" in out and TOPIC in out, out


# =========================================================================== groups, configs, KV
def test_sub_group_update_get_consumer_config_delete(g):
    r = g.run("updateSubGroup", "-b", g.master, "-g", "MoreSubGroup", "-r", "5")
    assert f"create subscription group to {g.master} success." in r.out, r.out
    out = g.run("getConsumerConfig", "-g", "MoreSubGroup").out
    assert "MoreSubGroup" in out and re.search(r"retryMaxTimes\s+=  5$", out, re.M), out
    r = g.run("deleteSubGroup", "-b", g.master, "-g", "MoreSubGroup")
    assert f"delete subscription group [MoreSubGroup] from broker [{g.master}] success." in r.out, r.out
    assert "MoreSubGroup" not in g.run("getConsumerConfig", "-g", "MoreSubGroup", ok=False).out


def test_update_broker_config_then_get_on_master_and_slave(g):
    r = g.run("updateBrokerConfig", "-b", g.master, "-k", "fileReservedTime", "-v", "49")
    assert f"update broker config success, {g.master}" in r.out, r.out
    kv = _kv(g.run("getBrokerConfig", "-b", g.master).out)
    assert kv["fileReservedTime"] == "49" and kv["brokerRole"] == "ASYNC_MASTER"
    # a slave's own config: updated there, read back there, the master's left as it was
    r = g.run("updateBrokerConfig", "-b", g.slave, "-k", "fileReservedTime", "-v", "51")
    assert f"update broker config success, {g.slave}" in r.out, r.out
    kv = _kv(g.run("getBrokerConfig", "-b", g.slave).out)
    assert kv["brokerRole"] == "SLAVE" and kv["brokerId"] == "1" and kv["fileReservedTime"] == "51"
    assert _kv(g.run("getBrokerConfig", "-b", g.master).out)["fileReservedTime"] == "49"


def test_update_and_delete_kv_config(g):
    r = g.run("updateKvConfig", "-s", "MoreNS", "-k", "mk", "-v", "mv")
    assert "create or update kv config to namespace success." in r.out, r.out

    async def get() -> int:
        async with BrokerApi(g.ns) as api:
            return (await api.call(101, {"namespace": "MoreNS", "key": "mk"})).code  # GET_KV_CONFIG

    assert asyncio.run(get()) == ResponseCode.SUCCESS
    r = g.run("deleteKvConfig", "-s", "MoreNS", "-k", "mk")
    assert "delete kv config from namespace success." in r.out, r.out
    assert asyncio.run(get()) == ResponseCode.QUERY_NOT_FOUND


# =========================================================================== messages
def test_query_msg_by_key_unique_key_and_offset(g):
    out = g.run("queryMsgByKey", "-t", TOPIC, "-k", "k-3").out
    assert g.uniq[3] in out or re.search(r"[0-9A-F]{32}\s+3\s", out), out
    # (its message track asks for %RETRY%<group> of the offline group, which has none: the
    # same MQClientException line RocketMQ prints there)
    out = g.run("queryMsgByUniqueKey", "-t", TOPIC, "-i", g.uniq[3], ok=False).out
    assert re.search(r"Keys:\s+\[k-3\]", out) and re.search(r"Queue ID:\s+3", out), out
    out = g.run("queryMsgByOffset", "-t", TOPIC, "-b", GROUP, "-i", "1", "-o", "0", ok=False).out
    assert re.search(r"Keys:\s+\[k-1\]", out) and re.search(r"Queue ID:\s+1", out), out
    # the offset message id it shows finds the same message
    offset_id = re.search(r"OffsetID:\s+([0-9A-F]{32})", out).group(1)
    out = g.run("queryMsgById", "-i", offset_id, ok=False).out
    assert re.search(r"Keys:\s+\[k-1\]", out) and re.search(rf"Store Host:\s+{re.escape(g.master)}", out), out


def test_print_msg_and_print_msg_by_queue(g):
    out = g.run("printMsg", "-t", TOPIC, "-d", "true").out
    assert out.count("MSGID:") >= KEYED and "body-7" in out, out[:2000]
    out = g.run("printMsgByQueue", "-t", TOPIC, "-a", GROUP, "-i", "2", "-p", "true").out
    assert out.count("MSGID:") == KEYED // 4 and "KEYS=k-2," in out and "queueId=2," in out, out[:2000]


def test_send_message_and_consume_message(g):
    out = g.run("sendMessage", "-t", TOPIC, "-p", "hello-more", "-k", "more-key", "-b", GROUP, "-i", "3").out
    assert re.search(rf"{GROUP}\s+3\s+SEND_OK\s+[0-9A-F]{{32}}", out), out
    out = g.run("consumeMessage", "-t", TOPIC, "-b", GROUP, "-i", "3", "-o", str(KEYED // 4), "-c", "1").out
    assert "hello-more" in out and "Consume ok" in out, out


def test_send_msg_status_and_check_msg_send_rt(g):
    out = g.run("sendMsgStatus", "-b", GROUP, "-s", "16", "-c", "3").out
    assert len(re.findall(r"rt=\d+ms, SendResult=SendResult \[sendStatus=SEND_OK", out)) == 3, out
    out = g.run("checkMsgSendRT", "-t", TOPIC, "-a", "3", "-s", "16").out
    assert re.search(rf"{GROUP}\s+\d\s+true", out) and "Avg RT" in out, out


def test_cluster_rt(g):
    import os
    import subprocess
    import time

    from tests.interop.mqadmin_util import ROCKETMQ

    env = dict(os.environ, ROCKETMQ_USER_HOME=str(g.home), JAVA_HEAP="256m")
    p = subprocess.Popen(
        [str(ROCKETMQ), "mqadmin", "clusterRT", "-a", "3", "-s", "16", "-i", "1", "-n", g.ns],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    lines: list[str] = []
    deadline = time.monotonic() + 60
    try:
        assert p.stdout is not None
        for ln in p.stdout:  # clusterRT prints every interval forever
            lines.append(ln)
            if re.match(rf"\s*{CLUSTER}\s+{GROUP}\s", ln) or time.monotonic() > deadline:
                break
    finally:
        p.kill()
        p.wait()
    text = "".join(lines)
    assert "Exception" not in text and re.search(rf"{CLUSTER}\s+{GROUP}\s+\d+\.\d+\s+3\s+0", text), text


# =========================================================================== offsets
def _committed(g, group: str) -> int:
    """The group's committed offsets on the master, summed over TOPIC's queues."""

    async def go() -> int:
        async with BrokerApi(g.master) as api:
            total = 0
            for q in range(4):
                r = await api.query_offset(group, TOPIC, q)
                total += int(r.ext_fields["offset"]) if r.code == ResponseCode.SUCCESS else 0
            return total

    return asyncio.run(go())


def _commit(g, group: str, offset: int) -> None:
    async def go() -> None:
        async with BrokerApi(g.master) as api:
            for q in range(4):
                assert (await api.update_offset(group, TOPIC, q, offset)).code == ResponseCode.SUCCESS

    asyncio.run(go())


def test_skip_accumulated_message(g):
    group = "MoreSkipGroup"
    _commit(g, group, 1)
    assert _committed(g, group) == 4
    out = g.run("skipAccumulatedMessage", "-g", group, "-t", TOPIC).out
    assert len(re.findall(rf"^{GROUP}\s+\d\s+{KEYED // 4 + 1}\s*$", out, re.M)) == 4, out
    assert _committed(g, group) >= KEYED  # every queue's end


def test_reset_offset_by_time(g):
    group = "MoreResetGroup"
    _commit(g, group, 2)
    out = g.run("resetOffsetByTime", "-g", group, "-t", TOPIC, "-s", "0").out
    assert "rollback consumer offset by specified" in out or TOPIC in out, out
    assert _committed(g, group) == 0, out  # back to the first message
