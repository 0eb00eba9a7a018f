"""The official 5.x Node.js SDK (npm rocketmq-client-nodejs 1.0.8) through `rmq proxy` against real
`rmq namesrv` + `rmq broker` + `rmq proxy` processes: what it sends reaches the broker (and so the
4.x consumers) with body, tag, keys, properties, message group and message id intact; its
SimpleConsumer receives and acks them through the broker's POP."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from rmq.protocol.message import MessageConst
from tests.interop.conftest import DRIVERS, Cluster, _start_cluster, unique_name
from tests.proxy.harness import start_proxy

pytestmark = pytest.mark.timeout(180)

NODE5 = DRIVERS / "node5"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from _start_cluster(tmp_path_factory.mktemp("node5"), broker_conf={"autoCreateTopicEnable": "true"})


@pytest.fixture(scope="module")
def proxy(cluster: Cluster) -> Iterator[str]:
    with start_proxy(cluster.namesrv_addr, cluster.workdir) as p:
        yield p.addr


def run_node(endpoints: str, spec: dict[str, Any], script: str = "producer.js") -> list[dict[str, Any]]:
    if shutil.which("node") is None or not (NODE5 / "node_modules" / "rocketmq-client-nodejs").is_dir():
        pytest.fail(
            "interop environment for the 5.x Node SDK is missing (tests/interop/drivers/node5/node_modules).\n"
            "Build it with scripts/install_test_deps.sh (`make test` runs it first; it is idempotent).",
            pytrace=False,
        )
    r = subprocess.run(
        ["node", script, endpoints, json.dumps(spec)], capture_output=True, text=True, timeout=90, cwd=NODE5
    )
    events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert events and events[-1]["event"] == "done", (
        f"node driver failed ({r.returncode}):\n{r.stdout}\n{r.stderr[-3000:]}"
    )
    errors = [e for e in events if e["event"] == "error"]
    assert not errors, f"{errors}\n{r.stderr[-3000:]}"
    return events


def test_node_producer_sends_through_the_proxy(cluster: Cluster, proxy: str) -> None:
    topic = unique_name("node5")
    cluster.create_topic(topic)
    items = [
        {"body": f"node-{i}", "tag": "TagN", "keys": [f"nk{i}"], "props": {"lang": "node", "i": str(i)}}
        for i in range(4)
    ]
    items.append({"body": "node-fifo", "group": "og-1"})
    sent = {e["body"]: e for e in run_node(proxy, {"topic": topic, "messages": items}) if e["event"] == "sent"}
    assert set(sent) == {i["body"] for i in items}
    truth = cluster.wait_truth(topic, len(items))
    for item in items[:4]:
        m = truth[item["body"]]
        assert (m.tags, m.keys) == ("TagN", item["keys"][0])
        assert m.properties["lang"] == "node" and m.properties["i"] == item["props"]["i"]
        assert m.uniq_key == sent[item["body"]]["message_id"]
        assert m.queue_offset == sent[item["body"]]["offset"]
    assert truth["node-fifo"].properties[MessageConst.SHARDING_KEY] == "og-1"


def test_node_simple_consumer_receives_and_acks(cluster: Cluster, proxy: str) -> None:
    topic = unique_name("node5-c")
    cluster.create_topic(topic)
    items = [{"body": f"nc-{i}", "tag": "TagC"} for i in range(3)]
    sent = {e["body"]: e for e in run_node(proxy, {"topic": topic, "messages": items}) if e["event"] == "sent"}
    spec = {"topic": topic, "group": unique_name("g-node5"), "expect": 3, "timeout": 60}
    events = run_node(proxy, spec, "consumer.js")
    got = {e["body"]: e for e in events if e["event"] == "received"}
    assert {e["body"] for e in events if e["event"] == "acked"} == set(sent)
    for body, e in got.items():
        assert (e["message_id"], e["attempt"], e["tag"]) == (sent[body]["message_id"], 1, "TagC")
