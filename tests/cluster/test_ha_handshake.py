"""The HA port takes offsets only from a slave of this group (RocketMQ #1155/#3015).

A connection that reports offsets without our handshake, with garbage, or as a broker
of another cluster / group / with brokerId 0, is closed; it changes nothing: the
master's ack table stays as it was and a SYNC_MASTER put that waits for the real
(stopped) slave is not released by it. A handshaken slave that reports more than the
master has is closed too.
"""

from __future__ import annotations

import asyncio
import signal
import struct
import time

import pytest

from ha.protocol import MasterReject, SlaveHello, SlaveStreamReader, encode_hello, encode_offset_report
from rmq.protocol.codes import ResponseCode
from tests.cluster.ha_util import CLUSTER, GROUP, acks, ha_group, ha_status, master_conf, slave_conf, wait_in_sync
from tests.integration.broker_util import BrokerApi, RawConn

pytestmark = pytest.mark.timeout(120)

SLAVE_TIMEOUT_MS = 2000
FILE_SIZE = 4 * 1024 * 1024  # tests/harness.py's mappedFileSizeCommitLog


def hello(**kw) -> bytes:
    base = dict(cluster=CLUSTER, broker_name=GROUP, broker_id=2, commitlog_file_size=FILE_SIZE)
    base.update(kw)
    return encode_hello(SlaveHello(**base))


async def answer_then_closed(conn: RawConn) -> MasterReject | None:
    """Read what the master sends until it closes: its REJECT, if any."""
    data = b""
    try:
        while True:
            chunk = await asyncio.wait_for(conn.reader.read(65536), 5)
            if not chunk:
                break
            data += chunk
    except ConnectionResetError:
        pass
    if not data:
        return None
    rd = SlaveStreamReader(capacity=1 << 20)
    rd.feed(data)
    ev = rd.events()
    assert len(ev) == 1 and isinstance(ev[0], MasterReject), ev
    return ev[0]


async def test_bogus_clients_change_nothing():
    with ha_group(master_conf("SYNC_MASTER", slaveTimeout=SLAVE_TIMEOUT_MS), slave_conf()) as g:
        async with BrokerApi(g.master.addr) as api:
            assert (await api.create_topic("HAShake", 1)).code == ResponseCode.SUCCESS
            assert (await api.send("HAShake", b"one")).code == ResponseCode.SUCCESS
        top = await wait_in_sync(g)
        m = await ha_status(g.master.addr)
        ha_addr = m["haServerAddr"]
        table = acks(m)
        assert list(table.values()) == [top]

        # the real slave stops acking; a SYNC put now waits for it
        g.slave.proc.send_signal(signal.SIGSTOP)
        try:
            async with BrokerApi(g.master.addr) as api:
                t0 = time.monotonic()
                pending = asyncio.create_task(api.send("HAShake", b"two", timeout=10))
                await asyncio.sleep(0.2)
                end = (await ha_status(g.master.addr))["commitLogMaxOffset"]
                assert end > top and not pending.done()

                cases = {
                    "report without handshake": encode_offset_report(end),
                    "huge report without handshake": encode_offset_report(1 << 60),
                    "garbage": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                    "bad version": struct.pack(">ihhi", 0x524D5148, 9, 1, 0),
                }
                for what, data in cases.items():
                    c = await RawConn.open(ha_addr)
                    await c.write(data + encode_offset_report(end) * 4)
                    assert await answer_then_closed(c) is None, what
                    await c.close()

                rejected = {
                    "another cluster": hello(cluster="OtherCluster"),
                    "another group": hello(broker_name="broker-b"),
                    "brokerId 0": hello(broker_id=0),
                    "another file size": hello(commitlog_file_size=1 << 30),
                    "ahead of the master": hello(max_offset=end + 1),
                }
                for what, data in rejected.items():
                    c = await RawConn.open(ha_addr)
                    await c.write(data + encode_offset_report(end))
                    rej = await answer_then_closed(c)
                    assert rej is not None, what
                    assert rej.reason, what
                    await c.close()

                # a good handshake, then a report beyond what the master has: closed
                c = await RawConn.open(ha_addr)
                await c.write(hello())
                head = await asyncio.wait_for(c.reader.readexactly(12 + 16), 5)
                assert head[:4] == b"RMQH" and struct.unpack(">h", head[6:8])[0] == 2
                await c.write(encode_offset_report(end + 4096))
                assert await c.closed_by_peer(5)
                await c.close()

                info = await ha_status(g.master.addr)
                assert acks(info) == table  # nobody's ack moved
                r = await pending  # and the put was not released
                assert r.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, (r.code, r.remark)
                assert time.monotonic() - t0 >= SLAVE_TIMEOUT_MS / 1000 * 0.9
        finally:
            g.slave.proc.send_signal(signal.SIGCONT)
        assert await wait_in_sync(g) == end
        log = g.master.log_text()
        assert "rejected" in log and "beyond this master's max offset" in log
