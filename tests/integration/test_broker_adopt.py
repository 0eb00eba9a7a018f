"""Our broker on a store written by the real Apache RocketMQ 4.9.8 broker.

The fixture store (tests/conftest.py `rocketmq_store`: commitlog of 1 MiB files,
consumequeue, index, checkpoint; 2000 messages in topic InteropCpp14789, 4 queues) gets
RocketMQ-style `config/topics.json`, `consumerOffset.json` and `subscriptionGroup.json`
written the way 4.9.8 writes them (fastjson pretty format, bare integer map keys). Our
broker must: recover the store as is; adopt topics, offsets and groups once, writing
them as msgpack; answer QUERY_CONSUMER_OFFSET with the adopted offsets; serve RocketMQ's
records byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import msgpack
import pytest

from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.headers import QueryMessageRequestHeader
from rmq.protocol.message import decode_records
from tests.harness import broker_process, start_namesrv
from tests.integration.broker_util import BrokerApi, broker_in_route, commitlog_slice, restart_broker

pytestmark = pytest.mark.timeout(120)

TOPIC = "InteropCpp14789"
FILE_SIZE = 1048576
OFFSETS = {0: 10, 1: 20, 2: 30, 3: 40}


def _fastjson_pretty(obj: object, depth: int = 0) -> str:
    """JSON as RocketMQ 4.9.8 writes its config files (fastjson PrettyFormat: tabs, no spaces)."""
    if not isinstance(obj, dict):
        return json.dumps(obj)
    inner = "\t" * (depth + 1)
    items = ",\n".join(f'{inner}"{k}":{_fastjson_pretty(v, depth + 1)}' for k, v in obj.items())
    return "{\n" + items + "\n" + "\t" * depth + "}"


def _topic_config(name: str, queues: int) -> dict[str, object]:
    return {
        "order": False,
        "perm": 6,
        "readQueueNums": queues,
        "topicFilterType": "SINGLE_TAG",
        "topicName": name,
        "topicSysFlag": 0,
        "writeQueueNums": queues,
    }


def _group_config(name: str, consume_enable: bool, retry_max_times: int) -> dict[str, object]:
    return {
        "brokerId": 0,
        "consumeBroadcastEnable": True,
        "consumeEnable": consume_enable,
        "consumeFromMinEnable": True,
        "groupName": name,
        "notifyConsumerIdsChangedEnable": True,
        "retryMaxTimes": retry_max_times,
        "retryQueueNums": 1,
        "whichBrokerWhenConsumeSlowly": 1,
    }


TOPICS_JSON = _fastjson_pretty(
    {
        "dataVersion": {"counter": 7, "timestamp": 1763778789483},
        "topicConfigTable": {
            name: _topic_config(name, queues)
            for name, queues in (("SCHEDULE_TOPIC_XXXX", 18), (TOPIC, 4), ("OnlyInJson", 2))
        },
    }
)

# fastjson writes Map<Integer, Long> keys bare: {0:10,1:20}
OFFSETS_JSON = f"""{{
\t"offsetTable":{{
\t\t"{TOPIC}@G1":{{0:10,1:20,2:30,3:40
\t\t}},
\t\t"%RETRY%G1@G1":{{0:0
\t\t}}
\t}}
}}"""

GROUPS_JSON = _fastjson_pretty(
    {
        "dataVersion": {"counter": 3, "timestamp": 1763778789000},
        "subscriptionGroupTable": {"G1": _group_config("G1", True, 5), "GOff": _group_config("GOff", False, 16)},
    }
)


def _digest(paths: list[Path]) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def _cq_units(store: Path, qid: int) -> list[tuple[int, int, int]]:
    data = (store / "consumequeue" / TOPIC / str(qid) / "00000000000000000000").read_bytes()
    units = []
    for pos in range(0, len(data), 20):
        phy, size, tag = struct.unpack_from(">qiq", data, pos)
        if size <= 0:
            break
        units.append((phy, size, tag))
    return units


@pytest.mark.slow
async def test_adopt_a_rocketmq_store_with_json_metadata(tmp_path, rocketmq_store):
    store = rocketmq_store
    cfg = store / "config"
    cfg.mkdir()
    (cfg / "topics.json").write_text(TOPICS_JSON)
    (cfg / "consumerOffset.json").write_text(OFFSETS_JSON)
    (cfg / "subscriptionGroup.json").write_text(GROUPS_JSON)
    json_before = _digest(sorted(cfg.iterdir()))
    commitlogs = sorted((store / "commitlog").iterdir())
    cqs = sorted((store / "consumequeue" / TOPIC).glob("*/*"))
    data_before = _digest(commitlogs)
    cq_before = {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in cqs}
    units = {q: _cq_units(store, q) for q in range(4)}
    assert sum(len(u) for u in units.values()) == 2000
    end_of_data = max(phy + size for u in units.values() for phy, size, _ in u)
    assert not (store / "abort").exists()

    conf = {
        "storePathRootDir": str(store),
        "mappedFileSizeCommitLog": FILE_SIZE,
        "autoCreateTopicEnable": "false",
        "autoCreateSubscriptionGroup": "false",
        # RocketMQ's default index file geometry (the harness uses a small one)
        "maxHashSlotNum": 5000000,
        "maxIndexNum": 20000000,
    }
    with start_namesrv(tmp_path) as ns:
        br = broker_process(tmp_path, ns.addr, name="adopter", conf=conf).start()
        try:
            log = br.log_text()
            assert "last exit clean" in log
            assert log.count("adopting RocketMQ metadata") == 3, log
            # written as msgpack at start-up (before "boot success"), JSON left as it was
            assert {p.name for p in cfg.iterdir()} == {
                "topics.json",
                "consumerOffset.json",
                "subscriptionGroup.json",
                "topics.msgpack",
                "consumerOffset.msgpack",
                "subscriptionGroup.msgpack",
            }
            off = msgpack.unpackb((cfg / "consumerOffset.msgpack").read_bytes(), raw=False, strict_map_key=False)
            assert off["offsetTable"][f"{TOPIC}@G1"] == OFFSETS
            top = msgpack.unpackb((cfg / "topics.msgpack").read_bytes(), raw=False, strict_map_key=False)
            assert top["topicConfigTable"][TOPIC]["readQueueNums"] == 4
            grp = msgpack.unpackb((cfg / "subscriptionGroup.msgpack").read_bytes(), raw=False, strict_map_key=False)
            assert grp["subscriptionGroupTable"]["G1"]["retryMaxTimes"] == 5

            async with BrokerApi(br.addr) as api:
                topics = await api.topics()
                assert (topics[TOPIC].read_queue_nums, topics[TOPIC].write_queue_nums) == (4, 4)
                assert topics["OnlyInJson"].read_queue_nums == 2
                assert await broker_in_route(api.client, ns.addr, TOPIC, br.addr)
                info = await api.runtime_info()
                assert int(info["commitLogMaxOffset"]) == end_of_data
                assert info["commitLogMinOffset"] == "0"
                for q in range(4):
                    r = await api.query_offset("G1", TOPIC, q)
                    assert (r.code, r.ext_fields) == (ResponseCode.SUCCESS, {"offset": str(OFFSETS[q])})
                    assert await api.max_offset(TOPIC, q) == len(units[q])
                    assert await api.min_offset(TOPIC, q) == 0
                # the adopted group exists (no auto-creation here), an unknown one does not
                r = await api.pull(TOPIC, 0, 0, group="UnknownG")
                assert r.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
                # an adopted setting takes effect: consumeEnable=false
                r = await api.pull(TOPIC, 0, 0, group="GOff")
                assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, "subscription group no permission, GOff")

                total = 0
                tagged = {}
                for q in range(4):
                    body, nxt = await api.pull_all(TOPIC, q, group="G1")
                    assert nxt == len(units[q])
                    msgs = decode_records(body, decompress=False)
                    assert len(msgs) == len(units[q])
                    expected = []
                    for i, (m, (phy, size, _tag)) in enumerate(zip(msgs, units[q], strict=False)):
                        assert (m.commit_log_offset, m.store_size, m.queue_offset, m.queue_id, m.topic) == (
                            phy,
                            size,
                            i,
                            q,
                            TOPIC,
                        )
                        expected.append(commitlog_slice(store, phy, size, FILE_SIZE))
                        tagged.setdefault(m.properties.get("TAGS"), []).append((q, i))
                    assert body == b"".join(expected), f"queue {q}: pulled bytes differ from the CommitLog"
                    total += len(msgs)
                    # pulling from the adopted committed offset
                    r = await api.pull(TOPIC, q, OFFSETS[q], group="G1", max_nums=1)
                    assert decode_records(r.body)[0].queue_offset == OFFSETS[q]
                assert total == 2000
                assert {"Tag0", "Tag1", "Tag2"} <= set(tagged)
                # RocketMQ's tag codes in its ConsumeQueue filter on our broker
                got = []
                for q in range(4):
                    offset = 0
                    while offset < len(units[q]):
                        r = await api.pull(TOPIC, q, offset, group="G1", subscription="Tag1")
                        if r.code != ResponseCode.SUCCESS:
                            assert r.code == ResponseCode.PULL_RETRY_IMMEDIATELY
                        else:
                            got += [(q, m.queue_offset) for m in decode_records(r.body)]
                        offset = int(r.ext_fields["nextBeginOffset"])
                assert sorted(got) == sorted(tagged["Tag1"])
                # QUERY_MESSAGE through RocketMQ's IndexFile
                first = decode_records((await api.pull(TOPIC, 2, 5, group="G1", max_nums=1)).body, decompress=False)[0]
                key = first.properties["KEYS"].split(" ")[0]
                ext = QueryMessageRequestHeader(TOPIC, key, 32, 0, 2**62).to_ext_fields()
                ext["_UNIQUE_KEY_QUERY"] = "false"
                r = await api.call(RequestCode.QUERY_MESSAGE, ext)
                assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
                hits = decode_records(r.body, decompress=False)
                assert first.commit_log_offset in [m.commit_log_offset for m in hits]
                assert all(key in m.properties["KEYS"].split(" ") for m in hits)
        finally:
            rc = br.stop()
        assert rc == 0
        assert not (store / "abort").exists()
        # recovery accepted the store as it was: RocketMQ's files are unchanged
        assert _digest(commitlogs) == data_before
        assert {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in cqs} == cq_before
        assert _digest([cfg / n for n in json_before]) == json_before

        # "read them once": with the msgpack files there, the JSON is not read again
        changed = OFFSETS_JSON.replace("0:10,1:20", "0:99,1:99")
        assert changed != OFFSETS_JSON
        (cfg / "consumerOffset.json").write_text(changed)
        br2 = restart_broker(tmp_path, ns.addr, br, conf)
        try:
            assert "adopting RocketMQ metadata" not in br2.log_text()
            async with BrokerApi(br2.addr) as api:
                for q in range(4):
                    r = await api.query_offset("G1", TOPIC, q)
                    assert r.ext_fields == {"offset": str(OFFSETS[q])}
        finally:
            br2.stop()
