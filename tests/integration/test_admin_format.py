"""`rmq admin` building blocks without processes: the object-keyed map reader, fastjson's
pretty form, the table printer, TopicConfig's text, error lines, and the command registry."""

from __future__ import annotations

import io
import json

import pytest

from rmq.admin.base import COMMANDS, TOPIC, AdminError, Command, Output, describe_error, register
from rmq.admin.main import main
from rmq.admin.output import Col, Table, fastjson_pretty, human_time, topic_config_string
from rmq.client.errors import MQBrokerError
from rmq.protocol.bodies import (
    BrokerData,
    QueueData,
    TopicConfig,
    TopicRouteData,
    dumps_object_keyed_map,
    loads_object_keyed_map,
)
from rmq.protocol.errors import ProtocolError
from rmq.remoting.errors import RemotingTimeoutError
from tests.integration.admin_util import mqadmin_route_text


# =========================================================================== object-keyed maps
def test_object_keyed_map_round_trip_with_the_broker_encoder():
    entries = [
        (
            {"brokerName": "b", "queueId": 0, "topic": 'T{0:}"x'},
            {"lastUpdateTimestamp": 1, "maxOffset": 3, "minOffset": 0},
        ),
        ({"brokerName": "b", "queueId": 1, "topic": "T"}, {"maxOffset": 5}),
    ]
    body = dumps_object_keyed_map("offsetTable", entries)
    assert loads_object_keyed_map(body, "offsetTable") == entries


def test_object_keyed_map_reader_skips_other_fields_and_reads_java_forms():
    body = (
        b'{"consumeTps":1.5,"x":{0:"a"},"s":"}{","offsetTable" : { '
        b'{"brokerName":"b","queueId":7,"topic":"t"} : {"brokerOffset":9,"v":{1:"x"}} , '
        b'{"brokerName":"b","queueId":8,"topic":"t"}:null } }'
    )
    assert loads_object_keyed_map(body, "offsetTable") == [
        ({"brokerName": "b", "queueId": 7, "topic": "t"}, {"brokerOffset": 9, "v": {"1": "x"}}),
        ({"brokerName": "b", "queueId": 8, "topic": "t"}, None),
    ]
    assert loads_object_keyed_map(b'{"offsetTable":{}}', "offsetTable") == []
    assert loads_object_keyed_map(b'{"offsetTable":null}', "offsetTable") == []
    assert loads_object_keyed_map(b'{"other":1}', "offsetTable") == []
    assert loads_object_keyed_map(b"{}", "offsetTable") == []


@pytest.mark.parametrize(
    "bad",
    [
        b"",
        b"[]",
        b'{"offsetTable":{{"a":1}}}',
        b'{"offsetTable":{1:2}}',
        b'{"offsetTable":{{"a":1}:{"b"',
        b'{"offsetTable":{{"a":1}:1 {"b":2}:2}}',
        b"\xff",
    ],
)
def test_object_keyed_map_reader_rejects_garbage(bad):
    with pytest.raises(ProtocolError):
        loads_object_keyed_map(bad, "offsetTable")


# =========================================================================== fastjson pretty
def test_fastjson_pretty_matches_mqadmin_topic_route():
    rd = TopicRouteData(
        [QueueData("broker-a", 4, 4, 6)],
        [BrokerData("DefaultCluster", "broker-a", {1: "10.0.0.2:10911", 0: "10.0.0.1:10911"})],
        {"10.0.0.1:10911": ["fs1", "fs2"]},
    )
    filter_servers = '{\n\t\t"10.0.0.1:10911":[\n\t\t\t"fs1",\n\t\t\t"fs2"\n\t\t]\n\t}'
    assert fastjson_pretty(rd.to_obj()) == mqadmin_route_text(
        "DefaultCluster", '0:"10.0.0.1:10911",1:"10.0.0.2:10911"', filter_servers
    )
    assert (
        fastjson_pretty({"a": [], "b": {}, "c": None, "d": 'q"\n', "e": True})
        == '{\n\t"a":[],\n\t"b":{},\n\t"d":"q\\"\\n",\n\t"e":true\n}'
    )


# =========================================================================== tables and text
def test_table_aligns_like_mqadmin_and_widens_for_long_cells():
    t = Table(Col("#Broker Name", 12), Col("#QID", 4), Col("#TPS", 8, right=True, gap=" "), Col("#Last"))
    t.add("broker-a", 0, "1.00", "x")
    t.add("a-much-longer-broker", 12, "100.25", "")
    assert t.render().splitlines() == [
        "#Broker Name          #QID     #TPS  #Last",
        "broker-a              0        1.00  x",
        "a-much-longer-broker  12     100.25",
    ]
    with pytest.raises(ValueError):
        t.add("only one")


def test_topic_config_string_and_human_time():
    tc = TopicConfig("T", 8, 8, 6)
    assert topic_config_string(tc) == (
        "TopicConfig [topicName=T, readQueueNums=8, "
        "writeQueueNums=8, perm=RW-, topicFilterType=SINGLE_TAG, "
        "topicSysFlag=0, order=false]"
    )
    tc = TopicConfig("T", 1, 2, 5, order=True, topic_sys_flag=3)
    assert "perm=R-X" in topic_config_string(tc) and "order=true]" in topic_config_string(tc)
    assert human_time(1_700_000_000_123).endswith(",123")
    assert len(human_time(1_700_000_000_123)) == len("2023-11-14 22:13:20,123")


def test_error_lines():
    assert describe_error(AdminError("no such\n topic")) == "no such topic"
    assert (
        describe_error(MQBrokerError(17, "topic[x] not exist", "1.2.3.4:10911"))
        == "broker 1.2.3.4:10911 answered TOPIC_NOT_EXIST (17): topic[x] not exist"
    )
    assert describe_error(MQBrokerError(1, None)) == "NameServer answered SYSTEM_ERROR (1)"
    assert (
        describe_error(RemotingTimeoutError("wait response on x timeout 5000ms")) == "wait response on x timeout 5000ms"
    )
    assert describe_error(ProtocolError("bad")) == "malformed response: bad"
    assert describe_error(KeyError("k")) == "internal error: KeyError: 'k'"


def test_output_text_json_and_errors():
    so, se = io.StringIO(), io.StringIO()
    out = Output("x", False, so, se)
    out.emit(text="a\nb", data={"k": 1})
    out.warn("careful")
    assert not out.failed
    out.error("broken")
    assert out.failed
    assert so.getvalue() == "a\nb\n"
    assert se.getvalue() == "rmq admin x: careful\nrmq admin x: broken\n"
    so = io.StringIO()
    Output("x", True, so, se).emit(text="ignored", data={"k": [1]})
    assert json.loads(so.getvalue()) == {"k": [1]}


# =========================================================================== registry
@pytest.fixture
def registry():
    import rmq.admin.commands  # noqa: F401  (the real commands, registered once)

    saved = dict(COMMANDS)
    yield COMMANDS
    COMMANDS.clear()
    COMMANDS.update(saved)


def test_a_registered_command_is_listed_parsed_and_run(registry, monkeypatch):
    """The extension recipe: subclass Command, @register, declare options, write run."""
    seen = {}

    class Echo(Command):
        name = "echoTopicForTest"
        help = "test only"
        options = (TOPIC.but(required=True),)

        async def run(self, admin, args, out):
            seen["namesrv"] = admin.namesrv_addrs
            out.emit(text=f"topic={args.topic}", data={"topic": args.topic})

    register(Echo)
    with pytest.raises(ValueError):
        register(Echo)
    assert "echoTopicForTest" in registry

    so, se = io.StringIO(), io.StringIO()
    assert main([], so, se) == 0
    assert "   echoTopicForTest     test only\n" in so.getvalue()
    so = io.StringIO()
    assert main(["echotopicfortest", "-t", "T", "-n", "h1:1;h2:2"], so, se) == 0
    assert so.getvalue() == "topic=T\n" and seen["namesrv"] == ["h1:1", "h2:2"]
    so = io.StringIO()
    monkeypatch.setenv("NAMESRV_ADDR", "env:9")
    assert main(["echoTopicForTest", "--json", "-t", "T"], so, se) == 0
    assert json.loads(so.getvalue()) == {"topic": "T"} and seen["namesrv"] == ["env:9"]
    monkeypatch.delenv("NAMESRV_ADDR")
    main(["echoTopicForTest", "-t", "T"], io.StringIO(), se)
    assert seen["namesrv"] == ["127.0.0.1:9876"]
    assert se.getvalue() == ""
