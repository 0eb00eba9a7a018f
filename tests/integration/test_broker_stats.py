"""VIEW_BROKER_STATS_DATA (315) against a real broker process: the stats items statsAll,
the dashboard and the exporter read, filled by sends and pulls and sampled by the broker's
own 10 s loop (as 4.9.8's StatsItemSet); an unknown item answered as 4.9.8 answers it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq.protocol.bodies import BrokerStatsData, ConsumeStats
from rmq.protocol.codes import RequestCode, ResponseCode
from tests.harness import BrokerProcess, start_broker
from tests.integration.broker_util import BrokerApi

pytestmark = pytest.mark.timeout(120)

TOPIC, GROUP, CLUSTER = "StatsTopic", "StatsGroup", "TestCluster"
SENT = 6


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    d: Path = tmp_path_factory.mktemp("broker-stats")
    with start_broker(d, None) as b:
        yield b


async def _view(api: BrokerApi, name: str, key: str) -> tuple[int, str | None, BrokerStatsData | None]:
    r = await api.call(RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": name, "statsKey": key})
    return r.code, r.remark, BrokerStatsData.from_json(r.body) if r.code == ResponseCode.SUCCESS else None


def test_sends_and_pulls_show_in_the_minute_window(broker):
    async def run() -> dict[str, BrokerStatsData]:
        async with BrokerApi(broker.addr) as api:
            assert (await api.create_topic(TOPIC, queues=2)).code == ResponseCode.SUCCESS
            for i in range(SENT):
                await api.send_ok(TOPIC, b"m-%d" % i, queue_id=0)
            await api.wait_max_offset(TOPIC, 0, SENT)
            r = await api.pull(TOPIC, 0, 0, group=GROUP)
            assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
            assert (await api.update_offset(GROUP, TOPIC, 0, SENT)).code == ResponseCode.SUCCESS
            items = {
                "put": ("TOPIC_PUT_NUMS", TOPIC),
                "put_size": ("TOPIC_PUT_SIZE", TOPIC),
                "get": ("GROUP_GET_NUMS", f"{TOPIC}@{GROUP}"),
                "get_size": ("GROUP_GET_SIZE", f"{TOPIC}@{GROUP}"),
                "latency": ("GROUP_GET_LATENCY", f"0@{TOPIC}@{GROUP}"),
                "broker_put": ("BROKER_PUT_NUMS", CLUSTER),
                "broker_get": ("BROKER_GET_NUMS", CLUSTER),
            }
            # the broker samples every 10 s: wait for the first sample after the traffic
            deadline = time.monotonic() + 60
            while True:
                out = {}
                for what, (name, key) in items.items():
                    code, remark, data = await _view(api, name, key)
                    assert code == ResponseCode.SUCCESS, (name, key, remark)
                    assert data is not None
                    out[what] = data
                if out["put"].stats_minute.sum >= SENT and out["get"].stats_minute.sum >= SENT:
                    break
                assert time.monotonic() < deadline, out
                await asyncio.sleep(0.5)
            # GET_CONSUME_STATS' consumeTps is GROUP_GET_NUMS' minute TPS (tpsGroupGetNums)
            r = await api.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": GROUP, "topic": TOPIC})
            assert r.code == ResponseCode.SUCCESS and ConsumeStats.from_json(r.body).consume_tps > 0
            return out

    out = asyncio.run(run())
    put, get = out["put"].stats_minute, out["get"].stats_minute
    assert (put.sum, put.avgpt) == (SENT, 1.0) and put.tps > 0  # one message per send
    assert (get.sum, get.avgpt) == (SENT, SENT) and get.tps > 0  # one pull got them all
    assert out["put_size"].stats_minute.sum > 0 and out["get_size"].stats_minute.sum > 0
    assert out["broker_put"].stats_minute.sum >= SENT and out["broker_put"].stats_minute.avgpt == 0
    assert out["broker_get"].stats_minute.sum >= SENT
    assert out["latency"].stats_minute.sum >= 0  # the item exists once a pull found messages


def test_unknown_stats_item_is_a_system_error_naming_it(broker):
    async def run() -> list[tuple[int, str | None]]:
        async with BrokerApi(broker.addr) as api:
            return [
                (await _view(api, "GROUP_GET_NUMS", "NoTopic@NoGroup"))[:2],
                (await _view(api, "NO_SUCH_STATS", TOPIC))[:2],
            ]

    assert asyncio.run(run()) == [
        (ResponseCode.SYSTEM_ERROR, "The stats <GROUP_GET_NUMS> <NoTopic@NoGroup> not exist"),
        (ResponseCode.SYSTEM_ERROR, f"The stats <NO_SUCH_STATS> <{TOPIC}> not exist"),
    ]
