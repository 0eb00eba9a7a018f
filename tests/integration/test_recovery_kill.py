"""Recovery after a real SIGKILL of a real `rmq broker` (issue 15 item 4).

A broker takes concurrent sends (every message with a KEYS token and a UNIQ_KEY),
checkpoints its index as it goes (indexMsgTimestamp in the checkpoint file becomes
non-zero while it runs), and is SIGKILLed with sends in flight. Restarted on the same
store, it recovers the way a kill allows (the page cache outlived the process: only
what dispatch had not reached is re-dispatched), and then:

* every message answered SEND_OK is in its queue, once, with its body;
* every one is found by its key (QUERY_MESSAGE) and by its id (VIEW_MESSAGE_BY_ID);
* nothing is indexed twice, and the broker takes new messages after the old ones.

No timing is asserted: the recovery's own log line is checked for what it did.
"""

from __future__ import annotations

import asyncio
import re
import signal
import struct

import pytest

from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.headers import QueryMessageRequestHeader, ViewMessageRequestHeader
from rmq.protocol.message import decode_message_id, decode_record, decode_records
from tests.harness import broker_process
from tests.integration.broker_util import BrokerApi, props, restart_broker, uniq_key, wait_until

TOPIC = "KillRecovery"
QUEUES = 4
SENDERS = 16

CONF: dict[str, object] = {
    "flushDiskType": "ASYNC_FLUSH",
    # thorough CQ flush rounds (they sync the index and write the checkpoint) often
    "flushConsumeQueueThoroughInterval": 200,
    "flushIntervalConsumeQueue": 100,
}


def _index_msg_timestamp(store_dir) -> int:
    data = (store_dir / "checkpoint").read_bytes()
    return struct.unpack_from(">q", data, 16)[0]


async def _sender(api: BrokerApi, n: int, acked: list[tuple[str, str, str, int, int]], stop: asyncio.Event) -> None:
    while not stop.is_set():
        i = n
        n += SENDERS
        key = f"kr{i}"
        uk = uniq_key()
        body = b"kill-%d" % i
        try:
            r = await api.send(TOPIC, body, queue_id=i % QUEUES, properties=props(keys=key, uniq=uk, wait="true"))
        except Exception:
            return  # the broker is gone
        if r.code == ResponseCode.SUCCESS:
            acked.append((key, uk, r.ext_fields["msgId"], i % QUEUES, int(r.ext_fields["queueOffset"])))


@pytest.mark.slow
async def test_sigkill_restart_serves_every_acked_message_by_queue_key_and_id(tmp_path):
    br = broker_process(tmp_path, None, conf=CONF).start()
    acked: list[tuple[str, str, str, int, int]] = []
    try:
        async with BrokerApi(br.addr) as api:
            await api.create_topic(TOPIC, queues=QUEUES)
            stop = asyncio.Event()
            tasks = [asyncio.create_task(_sender(api, k, acked, stop)) for k in range(SENDERS)]
            await wait_until(lambda: len(acked) >= 2000, 60.0, "2000 sends never answered")
            # the index is checkpointed while the broker runs, not only at shutdown
            await wait_until(
                lambda: _index_msg_timestamp(br.store_dir) > 0, 30.0, "indexMsgTimestamp stayed 0 in the checkpoint"
            )
            n_before = len(acked)
            await wait_until(lambda: len(acked) >= n_before + 500, 60.0, "sends stopped")
            br.signal(signal.SIGKILL)  # sends in flight
            await asyncio.gather(*tasks)
    finally:
        br.kill()
    assert br.proc.returncode == -signal.SIGKILL
    assert (br.store_dir / "abort").exists()
    assert _index_msg_timestamp(br.store_dir) > 0

    br2 = restart_broker(tmp_path, None, br, CONF)
    try:
        log_text = br2.log_text()
        assert "page cache outlived the broker" in log_text
        m = re.search(r"store recovered \(abnormal\) .*\((\d+) records checked, (\d+) re-dispatched\)", log_text)
        assert m is not None, log_text[-3000:]
        assert int(m.group(2)) < len(acked), "recovery re-dispatched more than the broker ever wrote"
        assert "abnormal exit: deleting index file" not in log_text
        assert "rebuilding the index" not in log_text
        async with BrokerApi(br2.addr) as api:
            # by queue: every acked message, once, at its queue offset
            found: dict[tuple[int, int], bytes] = {}
            for q in range(QUEUES):
                body, _ = await api.pull_all(TOPIC, q)
                for msg in decode_records(body):
                    assert (q, msg.queue_offset) not in found
                    found[(q, msg.queue_offset)] = msg.body
            for key, _uk, _id, q, qo in acked:
                assert found.get((q, qo)) == b"kill-%s" % key[2:].encode(), (key, q, qo)
            # by key and by id: all of the last ones (re-dispatched), a sample of the rest
            check = acked[-300:] + acked[: -300 : max(len(acked) // 100, 1)]
            for key, uk, msg_id, _q, _qo in check:
                ext = QueryMessageRequestHeader(TOPIC, key, 32, 0, 2**62).to_ext_fields()
                ext["_UNIQUE_KEY_QUERY"] = "false"
                r = await api.call(RequestCode.QUERY_MESSAGE, ext)
                assert r.code == ResponseCode.SUCCESS, (key, r.code, r.remark)
                bodies = [x.body for x in decode_records(r.body)]
                assert bodies == [b"kill-%s" % key[2:].encode()], (key, bodies)  # found once
                ext = QueryMessageRequestHeader(TOPIC, uk, 32, 0, 2**62).to_ext_fields()
                ext["_UNIQUE_KEY_QUERY"] = "true"
                r = await api.call(RequestCode.QUERY_MESSAGE, ext)
                assert r.code == ResponseCode.SUCCESS, (uk, r.code, r.remark)
                _, _, phy = decode_message_id(msg_id)
                v = await api.call(RequestCode.VIEW_MESSAGE_BY_ID, ViewMessageRequestHeader(phy).to_ext_fields())
                assert v.code == ResponseCode.SUCCESS
                assert decode_record(v.body).body == b"kill-%s" % key[2:].encode()
            # and it takes new messages after the old ones
            last = max(qo for _k, _u, _i, q, qo in acked if q == 0)
            r = await api.send_ok(TOPIC, b"after", queue_id=0)
            assert int(r.ext_fields["queueOffset"]) > last
    finally:
        br2.stop()
    assert not (br2.store_dir / "abort").exists()
