"""docker-compose.yml, proven without a Docker engine (issue 7, Deployment + Dashboard).

1. The file validates against the Compose specification schema vendored in
   check-jsonschema (``--builtin-schema vendor.compose-spec``: no download), and says
   what the issue asks for (2 NameServers, broker-a SYNC_MASTER + slave, broker-b
   ASYNC_MASTER + slave, each with its own conf file and volume, brokerIP1 from the
   environment, Prometheus scraping all of them, Grafana provisioned).
2. Every rmq service runs as a local process from its compose command, environment and
   mounted config (tests/compose_local.py), producers and consumers go through both
   broker groups, a real ``prometheus`` (Debian package) scrapes them with the compose
   scrape config, and every query of the Grafana dashboard returns data through
   Prometheus's HTTP API. Grafana itself is not run.
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

import pytest

from rmq.client import ConsumeFromWhere, Message, MQClientAPI, Producer
from rmq.remoting.client import RemotingClient
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
    brokers = {}
    for n in (n for n, r in roles.items() if r == "broker"):
        cmd = dep.local[n].command
        assert "brokerIP1=10.1.2.3" in cmd  # from RMQ_BROKER_IP
        props = conf_props(Path(cmd[cmd.index("-c") + 1]))
        brokers[n] = (props["brokerName"], props["brokerId"], props["brokerRole"])
        assert props["metricsPromExporterPort"] != "0"
        assert dep.local[n].env["NAMESRV_ADDR"].count(";") == 1
        # the advertised port is the one published on the host
        published = dep.services[n]["ports"][0].split(":")
        assert published[0] == published[1] == conf_props(dep.mounted_file(n, "/etc/rmq/broker.conf"))["listenPort"]
    assert sorted(brokers.values()) == [
        ("broker-a", "0", "SYNC_MASTER"),
        ("broker-a", "1", "SLAVE"),
        ("broker-b", "0", "ASYNC_MASTER"),
        ("broker-b", "1", "SLAVE"),
    ]
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


async def test_the_compose_deployment_runs_and_every_dashboard_query_has_data(tmp_path):
    dep = ComposeDeployment(COMPOSE, tmp_path)
    dashboard = json.loads(DASHBOARD.read_text())
    with contextlib.ExitStack() as stack:
        procs = {}
        for name in dep.rmq_services():
            role = dep.local[name].command[1]
            p = dep.process(name, SMALL_STORE if role == "broker" else ())
            stack.callback(p.stop)
            procs[name] = p.start()
        prom = stack.enter_context(run_prometheus(dep, tmp_path))
        namesrv = ";".join(procs[n].addr for n in ("namesrv-1", "namesrv-2"))
        masters = {"broker-a": procs["broker-a"].addr, "broker-b": procs["broker-b"].addr}

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
            return len(active) == 6 and all(t["health"] == "up" for t in active)

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
        if cmd[1] != "broker":
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
    assert len(homes) == 6 and plain[:2] == ["rmq", "broker"]  # each process its own mounted copy
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
        procs = {}
        for name in dep.rmq_services():
            cmd = dep.local[name].command
            p = dep.process(name, SMALL_STORE if cmd[1] == "broker" else ())
            stack.callback(p.stop)
            procs[name] = p.start()
        namesrv = ";".join(procs[n].addr for n in ("namesrv-1", "namesrv-2"))
        masters = [procs["broker-a"].addr, procs["broker-b"].addr]
        topic = unique("ComposeAclT")
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
