"""A slave's duties: it refuses writes, serves pulls when its master suggests it, and has
its master's metadata (topics, consumer offsets, delay offsets, subscription groups)
within slaveSyncInterval."""

from __future__ import annotations

import pytest

from rmq.protocol.bodies import loads_fastjson
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.message import decode_records
from tests.cluster.ha_util import ha_group, master_conf, slave_conf, wait_in_sync, wait_topic_on
from tests.integration.broker_util import BrokerApi, props, uniq_key, wait_until
from tests.integration.test_client import start_push_from_first

pytestmark = pytest.mark.timeout(120)

SYNC_MS = 500


async def _body(api: BrokerApi, code: int) -> dict:
    r = await api.call(code)
    assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
    return loads_fastjson(r.body)


async def test_slave_refuses_writes_and_copies_metadata():
    topic, group = "HASlaveMeta", "CG_HA_META"
    with ha_group(master_conf(), slave_conf(slaveSyncInterval=SYNC_MS)) as g:
        async with BrokerApi(g.master.addr) as m, BrokerApi(g.slave.addr) as s:
            # writes: SERVICE_NOT_AVAILABLE, single and batch, nothing stored
            r = await s.send("AnyTopic", b"x")
            assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE == 14
            assert "slave" in r.remark
            r = await s.send_batch("AnyTopic", [(b"a", props(uniq=uniq_key()))])
            assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE

            # metadata changes on the master ...
            assert (await m.create_topic(topic, 2)).code == ResponseCode.SUCCESS
            for i in range(5):
                await m.send_ok(topic, b"m%d" % i, queue_id=0)
            await m.wait_max_offset(topic, 0, 5)
            r = await m.pull(topic, 0, 0, group=group)  # creates the group
            assert r.code == ResponseCode.SUCCESS
            assert (await m.update_offset(group, topic, 0, 3)).code == ResponseCode.SUCCESS
            await m.send_ok(topic, b"later", queue_id=1, properties=props(uniq=uniq_key(), wait="true", DELAY="1"))

            async def delay_delivered() -> bool:
                return (await _body(m, RequestCode.GET_ALL_DELAY_OFFSET)).get("offsetTable", {}).get("1") == 1

            await wait_until(delay_delivered, 10, "the delayed message was never delivered")

            # ... are on the slave within a few sync intervals
            await wait_topic_on(g.slave.addr, topic, timeout=SYNC_MS / 1000 * 4)

            async def copied() -> bool:
                off = await s.query_offset(group, topic, 0)
                groups = (await _body(s, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)).get(
                    "subscriptionGroupTable", {}
                )
                delay = (await _body(s, RequestCode.GET_ALL_DELAY_OFFSET)).get("offsetTable", {})
                return (
                    off.code == ResponseCode.SUCCESS
                    and off.ext_fields["offset"] == "3"
                    and group in groups
                    and delay.get("1") == 1
                )

            await wait_until(copied, SYNC_MS / 1000 * 6, "the slave did not copy the metadata")
            mt, st = await m.topics(), await s.topics()
            assert st[topic] == mt[topic]
        # the copies are written down: a restarted slave has them before its first sync
        g.slave.stop()
        cfg = g.slave.store_dir / "config"
        assert {"topics.msgpack", "consumerOffset.msgpack", "subscriptionGroup.msgpack", "delayOffset.msgpack"} <= {
            p.name for p in cfg.iterdir()
        }


async def test_slave_serves_pulls_when_the_master_suggests_it():
    """accessMessageInMemoryMaxRatio=0 makes every consumer 'far behind' (spec 2.5), so a
    master with slaveReadEnable suggests the group's whichBrokerWhenConsumeSlowly (1)."""
    topic, group = "HASlaveRead", "CG_HA_READ"
    with ha_group(
        master_conf(slaveReadEnable="true", accessMessageInMemoryMaxRatio=0),
        slave_conf(slaveReadEnable="true", slaveSyncInterval=SYNC_MS),
    ) as g:
        async with BrokerApi(g.master.addr) as m, BrokerApi(g.slave.addr) as s:
            assert (await m.create_topic(topic, 2)).code == ResponseCode.SUCCESS
            for i in range(40):
                await m.send_ok(topic, b"r%d" % i, queue_id=i % 2)
            await wait_in_sync(g)
            await wait_topic_on(g.slave.addr, topic)
            r = await m.pull(topic, 0, 0, group=group, max_nums=4)
            assert r.code == ResponseCode.SUCCESS
            assert r.ext_fields["suggestWhichBrokerId"] == "1"
            rs = await s.pull(topic, 0, 0, group=group, max_nums=4)
            assert rs.code == ResponseCode.SUCCESS and rs.body == r.body
            assert [x.body for x in decode_records(rs.body)] == [b"r0", b"r2", b"r4", b"r6"]
            # the slave answers its own pulls with the group's brokerId (0: the master)
            assert rs.ext_fields["suggestWhichBrokerId"] == "0"
            before = int((await s.runtime_info())["msgGetTotalTodayNow"])

        # a real consumer follows the suggestion: part of its pulls go to the slave
        c, got = await start_push_from_first(group, g.ns.addr, topic, pull_batch_size=4)
        try:
            await wait_until(lambda: len(got.msgs) >= 40, 30, "the consumer did not get all")
        finally:
            await c.shutdown()
        assert sorted(got.bodies()) == sorted(b"r%d" % i for i in range(40))
        async with BrokerApi(g.slave.addr) as s:
            assert int((await s.runtime_info())["msgGetTotalTodayNow"]) > before
