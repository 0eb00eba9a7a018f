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
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from rmq.protocol.codes import ResponseCode
from tests.cluster.ha_util import GROUP, HAGroup, master_conf, slave_conf, wait_in_sync
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
