"""The official 5.x Python SDK (PyPI rocketmq-python-client 5.1.2) through `rmq proxy`, against real
`rmq namesrv` + `rmq broker` + `rmq proxy` processes on ephemeral ports.

The SDK runs in a subprocess (tests/interop/drivers/py5_client.py, .venv-interop-py5): its
generated modules would share protobuf's default pool with anything else a test process loads.
What it sends is checked on the broker (raw PULL_MESSAGE) and consumed by rmq's own 4.x client
and by the official 4.9.8 Java client (tests/interop/drivers/java/Py5Consume.java).
The SDK's SimpleConsumer consumes through the broker's POP.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.message import MessageConst
from tests.interop.conftest import DRIVERS, REPO, Cluster, _start_cluster, rmq_side, unique_name
from tests.interop.java_build import compile_java, run_java
from tests.proxy.harness import start_proxy

PY5_VENV = REPO / ".venv-interop-py5"
PY5_SPEC = "rocketmq-python-client==5.1.2"
DRIVER = DRIVERS / "py5_client.py"

pytestmark = pytest.mark.timeout(300)


def _require_py5() -> Path:
    py = PY5_VENV / "bin" / "python"
    stamp = PY5_VENV / ".rmq-interop-stamp"
    if not py.exists() or not stamp.exists() or stamp.read_text().strip() != PY5_SPEC:
        pytest.fail(
            f"interop environment for the 5.x Python SDK is missing: {PY5_VENV.name}/ ({PY5_SPEC}).\n"
            "Build it with scripts/install_test_deps.sh (`make test` runs it first; it is idempotent).",
            pytrace=False,
        )
    return py


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """NameServer + broker that checks half messages every second (the check-back test)."""
    conf = {"transactionCheckInterval": 1000, "transactionTimeOut": 1000, "autoCreateTopicEnable": "true"}
    yield from _start_cluster(tmp_path_factory.mktemp("py5"), broker_conf=conf)


@pytest.fixture(scope="module")
def proxy(cluster: Cluster) -> Iterator[str]:
    with start_proxy(cluster.namesrv_addr, cluster.workdir) as p:
        yield p.addr


def run_driver(
    mode: str,
    endpoints: str,
    spec: dict[str, Any],
    timeout: float = 90,
    allow_errors: bool = False,
    env: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    py = _require_py5()
    r = subprocess.run(
        [str(py), str(DRIVER), mode, endpoints, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(REPO),
        env={**os.environ, **(env or {})},
    )
    events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert events and events[-1]["event"] == "done", f"driver failed ({r.returncode}):\n{r.stdout}\n{r.stderr[-3000:]}"
    errors = [e for e in events if e["event"] == "error"]
    assert allow_errors or not errors, f"{errors}\n{r.stderr[-3000:]}"
    return events


def test_normal_send_reaches_4x_consumers_intact(cluster: Cluster, proxy: str) -> None:
    topic = unique_name("py5-normal")
    cluster.create_topic(topic)
    items = [
        {"body": f"normal-{i}", "tag": f"Tag{i % 2}", "keys": [f"k{i}", f"kk{i}"], "props": {"color": f"c{i}"}}
        for i in range(6)
    ]
    sent = {
        e["body"]: e for e in run_driver("send", proxy, {"topic": topic, "messages": items}) if e["event"] == "sent"
    }
    assert len(sent) == 6
    truth = cluster.wait_truth(topic, 6)
    for item in items:
        m = truth[item["body"]]
        assert m.tags == item["tag"]
        assert set(m.keys.split(" ")) == set(item["keys"])  # the SDK keeps keys in a set
        assert m.properties["color"] == item["props"]["color"]
        assert m.uniq_key == sent[item["body"]]["message_id"]
        assert m.queue_offset == sent[item["body"]]["offset"]
        assert m.properties[MessageConst.PRODUCER_GROUP] == topic
        assert MessageConst.SHARDING_KEY not in m.properties
    # and through rmq's own 4.x push consumer
    got = rmq_side(cluster).consume(topic, unique_name("g-normal"), [i["body"] for i in items])
    by_body = {g["body"]: g for g in got}
    for item in items:
        g = by_body[item["body"]]
        assert g["msg_id"] == sent[item["body"]]["message_id"]
        assert g["tags"] == item["tag"]
    # and through the official 4.9.8 Java client
    classes = compile_java([DRIVERS / "java" / "Py5Consume.java"], cluster.workdir / "java-classes")
    r = run_java(
        "Py5Consume",
        [cluster.namesrv_addr, topic, unique_name("g-java"), str(len(items))],
        classes=classes,
        user_home=cluster.workdir / "java-home",
    )
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert r.returncode == 0 and lines and lines[-1].get("done"), f"{r.stdout}\n{r.stderr[-3000:]}"
    java = {x["body"]: x for x in lines[:-1]}
    for item in items:
        x = java[item["body"]]
        assert x["msgId"] == sent[item["body"]]["message_id"]
        assert (x["tags"], set(x["keys"].split(" "))) == (item["tag"], set(item["keys"]))
        assert x["props"]["color"] == item["props"]["color"]


def test_unknown_topic_is_auto_created(cluster: Cluster, proxy: str) -> None:
    topic = unique_name("py5-auto")
    run_driver("send", proxy, {"topic": topic, "messages": [{"body": "auto-0"}]})
    assert set(cluster.wait_truth(topic, 1)) == {"auto-0"}


def test_fifo_message_group_keeps_one_queue(cluster: Cluster, proxy: str) -> None:
    topic = unique_name("py5-fifo")
    cluster.create_topic(topic)
    items = [{"body": f"fifo-{g}-{i}", "group": f"order-{g}"} for g in range(3) for i in range(4)]
    run_driver("send", proxy, {"topic": topic, "messages": items})
    truth = cluster.wait_truth(topic, len(items))
    for g in range(3):
        ms = [truth[f"fifo-{g}-{i}"] for i in range(4)]
        assert {m.properties[MessageConst.SHARDING_KEY] for m in ms} == {f"order-{g}"}
        assert len({m.queue_id for m in ms}) == 1, "one message group, one queue"
        assert [m.queue_offset for m in ms] == sorted(m.queue_offset for m in ms), "send order kept"


def test_delayed_send_is_not_delivered_early(cluster: Cluster, proxy: str) -> None:
    topic = unique_name("py5-delay")
    cluster.create_topic(topic)
    t0 = time.time()
    run_driver("send", proxy, {"topic": topic, "messages": [{"body": "late-0", "delay_s": 3}]})
    assert cluster.pull_all(topic) == [], "a delayed message is visible at once"
    m = cluster.wait_truth(topic, 1, timeout=30)["late-0"]
    deliver_ms = int(m.properties["TIMER_DELIVER_MS"])
    # the SDK sends whole seconds (int(time.time()) + 3, after its own start-up): not before t0 + 2
    assert deliver_ms / 1000 >= t0 + 2, (t0, deliver_ms)
    assert time.time() * 1000 >= deliver_ms
    # a timer message (no delay level), its copy stored at its time, never before
    assert "DELAY" not in m.properties and m.topic == topic
    assert m.store_timestamp >= deliver_ms, (deliver_ms, m.store_timestamp)


def test_transaction_commit_and_rollback(cluster: Cluster, proxy: str) -> None:
    topic = unique_name("py5-tx")
    cluster.create_topic(topic)
    items = [{"body": "tx-commit", "end": "commit"}, {"body": "tx-rollback", "end": "rollback"}]
    events = run_driver("tx", proxy, {"topic": topic, "messages": items})
    sent = {e["body"]: e for e in events if e["event"] == "sent"}
    assert set(sent) == {"tx-commit", "tx-rollback"}
    m = cluster.wait_truth(topic, 1)["tx-commit"]
    assert m.uniq_key == sent["tx-commit"]["message_id"]
    time.sleep(2)
    assert {x.body.decode() for x in cluster.pull_all(topic)} == {"tx-commit"}


def test_transaction_check_back_reaches_the_5x_checker(cluster: Cluster, proxy: str) -> None:
    topic = unique_name("py5-txcheck")
    cluster.create_topic(topic)
    items = [{"body": "tx-orphan", "end": "none"}]
    spec = {"topic": topic, "messages": items, "check": "commit", "wait_checks": 1, "timeout": 40}
    events = run_driver("tx", proxy, spec, timeout=120)
    checks = [e for e in events if e["event"] == "checked"]
    assert checks and checks[0]["body"] == "tx-orphan", events
    sent = next(e for e in events if e["event"] == "sent")
    assert checks[0]["message_id"] == sent["message_id"]
    m = cluster.wait_truth(topic, 1, timeout=20)["tx-orphan"]
    assert m.uniq_key == sent["message_id"]


# ------------------------------------------------------------------ consuming (POP in the broker)
def test_simple_consumer_receives_acks_and_sees_4x_properties(cluster: Cluster, proxy: str) -> None:
    topic = unique_name("py5-simple")
    cluster.create_topic(topic)
    items = [{"body": f"simple-{i}", "tag": "TagS", "keys": [f"sk{i}"], "props": {"p": str(i)}} for i in range(3)]
    sent = {
        e["body"]: e for e in run_driver("send", proxy, {"topic": topic, "messages": items}) if e["event"] == "sent"
    }
    spec = {"topic": topic, "group": unique_name("g-simple"), "expect": 3, "timeout": 60, "tag": "TagS"}
    events = run_driver("simple", proxy, spec, timeout=120)
    got = {e["body"]: e for e in events if e["event"] == "received"}
    assert {e["body"] for e in events if e["event"] == "acked"} == set(sent)
    for item in items:
        g = got[item["body"]]
        assert g["message_id"] == sent[item["body"]]["message_id"] and g["attempt"] == 1
        assert (g["tag"], g["keys"], g["props"]) == ("TagS", item["keys"], item["props"])


def _attempts_of_one_message(cluster: Cluster, proxy: str, what: str, **consumer: Any) -> list[int]:
    """Send one message to a new topic, run the SimpleConsumer driver with ``consumer`` options;
    the delivery attempts it saw."""
    topic = unique_name(f"py5-{what}")
    cluster.create_topic(topic)
    run_driver("send", proxy, {"topic": topic, "messages": [{"body": what}]})
    spec = {"topic": topic, "group": unique_name(f"g-{what}"), "expect": 1, "timeout": 90, **consumer}
    events = run_driver("simple", proxy, spec, timeout=150)
    return [e["attempt"] for e in events if e["event"] == "received"]


def test_unacked_message_is_redelivered_after_the_invisible_time(cluster: Cluster, proxy: str) -> None:
    assert _attempts_of_one_message(cluster, proxy, "again", invisible_s=10, skip_ack_first=True)[:2] == [1, 2]


def test_change_invisible_duration_brings_a_message_back_early(cluster: Cluster, proxy: str) -> None:
    t0 = time.time()
    attempts = _attempts_of_one_message(cluster, proxy, "soon", invisible_s=300, change_first_s=1)
    assert attempts[:2] == [1, 2] and time.time() - t0 < 60  # not the 300 s first asked


def test_push_consumer_consumes_and_retries_a_failure(cluster: Cluster, proxy: str) -> None:
    topic = unique_name("py5-push")
    cluster.create_topic(topic)
    bodies = [f"push-{i}" for i in range(4)]
    run_driver("send", proxy, {"topic": topic, "messages": [{"body": b} for b in bodies]})
    spec = {"topic": topic, "group": unique_name("g-push"), "expect": 4, "timeout": 90, "fail_first": True}
    events = run_driver("push", proxy, spec, timeout=150)
    assert events[-1]["consumed"] == 4, events
    attempts: dict[str, list[int]] = {}
    for e in events:
        if e["event"] == "received":
            attempts.setdefault(e["body"], []).append(e["attempt"])
    assert all(a[:2] == [1, 2] for a in attempts.values()), attempts


def test_dead_letter_queue_after_max_attempts(cluster: Cluster, proxy: str) -> None:
    topic, group = unique_name("py5-dlq"), unique_name("g-dlq")
    cluster.create_topic(topic)
    body = json.dumps({"groupName": group, "retryMaxTimes": 1}).encode()
    resp = cluster.invoke(cluster.broker_addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, body)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    run_driver("send", proxy, {"topic": topic, "messages": [{"body": "poison"}]})
    spec = {"topic": topic, "group": group, "expect": 1, "timeout": 45, "invisible_s": 10, "never_ack": True}
    events = run_driver("simple", proxy, spec, timeout=90)
    assert [e["attempt"] for e in events if e["event"] == "received"] == [1, 2], events  # retryMaxTimes + 1
    dlq = cluster.wait_truth(f"%DLQ%{group}", 1, queues=1, timeout=30)
    assert set(dlq) == {"poison"}


def test_fifo_group_receives_a_message_group_in_order(cluster: Cluster, proxy: str) -> None:
    """A group marked orderly (consumeMessageOrderly, reported to the SDK as subscription.fifo)."""
    topic, group = unique_name("py5-fifo-c"), unique_name("g-fifo")
    cluster.create_topic(topic)
    body = json.dumps({"groupName": group, "consumeMessageOrderly": True}).encode()
    resp = cluster.invoke(cluster.broker_addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, body)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    items = [{"body": f"step-{i}", "group": "order-1"} for i in range(5)]
    run_driver("send", proxy, {"topic": topic, "messages": items})
    spec = {"topic": topic, "group": group, "expect": 5, "timeout": 60}
    events = run_driver("simple", proxy, spec, timeout=120)
    assert [e["body"] for e in events if e["event"] == "acked"] == [i["body"] for i in items]
