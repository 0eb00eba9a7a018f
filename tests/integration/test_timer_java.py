"""Timer messages from the official RocketMQ 4.9.8 Java client: 4.9.8 knows no TIMER_* keys
(they became system properties in 5.x), so ``Message.putUserProperty("TIMER_DELIVER_MS",
...)`` is accepted there and is what such a producer sends. The broker holds the message
until its time, and refuses one beyond timerMaxDelaySec with an error the client reports."""

from __future__ import annotations

import json
import time

import pytest

from rmq.protocol.codes import ResponseCode
from rmq.protocol.message import decode_records
from tests.harness import start_broker, start_namesrv
from tests.integration.broker_util import BrokerApi, unique, wait_until
from tests.interop.java_build import compile_java, run_java

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SOURCE = r"""
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;

/** TimerProducer NS TOPIC DELIVER_MS TOO_FAR_SEC: one message with TIMER_DELIVER_MS, one
 *  with TIMER_DELAY_SEC beyond the broker's maximum; one JSON line each. */
public class TimerProducer {
    public static void main(String[] a) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("PG_TIMER_JAVA");
        p.setNamesrvAddr(a[0]);
        p.setRetryTimesWhenSendFailed(0);
        p.start();
        Message m = new Message(a[1], "TagJ", "kj", "java-timer".getBytes("UTF-8"));
        m.putUserProperty("TIMER_DELIVER_MS", a[2]);
        m.putUserProperty("javaProp", "jv");
        SendResult r = p.send(m);
        System.out.println("{\"status\":\"" + r.getSendStatus() + "\",\"msgId\":\"" + r.getMsgId() + "\"}");
        Message far = new Message(a[1], "TagJ", "far".getBytes("UTF-8"));
        far.putUserProperty("TIMER_DELAY_SEC", a[3]);
        try {
            p.send(far);
            System.out.println("{\"refused\":false}");
        } catch (MQBrokerException e) {
            System.out.println("{\"refused\":true,\"code\":" + e.getResponseCode() + "}");
            System.err.println(e.getErrorMessage());
        }
        p.shutdown();
        System.exit(0);
    }
}
"""


async def test_java_498_producer_timer_message(tmp_path):
    src = tmp_path / "src" / "TimerProducer.java"
    src.parent.mkdir()
    src.write_text(SOURCE)
    classes = compile_java([src], tmp_path / "classes")
    topic = unique("TimerJava")
    with start_namesrv(tmp_path) as ns, start_broker(tmp_path, ns.addr) as br:
        async with BrokerApi(br.addr) as api:
            await api.create_topic(topic, queues=1)
            deliver_at = int(time.time() * 1000) + 8000  # the JVM start takes a few seconds
            too_far = str(3 * 24 * 3600 + 60)
            r = run_java(
                "TimerProducer", [ns.addr, topic, str(deliver_at), too_far], classes=classes, user_home=tmp_path / "j"
            )
            assert r.returncode == 0, r.stdout + r.stderr
            sent, far = (json.loads(line) for line in r.stdout.splitlines() if line.startswith("{"))
            assert sent["status"] == "SEND_OK", r.stdout
            assert far == {"refused": True, "code": ResponseCode.MESSAGE_ILLEGAL}, r.stdout + r.stderr
            assert "TIMER_DELAY_SEC" in r.stderr, r.stderr

            async def visible() -> list:
                got = await api.pull(topic, 0, 0)
                return decode_records(got.body) if got.code == ResponseCode.SUCCESS else []

            if time.time() * 1000 < deliver_at - 500:
                assert await visible() == []
            await wait_until(visible, max(0.0, deliver_at / 1000 - time.time()) + 5, "the Java timer message")
            assert time.time() * 1000 >= deliver_at - 50
            (m,) = await visible()
            assert m.body == b"java-timer" and m.properties["UNIQ_KEY"] == sent["msgId"]
            assert m.properties["TAGS"] == "TagJ" and m.properties["KEYS"] == "kj"
            assert m.properties["javaProp"] == "jv" and m.properties["TIMER_DELIVER_MS"] == str(deliver_at)
