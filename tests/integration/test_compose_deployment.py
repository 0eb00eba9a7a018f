"""docker-compose.yml, proven without a Docker engine (issue 7, Deployment + Dashboard).

1. The file validates against the Compose specification schema vendored in
   check-jsonschema (``--builtin-schema vendor.compose-spec``: no download), and says
   what the issues ask for (a 3-member etcd cluster; 2 NameServers, both running a
   controller on it; broker-a SYNC_MASTER + slave, broker-b ASYNC_MASTER + slave in
   controller mode, each with its own conf file and volume, brokerIP1 from the
   environment; the 5.x proxy; Prometheus scraping all of them, Grafana provisioned).
2. Every etcd and rmq service runs as a local process from its compose command,
   environment and mounted config (tests/compose_local.py; the local ``etcd`` for the
   image's), one controller leads and each group has a master and its slave
   (``rmq admin controllerStatus``), producers and consumers go through both broker
   groups, a 5.x gRPC client's sends through the proxy reach the same consumer, a real
   ``prometheus`` (Debian package) scrapes them all with the compose scrape config, every query of the Grafana dashboard returns data through Prometheus's HTTP
   API, and killing broker-a's master makes its slave master. Grafana itself is not run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from rmq.client import ConsumeFromWhere, Message, MQClientAPI, Producer
from rmq.proxy import pb
from rmq.remoting.client import RemotingClient
from tests.cluster.failover_util import store_host, wait_master, wait_slave
from tests.compose_local import ComposeDeployment, load_yaml, merge_compose
from tests.integration.test_client import create_topic, poll_at_least, start_push_from_first, unique, wait_until
from tests.metrics_util import eventually

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
DASHBOARD = REPO / "conf" / "grafana" / "rmq-dashboard.json"
# Store files small enough for a test (the compose confs keep RocketMQ's 1 GiB).
SMALL_STORE = [
    "-D",
    "mappedFileSizeCommitLog=4194304",
    "-D",
    "mappedFileSizeConsumeQueue=60000",
    "-D",
    "maxHashSlotNum=10000",
    "-D",
    "maxIndexNum=40000",
]
# The broker groups: member -> (group, brokerId, role while it is master).
GROUPS = {
    "broker-a": ("broker-a", "0", "SYNC_MASTER"),
    "broker-a-s": ("broker-a", "1", "SYNC_MASTER"),
    "broker-b": ("broker-b", "0", "ASYNC_MASTER"),
    "broker-b-s": ("broker-b", "1", "ASYNC_MASTER"),
}
# Series that exist only once replication runs (broker.ha_service / broker.epoch).
HA_ONLY = ("rocketmq_ha_slave_lag_bytes", "rocketmq_ha_in_sync_replicas", "rocketmq_ha_epoch")
# What Grafana would put in for its own variables.
GRAFANA_BUILTINS = {"__rate_interval": "1m", "__interval": "15s", "__range": "1h"}


def check_jsonschema(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def namesrv_settings(command: list[str]) -> Any:
    """What ``rmq namesrv ...`` (a service's local command) runs with: its -c file with the
    options over it, read by the NameServer's own parser."""
    from nameserver.cli import build_parser, settings_from_args

    assert command[:2] == ["rmq", "namesrv"], command
    return settings_from_args(build_parser().parse_args(command[2:]))


def conf_props(path: Path) -> dict[str, str]:
    return conf_props_text(path.read_text())


def conf_props_text(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep and not line.lstrip().startswith("#"):
            out[k.strip()] = v.strip()
    return out


# --------------------------------------------------------------------------- the file
def test_compose_file_follows_the_compose_spec_and_the_issue(tmp_path):
    r = check_jsonschema(COMPOSE)
    assert r.returncode == 0, r.stdout + r.stderr
    # the validator does reject a broken file (ports must be a list)
    doc = load_yaml(COMPOSE)
    doc["services"]["broker-a"]["ports"] = "10911:10911"
    bad = tmp_path / "broken-compose.json"
    bad.write_text(json.dumps(doc))
    r = check_jsonschema(bad)
    assert r.returncode != 0 and "ports" in r.stdout + r.stderr

    dep = ComposeDeployment(COMPOSE, tmp_path / "w", env={"RMQ_BROKER_IP": "10.1.2.3"})
    rmq = dep.rmq_services()
    roles = {n: dep.local[n].command[1] for n in rmq}
    assert sorted(n for n, r in roles.items() if r == "namesrv") == ["namesrv-1", "namesrv-2"]
    assert [n for n, r in roles.items() if r == "proxy"] == ["proxy"]
    # the 5.x proxy: both NameServers, its advertised address the host's (RMQ_BROKER_IP) and port
    proxy_cmd = dep.local["proxy"].command
    proxy_port = dep.port_map["proxy"][8081]
    assert proxy_cmd[proxy_cmd.index("-p") + 1] == str(proxy_port)
    assert proxy_cmd[proxy_cmd.index("-n") + 1].count(";") == 1
    assert f"proxyAdvertiseAddress=10.1.2.3:{proxy_port}" in proxy_cmd
    assert dep.services["proxy"]["ports"] == ["8081:8081"]

    # etcd: a static 3-member cluster of an official 3.4/3.5 image, each member its own volume
    etcd = dep.etcd_services()
    assert etcd == ["etcd-1", "etcd-2", "etcd-3"]
    peers, initial, clients = {}, set(), []
    for n in etcd:
        svc, cmd = dep.services[n], [str(c) for c in dep.services[n]["command"]]
        image = svc["image"]
        assert re.fullmatch(r"(gcr\.io/etcd-development|quay\.io/coreos)/etcd:v3\.[45]\.\d+", image), image
        flags = dict(zip(cmd[1::2], cmd[2::2], strict=True))  # --flag value ...
        assert flags["--name"] == n and flags["--initial-cluster-state"] == "new"
        assert flags["--listen-client-urls"] == "http://0.0.0.0:2379"
        assert flags["--advertise-client-urls"] == f"http://{n}:2379"
        peers[n] = flags["--initial-advertise-peer-urls"]
        initial.add(flags["--initial-cluster"])
        clients.append(f"{n}:2379")
        assert f"{n}:{flags['--data-dir']}" in svc["volumes"] and n in dep.doc["volumes"]
    assert peers == {n: f"http://{n}:2380" for n in etcd}
    assert initial == {",".join(f"{n}={peers[n]}" for n in etcd)}  # every member names all three

    # both NameServers run a controller on that etcd (the same mounted file, read-only)
    ns_conf = REPO / "conf" / "compose" / "namesrv.properties"
    for n in ("namesrv-1", "namesrv-2"):
        svc = dep.services[n]
        assert "./conf/compose/namesrv.properties:/etc/rmq/namesrv.properties:ro" in svc["volumes"]
        assert svc["command"][:6] == ["rmq", "namesrv", "-p", "9876", "-c", "/etc/rmq/namesrv.properties"]
        assert sorted(svc["depends_on"]) == etcd
    props = conf_props(ns_conf)
    assert props["enableControllerInNamesrv"] == "true"
    assert props["controllerEtcdEndpoints"].split(";") == clients
    # ... as the NameServers read it with their command line (-p, --kv-path over the file)
    etcd_here = [f"127.0.0.1:{dep.port_map[n][2379]}" for n in etcd]
    for n in ("namesrv-1", "namesrv-2"):
        settings = namesrv_settings(dep.local[n].command)
        ctl = settings.controller_config
        assert ctl is not None and ctl.etcd_endpoints == etcd_here and ctl.controllerEtcdKeyPrefix == "/rmq"
        assert settings.netty.listenPort == dep.port_map[n][9876]

    brokers = {}
    for n in (n for n, r in roles.items() if r == "broker"):
        cmd = dep.local[n].command
        assert "brokerIP1=10.1.2.3" in cmd  # from RMQ_BROKER_IP
        props = conf_props(Path(cmd[cmd.index("-c") + 1]))
        brokers[n] = (props["brokerName"], props["brokerId"], props["brokerRole"])
        assert props["metricsPromExporterPort"] != "0"
        assert dep.local[n].env["NAMESRV_ADDR"].count(";") == 1
        # controller mode, heartbeating both controllers
        mounted = conf_props(dep.mounted_file(n, "/etc/rmq/broker.conf"))
        assert mounted["enableControllerMode"] == "true"
        assert (
            mounted["controllerAddr"]
            == "namesrv-1:9876;namesrv-2:9876"
            == dep.services[n]["environment"]["NAMESRV_ADDR"]
        )
        # the HA address it advertises while master: its name on the compose network
        assert mounted["brokerIP2"] == n
        # the advertised port is the one published on the host
        published = dep.services[n]["ports"][0].split(":")
        assert published[0] == published[1] == mounted["listenPort"]
    assert brokers == GROUPS
    confs = {dep.mounted_file(n, "/etc/rmq/broker.conf") for n in brokers}
    stores = {m.source for n in brokers for m in dep.local[n].mounts if m.named}
    assert len(confs) == len(stores) == 4  # own conf file and volume each
    assert dep.services["broker-a"]["build"] == "."  # one image, every role
    assert {dep.services[n]["image"] for n in rmq} == {"rmq:local"}

    # Prometheus scrapes every rmq process's metrics port
    cfg = json.loads(dep.prometheus_config())
    targets = {t for job in cfg["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    metric_ports = set()
    for n in rmq:
        cmd = dep.local[n].command
        if roles[n] == "namesrv":
            metric_ports.add(int(cmd[cmd.index("--metrics-port") + 1]))
        elif roles[n] == "proxy":
            metric_ports.add(int(next(a.split("=", 1)[1] for a in cmd if a.startswith("metricsPromExporterPort="))))
        else:
            metric_ports.add(int(conf_props(Path(cmd[cmd.index("-c") + 1]))["metricsPromExporterPort"]))
    assert targets == {f"127.0.0.1:{p}" for p in metric_ports}

    # Grafana: provisioning, the dashboard, and the datasource uid it defaults to
    graf = dep.services["grafana"]
    prov = dep.mounted_file("grafana", "/etc/grafana/provisioning")
    ds = load_yaml(prov / "datasources" / "prometheus.yml")["datasources"][0]
    provider = load_yaml(prov / "dashboards" / "rmq.yml")["providers"][0]
    assert ds["url"] == "http://prometheus:9090" and "prometheus" in graf["depends_on"]
    assert dep.mounted_file("grafana", provider["options"]["path"] + "/rmq-dashboard.json") == DASHBOARD
    dash = json.loads(DASHBOARD.read_text())
    ds_var = next(v for v in dash["templating"]["list"] if v["type"] == "datasource")
    assert ds_var["current"]["value"] == ds["uid"]


# --------------------------------------------------------------------------- running it
@contextlib.contextmanager
def run_prometheus(dep: ComposeDeployment, workdir: Path) -> Iterator[str]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("no `prometheus` on PATH: scripts/install_test_deps.sh installs the Debian package prometheus")
    d = workdir / "prometheus-run"
    d.mkdir()
    (d / "prometheus.yml").write_text(dep.prometheus_config())
    port = dep.port_map["prometheus"][9090]
    url = f"http://127.0.0.1:{port}"
    log = open(d / "prometheus.log", "wb")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={d / 'prometheus.yml'}",
            f"--storage.tsdb.path={d / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("prometheus did not become ready:\n" + (d / "prometheus.log").read_text()[-3000:])
            time.sleep(0.2)
        yield url
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()


def prom_api(url: str, path: str, **params: str) -> Any:
    q = urllib.parse.urlencode(params)
    with urllib.request.urlopen(f"{url}/api/v1/{path}?{q}", timeout=10) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return body["data"]


def query(url: str, expr: str) -> list[dict[str, Any]]:
    data = prom_api(url, "query", query=expr)
    assert data["resultType"] == "vector", data
    return data["result"]


def grafana_to_promql(expr: str, dashboard: dict[str, Any]) -> str:
    """Substitute Grafana's variables: its built-ins, and the dashboard's own
    variables at their "All" value."""
    values = dict(GRAFANA_BUILTINS)
    for v in dashboard["templating"]["list"]:
        if v["type"] == "query":
            values[v["name"]] = v.get("allValue") or ".*"

    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in values:
            raise AssertionError(f"unknown Grafana variable ${name} in {expr}")
        return values[name]

    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", sub, expr)


def dashboard_targets(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for p in dashboard["panels"]:
        for t in p.get("targets", []):
            out.append((p["title"], t["expr"]))
    return out


def controller_status_run(namesrv: str, *options: str) -> subprocess.CompletedProcess[str]:
    """``rmq admin controllerStatus -n NAMESRV --json`` (as README.md says to run it)."""
    return subprocess.run(
        [sys.executable, "-m", "rmq.cli", "admin", "controllerStatus", "-n", namesrv, "--json", *options],
        capture_output=True,
        text=True,
        timeout=60,
    )


def controller_status(namesrv: str, *options: str) -> dict[str, Any]:
    r = controller_status_run(namesrv, *options)
    assert r.returncode == 0, r.stdout + r.stderr
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


async def wait_controllers(namesrv: str, groups: dict[str, tuple[str, set[str]]], *options: str) -> dict[str, Any]:
    """Until one controller leads (both NameServers agree which) and each broker group
    ``name: (master, alive members)`` has that master (brokerId 0, the others > 0) and those
    members alive; returns controllerStatus."""
    doc: dict[str, Any] = {}

    async def settled() -> bool:
        nonlocal doc
        doc = await asyncio.to_thread(controller_status, namesrv, *options)
        views = doc["controllers"]
        leaders = [v["controller"] for v in views if v.get("isLeader")]
        if len(views) != 2 or len(leaders) != 1 or {v.get("leader") for v in views} != set(leaders):
            return False
        have = {
            g["brokerName"]: (g["masterAddr"], {m["brokerAddr"] for m in g["members"] if m["alive"]})
            for g in doc["groups"]
        }
        ids_ok = all(
            (m["brokerId"] == 0) == (m["brokerAddr"] == g["masterAddr"])
            for g in doc["groups"]
            for m in g["members"]
            if m["alive"]
        )
        return have == groups and ids_ok

    await wait_until(settled, 30, what=f"one leading controller, and groups {groups}: {doc}")
    return doc


async def test_the_compose_deployment_runs_and_every_dashboard_query_has_data(tmp_path):
    dep = ComposeDeployment(COMPOSE, tmp_path)
    dashboard = json.loads(DASHBOARD.read_text())
    with contextlib.ExitStack() as stack:
        procs = dep.start(stack, SMALL_STORE)
        prom = stack.enter_context(run_prometheus(dep, tmp_path))
        namesrv = ";".join(procs[n].addr for n in ("namesrv-1", "namesrv-2"))
        masters = {"broker-a": procs["broker-a"].addr, "broker-b": procs["broker-b"].addr}
        addrs = {n: procs[n].addr for n in GROUPS}

        # the controllers: one leads (an etcd lease), the other stands by; each group's
        # brokerId 0 is master and its brokerId 1 a slave, as each broker says itself too
        groups = {g: (addrs[g], {addrs[g], addrs[g + "-s"]}) for g in masters}
        status = await wait_controllers(namesrv, groups)
        leader = next(v for v in status["controllers"] if v["isLeader"])
        assert "etcd" in leader["store"] and all(v["store"] == leader["store"] for v in status["controllers"])
        for n in GROUPS:
            await (wait_slave if n.endswith("-s") else wait_master)(addrs[n], timeout=20)

        # both groups registered, master and slave, on both NameServers
        for ns in ("namesrv-1", "namesrv-2"):
            async with RemotingClient() as rc:
                api = MQClientAPI(rc, [procs[ns].addr])

                async def both_groups() -> bool:
                    info = await api.get_broker_cluster_info()
                    return {n: set(b.broker_addrs) for n, b in info.broker_addr_table.items()} == {
                        "broker-a": {0, 1},
                        "broker-b": {0, 1},
                    }

                await wait_until(both_groups, 20, what=f"4 brokers on {ns}")

        def all_targets_up() -> bool:
            active = prom_api(prom, "targets")["activeTargets"]
            return len(active) == 7 and all(t["health"] == "up" for t in active)

        await eventually(all_targets_up, timeout=30, what="every scrape target up")

        topic = unique("ComposeT")
        await create_topic(procs["namesrv-1"].addr, list(masters.values()), topic, queues=4)
        group = unique("compose_cg")
        consumer, got = await start_push_from_first(group, namesrv, topic, persist_consumer_offset_interval=500)
        try:
            per_broker: dict[str, int] = {}
            sent = 0
            async with Producer(unique("compose_pg"), namesrv) as p:
                for _ in range(3):  # spread over several scrapes
                    for i in range(40):
                        r = await p.send(Message(topic, b"%04d" % i + b"x" * 1020))
                        per_broker[r.message_queue.broker_name] = per_broker.get(r.message_queue.broker_name, 0) + 1
                        sent += 1
                    await asyncio.sleep(1.0)
            assert set(per_broker) == {"broker-a", "broker-b"}, per_broker
            await wait_until(lambda: len(got.msgs) >= sent, 30, what=f"{sent} consumed")
            assert sorted(m.body for m in got.msgs) == sorted(b"%04d" % (i % 40) + b"x" * 1020 for i in range(sent))

            # Prometheus has the traffic and the committed offsets
            def scraped() -> bool:
                r = query(prom, f'sum(rocketmq_messages_in_total{{topic="{topic}"}})')
                lag = query(prom, f'rocketmq_consumer_lag_messages{{consumer_group="{group}", topic="{topic}"}}')
                return (
                    bool(r)
                    and float(r[0]["value"][1]) == sent
                    and sorted(x["metric"]["node_id"] for x in lag) == ["broker-a", "broker-b"]
                    and all(float(x["value"][1]) == 0 for x in lag)
                )

            await eventually(scraped, timeout=30, what="traffic and offsets in Prometheus")
            alive = query(prom, 'rocketmq_namesrv_brokers_alive{cluster="DefaultCluster"}')
            assert sorted(float(a["value"][1]) for a in alive) == [4.0, 4.0]
            per_node = query(prom, f'sum by (node_id) (rocketmq_messages_in_total{{topic="{topic}"}})')
            assert {x["metric"]["node_id"]: float(x["value"][1]) for x in per_node} == {
                k: float(v) for k, v in per_broker.items()
            }
            roles = query(prom, "rocketmq_broker_role")
            assert sorted(float(x["value"][1]) for x in roles) == [0.0, 1.0, 2.0, 2.0]

            # a 5.x client through the proxy: its messages reach the same consumer, and
            # Prometheus has the proxy's calls
            bodies = [b"via-proxy-%02d" % i for i in range(5)]
            await send_through_proxy(procs["proxy"].addr, topic, bodies)
            await wait_until(lambda: len(got.msgs) >= sent + len(bodies), 30, what="the proxy's messages consumed")
            assert sorted(m.body for m in got.msgs[sent:]) == bodies

            def proxy_scraped() -> bool:
                r = query(prom, 'sum(rocketmq_proxy_rpc_total{rpc="SendMessage", code="OK", node_type="proxy"})')
                return bool(r) and float(r[0]["value"][1]) == len(bodies)

            await eventually(proxy_scraped, timeout=30, what="the proxy's SendMessage calls in Prometheus")

            # every panel's query returns data (HA series once replication runs)
            ha_live = bool(query(prom, "rocketmq_ha_in_sync_replicas"))
            missing, pending = [], []
            for title, expr in dashboard_targets(dashboard):
                promql = grafana_to_promql(expr, dashboard)
                result = query(prom, promql)
                finite = [x for x in result if math.isfinite(float(x["value"][1]))]
                if any(name in expr for name in HA_ONLY) and not ha_live:
                    assert not result, f"{title}: {promql} has data without an HA service?"
                    pending.append(title)
                elif not finite:
                    missing.append(f"{title}: {promql} -> {result}")
            assert not missing, "dashboard queries without data:\n" + "\n".join(missing)
            if pending:
                warnings.warn(
                    f"HA not running on these brokers yet; no data expected for: {sorted(set(pending))}", stacklevel=2
                )
        finally:
            await consumer.shutdown()

        # failover inside the deployment: broker-a's master dies, the controller makes
        # broker-a-s master (after controllerMasterTimeout), and producers reach it
        epoch = next(g["epoch"] for g in status["groups"] if g["brokerName"] == "broker-a")
        t0 = time.monotonic()
        procs["broker-a"].kill()
        await wait_master(addrs["broker-a-s"], timeout=40)
        took = time.monotonic() - t0
        status = await wait_controllers(
            namesrv, {"broker-a": (addrs["broker-a-s"], {addrs["broker-a-s"]})}, "-b", "broker-a"
        )
        group = status["groups"][0]
        assert group["masterAddr"] == addrs["broker-a-s"] and group["epoch"] > epoch, group
        print(f"failover: broker-a-s master {took:.1f}s after broker-a was killed")

        # both NameServers route broker-a to its new master (a client may ask either)
        async def routed_on(ns: str) -> bool:
            async with RemotingClient() as rc:
                info = await MQClientAPI(rc, [procs[ns].addr]).get_broker_cluster_info()
            data = info.broker_addr_table.get("broker-a")
            return data is not None and data.broker_addrs.get(0) == addrs["broker-a-s"]

        for ns in ("namesrv-1", "namesrv-2"):
            await wait_until(lambda ns=ns: routed_on(ns), 45, 0.2, what=f"broker-a-s routed as master on {ns}")
        routed = time.monotonic() - t0 - took
        # the standby's NameServer re-reads the group from etcd when a registration as master
        # disagrees with its view, so the new master is routed at once on both
        assert routed <= 5, f"broker-a-s routed as master on both NameServers only {routed:.1f}s after it became master"
        # a topic made now, on the masters of now, takes writes on both groups
        topic = unique("ComposeFoT")
        for ns in ("namesrv-1", "namesrv-2"):  # (create_topic waits for the route on the NameServer given)
            await create_topic(procs[ns].addr, [addrs["broker-a-s"], masters["broker-b"]], topic, queues=4)
        stored: dict[str, set[str]] = {}
        async with Producer(unique("compose_pg"), namesrv) as p:
            for i in range(16):
                r = await p.send(Message(topic, b"after-failover-%02d" % i))
                stored.setdefault(r.message_queue.broker_name, set()).add(store_host(r.offset_msg_id))
        assert stored == {"broker-a": {addrs["broker-a-s"]}, "broker-b": {masters["broker-b"]}}, stored


async def send_through_proxy(addr: str, topic: str, bodies: list[bytes]) -> None:
    """SendMessage through ``rmq proxy`` as a 5.x client does (one message per call)."""
    Req, Resp = pb.msg("SendMessageRequest"), pb.msg("SendMessageResponse")
    md = (("x-mq-client-id", "compose-test@1@0@proxy"), ("x-mq-language", "PYTHON"))
    async with grpc.aio.insecure_channel(addr) as ch:
        send = ch.unary_unary(f"/{pb.SERVICE}/SendMessage", Req.SerializeToString, Resp.FromString)
        for i, body in enumerate(bodies):
            req = Req()
            m = req.messages.add(body=body)
            m.topic.name = topic
            m.system_properties.message_id = f"0102030405060708090A0B0C0D0E0F{i:02X}"
            m.system_properties.message_type = pb.MessageType.NORMAL
            resp = await send(req, metadata=md, timeout=10)
            assert resp.status.code == pb.Code.OK, resp.status


# --------------------------------------------------------------------------- the ACL-on variant
ACL_OVERRIDE = REPO / "docker-compose.acl.yml"
ACL_TEMPLATE = REPO / "conf" / "acl" / "plain_acl.yml"
ACL_ENV = {
    "RMQ_BROKER_IP": "127.0.0.1",
    "RMQ_ACL_ADMIN_SECRET_KEY": "admin-secret-from-env",
    "RMQ_ACL_APP_ACCESS_KEY": "orders-app",
    "RMQ_ACL_APP_SECRET_KEY": "app-secret-from-env",
    "RMQ_ACL_CLUSTER_SECRET_KEY": "cluster-secret-from-env",
}
ACL_ADMIN = ("rmq-admin", ACL_ENV["RMQ_ACL_ADMIN_SECRET_KEY"])
ACL_APP = (ACL_ENV["RMQ_ACL_APP_ACCESS_KEY"], ACL_ENV["RMQ_ACL_APP_SECRET_KEY"])


def acl_deployment(workdir: Path, env: dict[str, str] = ACL_ENV) -> ComposeDeployment:
    """docker compose -f docker-compose.yml -f docker-compose.acl.yml, as local processes."""
    return ComposeDeployment(COMPOSE, workdir, env=env, overrides=[ACL_OVERRIDE])


def test_acl_variant_follows_the_compose_spec_and_keeps_secrets_out(tmp_path):
    from rmq.auth.acl_config import load_acl

    merged = tmp_path / "merged-compose.json"
    merged.write_text(json.dumps(merge_compose(load_yaml(COMPOSE), load_yaml(ACL_OVERRIDE))))
    for path in (ACL_OVERRIDE, merged):
        r = check_jsonschema(path)
        assert r.returncode == 0, r.stdout + r.stderr
    # the inline config is the template, verbatim; every secret in it is a required variable
    template = ACL_TEMPLATE.read_text()
    assert load_yaml(ACL_OVERRIDE)["configs"]["plain_acl"]["content"] == template
    raw_accounts = load_yaml(ACL_TEMPLATE)["accounts"]
    assert len(raw_accounts) == 3
    assert all(re.fullmatch(r"\$\{RMQ_ACL_\w+_SECRET_KEY:\?[^}]+\}", a["secretKey"]) for a in raw_accounts)
    # compose refuses to start without them
    for missing in ("RMQ_ACL_ADMIN_SECRET_KEY", "RMQ_ACL_APP_SECRET_KEY", "RMQ_ACL_CLUSTER_SECRET_KEY"):
        with pytest.raises(ValueError, match=missing):
            acl_deployment(tmp_path / f"no-{missing}", {k: v for k, v in ACL_ENV.items() if k != missing})

    dep = acl_deployment(tmp_path / "w")
    plain = dep.local["broker-a"].command
    base = ComposeDeployment(COMPOSE, tmp_path / "base", env=ACL_ENV)
    homes = set()
    for name in dep.rmq_services():
        cmd = dep.local[name].command
        props = conf_props(Path(cmd[cmd.index("-c") + 1]))
        assert props["aclEnable"] == "true" and props["tls.server.mode"] == "enforcing", name
        homes.add(props["rocketmqHome"])
        acl = load_acl(props["rocketmqHome"])  # the rendered file, as the broker loads it
        assert {a: (acl.account(a).secret_key, acl.account(a).admin) for a in acl.accounts} == {
            "rmq-admin": (ACL_ADMIN[1], True),
            ACL_APP[0]: (ACL_APP[1], False),
            "rmq-cluster": (ACL_ENV["RMQ_ACL_CLUSTER_SECRET_KEY"], True),
        }
        if cmd[1] == "proxy":
            # the base file's proxy (NameServers, port, advertised address) plus ACL, TLS, the credential
            acl_spec, base_spec = dep.services[name]["command"], base.services[name]["command"]
            for opt in ("-n", "-p"):
                assert acl_spec[acl_spec.index(opt) + 1] == base_spec[base_spec.index(opt) + 1], opt
            assert (
                'innerClientAuthenticationCredentials={"accessKey":"rmq-cluster","secretKey":"cluster-secret-from-env"}'
                in cmd
            )
            continue
        if cmd[1] != "broker":
            # the NameServer of the plain deployment (command, controller keys) plus ACL and TLS
            assert dep.services[name]["command"] == base.services[name]["command"]
            acl_conf = conf_props(dep.mounted_file(name, "/etc/rmq/namesrv.properties"))
            base_conf = conf_props(base.mounted_file(name, "/etc/rmq/namesrv.properties"))
            assert {k: v for k, v in acl_conf.items() if k in base_conf} == base_conf
            settings = namesrv_settings(cmd)
            assert settings.namesrv.aclEnable and settings.controller_config is not None
            assert settings.controller_config.etcd_endpoints == [
                f"127.0.0.1:{dep.port_map[n][2379]}" for n in dep.etcd_services()
            ]
            continue
        # the same broker as the plain deployment otherwise (identity, ports, store)
        acl_conf = conf_props(dep.mounted_file(name, "/etc/rmq/broker.conf"))
        base_conf = conf_props(base.mounted_file(name, "/etc/rmq/broker.conf"))
        assert {k: v for k, v in acl_conf.items() if k in base_conf} == base_conf
        assert (
            'innerClientAuthenticationCredentials={"accessKey":"rmq-cluster","secretKey":"cluster-secret-from-env"}'
            in cmd
        )
        # the real config loader reads it (-p prints the effective config and exits)
        r = subprocess.run(
            [sys.executable, "-m", "rmq.cli", *cmd[1:], "-p"], capture_output=True, text=True, timeout=60
        )
        effective = conf_props_text(r.stdout)
        assert r.returncode == 0 and effective["aclEnable"].lower() == "true", r.stdout + r.stderr
        assert effective["rocketmqHome"] == props["rocketmqHome"]
    assert len(homes) == 7 and plain[:2] == ["rmq", "broker"]  # each process its own mounted copy
    for text in (ACL_OVERRIDE.read_text(), template, *(p.read_text() for p in (REPO / "conf" / "acl").iterdir())):
        assert not any(secret in text for secret in ACL_ENV.values() if "secret" in secret)


async def test_acl_variant_runs_signed_clients_only(tmp_path):
    from rmq.client import LitePullConsumer, MQBrokerError
    from rmq.client.acl import AclClientRPCHook
    from rmq.protocol.bodies import TopicConfig
    from rmq.protocol.codes import RemotingSysResponseCode, RequestCode
    from rmq.protocol.frame import RemotingCommand
    from rmq.remoting.errors import RemotingError
    from rmq.remoting.tls import TlsSettings, client_context

    tls = client_context(TlsSettings())  # the variant is TLS enforcing: every client speaks TLS

    dep = acl_deployment(tmp_path)
    with contextlib.ExitStack() as stack:
        procs = dep.start(stack, SMALL_STORE)
        namesrv = ";".join(procs[n].addr for n in ("namesrv-1", "namesrv-2"))
        masters = [procs["broker-a"].addr, procs["broker-b"].addr]
        topic = unique("ComposeAclT")
        # the controllers run under ACL and TLS too: the brokers' signed heartbeats reach them,
        # and an operator sees them with the admin account (the answer is refused unsigned)
        groups = {g: (procs[g].addr, {procs[g].addr, procs[g + "-s"].addr}) for g in ("broker-a", "broker-b")}
        admin = ("--access-key", ACL_ADMIN[0], "--secret-key", ACL_ADMIN[1], "--tls")
        await wait_controllers(namesrv, groups, *admin)
        r = await asyncio.to_thread(controller_status_run, namesrv, "--tls")
        assert r.returncode != 0 and "No accessKey is configured" in r.stdout + r.stderr, r.stdout + r.stderr
        # the brokers' registrations, signed with the cluster credential, pass the NameServers' ACL
        for ns in ("namesrv-1", "namesrv-2"):
            async with RemotingClient() as plain:  # enforcing: a plaintext connection is closed
                with pytest.raises((RemotingError, OSError)):
                    await MQClientAPI(plain, [procs[ns].addr]).get_broker_cluster_info()
            async with RemotingClient(ssl=tls) as rc:  # reads are open to everybody
                api = MQClientAPI(rc, [procs[ns].addr])

                async def four_brokers() -> bool:
                    info = await api.get_broker_cluster_info()
                    return sorted((n, sorted(b.broker_addrs)) for n, b in info.broker_addr_table.items()) == [
                        ("broker-a", [0, 1]),
                        ("broker-b", [0, 1]),
                    ]

                await wait_until(four_brokers, 30, what=f"4 brokers registered on {ns}")
                # ... and an unsigned write is refused there
                r = await rc.invoke(
                    procs[ns].addr,
                    RemotingCommand(RequestCode.DELETE_TOPIC_IN_NAMESRV, ext_fields={"topic": "TBW102"}),
                    5,
                )
                assert r.code == RemotingSysResponseCode.SYSTEM_ERROR and "No accessKey is configured" in r.remark

        async with Producer(unique("compose_pg"), namesrv, use_tls=True) as p:
            with pytest.raises(MQBrokerError, match="No accessKey is configured"):
                await p.send(Message("TBW102", b"unsigned"))
        async with RemotingClient(request_hook=AclClientRPCHook(*ACL_APP), ssl=tls) as rc:
            api = MQClientAPI(rc, [procs["namesrv-1"].addr])
            with pytest.raises(MQBrokerError, match="Need admin permission for request code=17"):
                await api.create_topic(masters[0], TopicConfig(topic, 4, 4, 6))
        async with RemotingClient(request_hook=AclClientRPCHook(*ACL_ADMIN), ssl=tls) as rc:
            api = MQClientAPI(rc, [procs["namesrv-1"].addr])
            for addr in masters:
                await api.create_topic(addr, TopicConfig(topic, 4, 4, 6))

            async def routed() -> bool:
                route = await api.get_topic_route_info(topic)
                return route is not None and len(route.queue_datas) == 2

            await wait_until(routed, 20, what=f"route of {topic} on both broker groups")

        sent: dict[str, int] = {}
        async with Producer(
            unique("compose_pg"), namesrv, access_key=ACL_APP[0], secret_key=ACL_APP[1], use_tls=True
        ) as p:
            for i in range(16):
                r = await p.send(Message(topic, b"acl-%02d" % i))
                sent[r.message_queue.broker_name] = sent.get(r.message_queue.broker_name, 0) + 1
        assert set(sent) == {"broker-a", "broker-b"}, sent
        c = LitePullConsumer(
            unique("compose_cg"),
            namesrv,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            access_key=ACL_APP[0],
            secret_key=ACL_APP[1],
            use_tls=True,
        )
        c.subscribe(topic, "*")
        await c.start()
        try:
            got = await poll_at_least(c, 16, "16 messages consumed with the app account", timeout=30)
        finally:
            await c.shutdown()
        assert sorted(m.body for m in got) == [b"acl-%02d" % i for i in range(16)]
