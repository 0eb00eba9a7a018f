"""Delay levels (spec 7.1): SCHEDULE_TOPIC_XXXX, delivery at store time + level delay."""

from __future__ import annotations

import asyncio
import time

import pytest

from rmq.protocol.codes import ResponseCode
from rmq.protocol.message import decode_records
from tests.harness import start_broker, start_namesrv
from tests.integration.broker_util import BrokerApi, props, uniq_key, unique, wait_until

LEVELS = "1s 2s 3s 5s"
LEVEL_MS = [1000, 2000, 3000, 5000]


async def _drain(api: BrokerApi, topic: str, queue_id: int, offset: int) -> tuple[list, int]:
    r = await api.pull(topic, queue_id, offset)
    if r.code != ResponseCode.SUCCESS:
        return [], offset
    return decode_records(r.body), int(r.ext_fields["nextBeginOffset"])


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_delay_levels_deliver_on_time_and_survive_restart(tmp_path, capsys):
    topic = unique("Delay")
    with start_namesrv(tmp_path) as ns:
        with start_broker(tmp_path, ns.addr, conf={"messageDelayLevel": LEVELS, "flushDelayOffsetInterval": 500}) as br:
            async with BrokerApi(br.addr) as api:
                await api.create_topic(topic, queues=1)
                sent = {}
                for level in (1, 2, 3, 4, 4):
                    uk = uniq_key()
                    r = await api.send(
                        topic,
                        f"level-{level}".encode(),
                        queue_id=0,
                        properties=props(uniq=uk, tags="T", DELAY=str(level)),
                    )
                    assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
                    sent[uk] = (level, time.time())
                # a delayed message is not visible on its topic before its time
                msgs, _ = await _drain(api, topic, 0, 0)
                assert msgs == []
                got: dict[str, float] = {}
                offset = 0
                deadline = time.monotonic() + 15
                while len(got) < len(sent) and time.monotonic() < deadline:
                    msgs, offset = await _drain(api, topic, 0, offset)
                    now = time.time()
                    for m in msgs:
                        got.setdefault(m.properties["UNIQ_KEY"], now)
                        assert "DELAY" not in m.properties
                        assert m.properties["REAL_TOPIC"] == topic
                        assert m.body.startswith(b"level-")
                    await asyncio.sleep(0.02)
                assert set(got) == set(sent)
                latencies = []
                for uk, (level, t0) in sent.items():
                    late = got[uk] - t0 - LEVEL_MS[level - 1] / 1000
                    latencies.append((level, round(late * 1000)))
                    assert late >= -0.05, (level, late)  # never early (50 ms clock slack)
                    assert late <= 5.0, (level, late)  # within 5 s after its delay
                with capsys.disabled():
                    print(f"\ndelay delivery lateness (level, ms after its delay): {sorted(latencies)}")
                # a message still waiting when the broker stops is delivered after restart
                uk = uniq_key()
                await api.send(topic, b"after-restart", queue_id=0, properties=props(uniq=uk, DELAY="4"))
        with start_broker(tmp_path, ns.addr, conf={"messageDelayLevel": LEVELS}) as br2:
            async with BrokerApi(br2.addr) as api:

                async def arrived() -> bool:
                    msgs, _ = await _drain(api, topic, 0, offset)
                    return any(m.properties.get("UNIQ_KEY") == uk for m in msgs)

                await wait_until(arrived, 15, "the delayed message sent before the restart")
            assert (br2.store_dir / "config" / "delayOffset.msgpack").exists()


async def test_batch_with_delay_is_illegal(tmp_path):
    with start_namesrv(tmp_path) as ns, start_broker(tmp_path, ns.addr) as br:
        async with BrokerApi(br.addr) as api:
            topic = unique("DelayBatch")
            await api.create_topic(topic, queues=1)
            h = api.send_header(topic, properties=props(DELAY="2", wait="true"), batch=True)
            from rmq.protocol.codes import RequestCode
            from rmq.protocol.message import BatchItem, encode_batch

            r = await api.call(
                RequestCode.SEND_BATCH_MESSAGE, h.to_v2_ext_fields(), encode_batch([BatchItem(0, b"x", "")])
            )
            assert r.code == ResponseCode.MESSAGE_ILLEGAL, (r.code, r.remark)
