"""Driver for PyPI rocketmq-python-client 5.1.2 (the official 5.x Python SDK) against rmq proxy.

Run with .venv-interop-py5/bin/python (never imported by the test process: the SDK's generated
modules register apache.rocketmq.v2 in protobuf's default pool and import OpenTelemetry).

    py5_client.py send ENDPOINTS SPEC_JSON   SPEC = {"topic", "messages": [{body, tag?, keys?, props?,
                                             group?, delay_s?}], "ak"?, "sk"?, "tls"?}
                                             (tls: trusts $GRPC_DEFAULT_SSL_ROOTS_FILE_PATH)
    py5_client.py tx ENDPOINTS SPEC_JSON     SPEC = {"topic", "messages": [{body, end: commit|rollback|none}],
                                             "check": commit|rollback, "wait_checks": N, "timeout": s}

    py5_client.py simple ENDPOINTS SPEC_JSON SPEC = {"topic", "group", "expect": N, "timeout": s, "tag"?,
                                             "invisible_s": s, "skip_ack_first"?: bool, "change_first_s"?: s,
                                             "never_ack"?: bool}
                                             SimpleConsumer: receive (and ack) until N acked or timeout;
                                             skip_ack_first leaves the first delivery of each body unacked
                                             (redelivered after invisible_s); change_first_s makes the
                                             first delivery visible again after that many seconds

    py5_client.py push ENDPOINTS SPEC_JSON   SPEC = {"topic", "group", "expect": N, "timeout": s, "fail_first"?}
                                             PushConsumer until N distinct bodies consumed; fail_first: the
                                             first delivery of each body returns FAILURE (retried by backoff)

One JSON object per line on stdout: {"event": "sent"|"ended"|"checked"|"received"|"acked"|"error"|"done", ...}.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time


def out(**kw: object) -> None:
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()


def build_message(topic: str, item: dict):  # type: ignore[no-untyped-def]
    from rocketmq import Message

    m = Message()
    m.topic = topic
    m.body = item["body"].encode()
    if item.get("tag"):
        m.tag = item["tag"]
    if item.get("keys"):
        type(m).keys.fset(m, *item["keys"])  # the setter takes the keys as *args
    for k, v in (item.get("props") or {}).items():
        m.add_property(k, v)
    if item.get("group"):
        m.message_group = item["group"]
    if item.get("delay_s") is not None:
        m.delivery_timestamp = int(time.time()) + int(item["delay_s"])
    return m


def main() -> int:
    from rocketmq import ClientConfiguration, Credentials, Producer, TransactionChecker, TransactionResolution

    mode, endpoints, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    topic = spec["topic"]
    cfg = ClientConfiguration(endpoints, Credentials(spec.get("ak", ""), spec.get("sk", "")), request_timeout=5)
    if mode == "send":
        producer = Producer(cfg, (topic,), tls_enable=bool(spec.get("tls")))
        producer.startup()
        try:
            for item in spec["messages"]:
                try:
                    r = producer.send(build_message(topic, item))
                    out(event="sent", body=item["body"], message_id=r.message_id, offset=r.offset)
                except Exception as e:
                    out(event="error", body=item["body"], error=f"{type(e).__name__}: {e}")
        finally:
            producer.shutdown()
        out(event="done")
        return 0
    if mode == "tx":
        checked = threading.Event()
        count = [0]
        answer = TransactionResolution.COMMIT if spec.get("check") == "commit" else TransactionResolution.ROLLBACK

        class Checker(TransactionChecker):
            def check(self, message):  # type: ignore[no-untyped-def]
                count[0] += 1
                out(event="checked", body=message.body.decode(), message_id=message.message_id)
                if count[0] >= spec.get("wait_checks", 0):
                    checked.set()
                return answer

        producer = Producer(cfg, (topic,), Checker())
        producer.startup()
        try:
            for item in spec["messages"]:
                t = producer.begin_transaction()
                r = producer.send(build_message(topic, item), t)
                out(event="sent", body=item["body"], message_id=r.message_id, transaction_id=r.transaction_id)
                if item["end"] == "commit":
                    t.commit()
                elif item["end"] == "rollback":
                    t.rollback()
                out(event="ended", body=item["body"], end=item["end"])
            if spec.get("wait_checks"):
                ok = checked.wait(spec.get("timeout", 30))
                out(event="checks", ok=ok, count=count[0])
                time.sleep(1)  # let the EndTransaction of the last check go out
        finally:
            producer.shutdown()
        out(event="done")
        return 0
    if mode == "simple":
        from rocketmq import FilterExpression, SimpleConsumer

        consumer = SimpleConsumer(cfg, spec["group"], {topic: FilterExpression(spec.get("tag", "*"))}, await_duration=5)
        consumer.startup()
        acked: set[str] = set()
        seen: dict[str, int] = {}
        deadline = time.time() + spec.get("timeout", 60)
        try:
            while len(acked) < spec["expect"] and time.time() < deadline:
                try:
                    msgs = consumer.receive(16, spec.get("invisible_s", 15))
                except Exception as e:
                    out(event="error", error=f"{type(e).__name__}: {e}")
                    break
                for m in msgs:
                    body = m.body.decode()
                    seen[body] = seen.get(body, 0) + 1
                    out(event="received", body=body, message_id=m.message_id, attempt=m.delivery_attempt,
                        tag=m.tag, keys=sorted(m.keys), props=dict(m.properties))  # fmt: skip
                    if seen[body] == 1 and spec.get("change_first_s") is not None:
                        consumer.change_invisible_duration(m, spec["change_first_s"])
                        continue
                    if spec.get("never_ack") or (seen[body] == 1 and spec.get("skip_ack_first")):
                        continue
                    consumer.ack(m)
                    acked.add(body)
                    out(event="acked", body=body)
        finally:
            consumer.shutdown()
        out(event="done", acked=len(acked))
        return 0
    if mode == "push":
        from rocketmq import ConsumeResult, FilterExpression, MessageListener, PushConsumer

        done = threading.Event()
        lock = threading.Lock()
        seen: dict[str, int] = {}
        ok: set[str] = set()

        class Listener(MessageListener):
            def consume(self, message):  # type: ignore[no-untyped-def]
                body = message.body.decode()
                with lock:
                    seen[body] = seen.get(body, 0) + 1
                    first = seen[body] == 1
                out(event="received", body=body, message_id=message.message_id, attempt=message.delivery_attempt)
                if first and spec.get("fail_first"):
                    return ConsumeResult.FAILURE
                with lock:
                    ok.add(body)
                    if len(ok) >= spec["expect"]:
                        done.set()
                return ConsumeResult.SUCCESS

        consumer = PushConsumer(cfg, spec["group"], Listener(), {topic: FilterExpression("*")})
        consumer.startup()
        try:
            done.wait(spec.get("timeout", 60))
            time.sleep(1)  # the acks of the last messages
        finally:
            consumer.shutdown()
        out(event="done", consumed=len(ok))
        return 0
    out(event="error", error=f"unknown mode {mode}")
    return 2


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # the SDK's threads and channels do not all end by themselves
