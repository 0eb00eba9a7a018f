"""A request missing a required header field, or carrying a malformed value, against real
processes (issue 11 item 7): answered SYSTEM_ERROR (1) with RocketMQ's remark naming the
field, logged once per peer as a warning line, never as a traceback."""

from __future__ import annotations

import asyncio
import re

import pytest

from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.remoting import RemotingClient
from tests.harness import start_broker, start_namesrv
from tests.integration.broker_util import BrokerApi, unique, wait_until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    d = tmp_path_factory.mktemp("request-fields")
    with start_namesrv(d) as ns, start_broker(d, ns.addr) as br:
        yield ns, br


async def _settle_log(proc, pattern: str, n: int, timeout: float = 5.0) -> str:
    """The log once it holds n lines matching pattern (the child writes asynchronously)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        text = proc.log_text()
        if len(re.findall(pattern, text)) >= n or loop.time() > deadline:
            return text
        await asyncio.sleep(0.05)


async def _max_offset_is(api: BrokerApi, topic: str, want: int) -> bool:
    return await api.max_offset(topic, 0) == want


async def test_broker_get_max_offset_without_topic(cluster):
    _, br = cluster
    start = len(br.log_text())
    topic = unique("Fields")
    async with BrokerApi(br.addr) as api:
        for _ in range(3):
            r = await api.call(RequestCode.GET_MAX_OFFSET, {"queueId": "0"})
            assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "the custom field <topic> is null")
        r = await api.call(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": "abc"})
        assert (r.code, r.remark) == (1, "the custom field <queueId> is not a number: abc")
        # the connection stays usable
        await api.send_ok(topic, b"x", queue_id=0)
        # the ConsumeQueue is written by the reput dispatcher after PUT_OK, as in RocketMQ
        await wait_until(lambda: _max_offset_is(api, topic, 1), 5.0, "the sent message in the ConsumeQueue")
    async with BrokerApi(br.addr) as other:  # another peer: warned about once as well
        r = await other.call(RequestCode.GET_MAX_OFFSET, {})
        assert r.remark == "the custom field <topic> is null"
    pattern = r"WARNING .*bad request from 127\.0\.0\.1:\d+: GET_MAX_OFFSET \(code 30\), field topic"
    log = (await _settle_log(br, pattern, 2))[start:]
    assert len(re.findall(pattern, log)) == 2, log
    assert "field queueId" not in log  # second mistake of a warned peer: DEBUG only
    assert "Traceback" not in log, log


async def test_namesrv_get_kv_config_without_key(cluster):
    ns, _ = cluster
    start = len(ns.log_text())
    async with RemotingClient() as client:
        for _ in range(2):
            r = await client.invoke(
                ns.addr, RemotingCommand(RequestCode.GET_KV_CONFIG, ext_fields={"namespace": "NS"}), 5
            )
            assert (r.code, r.remark) == (1, "the custom field <key> is null")
        r = await client.invoke(
            ns.addr,
            RemotingCommand(
                RequestCode.QUERY_DATA_VERSION,
                ext_fields={"brokerAddr": "1.2.3.4:1", "brokerName": "b", "clusterName": "c", "brokerId": "x"},
            ),
            5,
        )
        assert (r.code, r.remark) == (1, "the custom field <brokerId> is not a number: x")
    pattern = r"WARNING .*bad request from 127\.0\.0\.1:\d+: GET_KV_CONFIG \(code 101\), field key"
    log = (await _settle_log(ns, pattern, 1))[start:]
    assert len(re.findall(pattern, log)) == 1, log
    assert "Traceback" not in log, log
