"""A real ``rmq namesrv`` process on an ephemeral port, driven over real sockets.

The process is started through ``nameserver.cli.main`` with ``-p 0``; its bound port
is read from the ``NameServer listening on HOST:PORT`` log line. A fake broker
registers over a ``RemotingClient`` (JSON and ROCKETMQ headers), clients read routes
in both JSON styles, and the broker expiry, connection-close cleanup, KV persistence
and SIGTERM shutdown are checked. Every process is killed and every temp dir removed
even when a test fails.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from rmq.protocol.bodies import (
    ClusterInfo,
    DataVersion,
    KVTable,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
)
from rmq.protocol.codes import MQVersion, RequestCode, ResponseCode, SerializeType
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import (
    GetRouteInfoRequestHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
)
from rmq.remoting.client import RemotingClient
from tests.integration.admin_util import REPO, repo_env

pytestmark = pytest.mark.timeout(60)

# `nameserver.cli.main` in a child Python, as `rmq namesrv` runs it.
NAMESRV_MAIN = "import sys; from nameserver.cli import main; sys.exit(main(sys.argv[1:]))"
LISTENING = re.compile(r"NameServer listening on (\S+):(\d+)")
EXPIRE_MS = 1500
TIMEOUT = 3.0


class NamesrvProcess:
    """``python -c 'nameserver.cli.main(...)'`` with its stderr drained by a thread."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", NAMESRV_MAIN, "-p", "0", "--host", "127.0.0.1", *args],
            cwd=REPO,
            env=repo_env(PYTHONUNBUFFERED="1"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._listening = threading.Event()
        self.addr = ""
        # Draining in a thread: a full pipe would block the server's logging.
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            m = LISTENING.search(line)
            if m and not self.addr:
                self.addr = f"{m.group(1)}:{m.group(2)}"
                self._listening.set()
        self._listening.set()

    def wait_listening(self, timeout: float = 15.0) -> str:
        if not self._listening.wait(timeout) or not self.addr:
            self.kill()
            raise AssertionError("namesrv did not start:\n" + "\n".join(self.lines))
        return self.addr

    def log(self) -> str:
        return "\n".join(self.lines)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._reader.join(5)


@pytest.fixture
def tmp_dir() -> Iterator[Path]:
    """A temp dir removed right after the test, pass or fail (pytest keeps tmp_path)."""
    with tempfile.TemporaryDirectory(prefix="rmq-namesrv-") as d:
        yield Path(d)


@pytest.fixture(scope="module")
def namesrv() -> Iterator[NamesrvProcess]:
    with tempfile.TemporaryDirectory(prefix="rmq-namesrv-") as d:
        p = NamesrvProcess(
            "--broker-expire-ms",
            str(EXPIRE_MS),
            "--scan-interval-ms",
            "200",
            "--kv-path",
            str(Path(d) / "kvConfig.msgpack"),
            "--log-level",
            "DEBUG",
        )
        try:
            p.wait_listening()
            yield p
        finally:
            p.kill()


# --------------------------------------------------------------------------- helpers
def register_cmd(
    cluster: str,
    name: str,
    addr: str,
    bid: int,
    ha: str,
    topics: list[TopicConfig],
    counter: int = 1,
    compressed: bool = False,
    crc: bool = True,
) -> RemotingCommand:
    body = RegisterBrokerBody(
        TopicConfigSerializeWrapper({t.topic_name: t for t in topics}, DataVersion(1700000000000, counter)), []
    )
    data = body.encode(compressed)
    header = RegisterBrokerRequestHeader(
        name, addr, cluster, ha, bid, compressed=compressed, body_crc32=zlib.crc32(data) & 0x7FFFFFFF if crc else 0
    )
    return RemotingCommand(RequestCode.REGISTER_BROKER, ext_fields=header.to_ext_fields(), body=data)


def route_cmd(topic: str, version: int, standard_only: bool | None = None) -> RemotingCommand:
    return RemotingCommand(
        RequestCode.GET_ROUTEINFO_BY_TOPIC,
        version=version,
        ext_fields=GetRouteInfoRequestHeader(topic, standard_only).to_ext_fields(),
    )


async def wait_for(predicate: Callable[[], Awaitable[bool]], timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(step)
    return False


# --------------------------------------------------------------------------- tests
@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
async def test_register_and_route_both_json_forms(namesrv: NamesrvProcess, serialize_type: int) -> None:
    tag = SerializeType.name_of(serialize_type)
    cluster, name, topic = f"Cl-{tag}", f"broker-{tag}", f"Topic-{tag}"
    m_addr, s_addr = "10.1.0.1:10911", "10.1.0.2:10911"
    async with (
        RemotingClient(serialize_type=serialize_type) as broker,
        RemotingClient(serialize_type=serialize_type) as client,
    ):
        resp = await broker.invoke(
            namesrv.addr,
            register_cmd(cluster, name, m_addr, 0, "10.1.0.1:10912", [TopicConfig(topic, 8, 8, 6)]),
            TIMEOUT,
        )
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert resp.serialize_type == serialize_type  # answered in the request's form
        resp = await broker.invoke(
            namesrv.addr, register_cmd(cluster, name, s_addr, 1, "10.1.0.2:10912", [], compressed=True), TIMEOUT
        )
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert RegisterBrokerResponseHeader.from_ext_fields(resp.ext_fields) == RegisterBrokerResponseHeader(
            "10.1.0.1:10912", m_addr
        )

        legacy = await client.invoke(namesrv.addr, route_cmd(topic, MQVersion.V3_4_9), TIMEOUT)
        assert legacy.code == ResponseCode.SUCCESS, legacy.remark
        assert b'"brokerAddrs":{0:"10.1.0.1:10911",1:"10.1.0.2:10911"}' in legacy.body
        with pytest.raises(ValueError):
            json.loads(legacy.body)

        for cmd in (
            route_cmd(topic, MQVersion.V4_9_4),  # version >= 401
            route_cmd(topic, MQVersion.V3_4_9, True),
        ):  # or asks for it
            std = await client.invoke(namesrv.addr, cmd, TIMEOUT)
            assert std.code == ResponseCode.SUCCESS
            assert b'"brokerAddrs":{"0":"10.1.0.1:10911","1":"10.1.0.2:10911"}' in std.body
            json.loads(std.body)
            assert TopicRouteData.from_json(std.body) == TopicRouteData.from_json(legacy.body)

        route = TopicRouteData.from_json(legacy.body)
        assert [(q.broker_name, q.write_queue_nums, q.perm) for q in route.queue_datas] == [(name, 8, 6)]
        assert route.broker_datas[0].cluster == cluster
        assert route.order_topic_conf is None  # orderMessageEnable is off

        info = await client.invoke(namesrv.addr, RemotingCommand(RequestCode.GET_BROKER_CLUSTER_INFO), TIMEOUT)
        assert b"{0:" in info.body  # always legacy, even for v409
        ci = ClusterInfo.from_json(info.body)
        assert ci.cluster_addr_table[cluster] == [name]
        assert ci.broker_addr_table[name].broker_addrs == {0: m_addr, 1: s_addr}

        topics = await client.invoke(
            namesrv.addr, RemotingCommand(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER), TIMEOUT
        )
        assert topic in TopicList.from_json(topics.body).topic_list
        by_cluster = await client.invoke(
            namesrv.addr, RemotingCommand(RequestCode.GET_TOPICS_BY_CLUSTER, ext_fields={"cluster": cluster}), TIMEOUT
        )
        assert TopicList.from_json(by_cluster.body).topic_list == [topic]

        # clean shutdown of the group: routes disappear at once
        for addr, bid in ((s_addr, 1), (m_addr, 0)):
            resp = await broker.invoke(
                namesrv.addr,
                RemotingCommand(
                    RequestCode.UNREGISTER_BROKER,
                    ext_fields=UnRegisterBrokerRequestHeader(name, addr, cluster, bid).to_ext_fields(),
                ),
                TIMEOUT,
            )
            assert resp.code == ResponseCode.SUCCESS
        gone = await client.invoke(namesrv.addr, route_cmd(topic, MQVersion.V4_9_8), TIMEOUT)
        assert gone.code == ResponseCode.TOPIC_NOT_EXIST


async def test_unknown_topic_and_bad_requests(namesrv: NamesrvProcess) -> None:
    async with RemotingClient() as client:
        resp = await client.invoke(namesrv.addr, route_cmd("NoSuchTopic", 409), TIMEOUT)
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST
        assert resp.remark == (
            "No topic route info in name server for the topic: NoSuchTopic"
            "\nSee http://rocketmq.apache.org/docs/faq/ for further details."
        )
        bad_crc = register_cmd("C", "b", "10.9.0.1:1", 0, "10.9.0.1:2", [TopicConfig("Crc")])
        bad_crc.ext_fields["bodyCrc32"] = "12345"
        resp = await client.invoke(namesrv.addr, bad_crc, TIMEOUT)
        assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
        garbage = register_cmd("C", "b", "10.9.0.1:1", 0, "10.9.0.1:2", [], crc=False)
        garbage.body = b"{not json"
        resp = await client.invoke(namesrv.addr, garbage, TIMEOUT)
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert "RegisterBrokerBody" in resp.remark
        resp = await client.invoke(
            namesrv.addr, RemotingCommand(RequestCode.REGISTER_BROKER, ext_fields={"brokerName": "b"}), TIMEOUT
        )
        assert resp.code == ResponseCode.SYSTEM_ERROR
        resp = await client.invoke(namesrv.addr, RemotingCommand(9999), TIMEOUT)
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        # the bad requests registered nothing
        resp = await client.invoke(namesrv.addr, route_cmd("Crc", 409), TIMEOUT)
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST


async def test_kv_config_and_order_topic_conf_in_register_answer(namesrv: NamesrvProcess) -> None:
    async with RemotingClient() as client:

        async def kv(code: int, **ext: str) -> RemotingCommand:
            return await client.invoke(namesrv.addr, RemotingCommand(code, ext_fields=ext), TIMEOUT)

        assert (
            await kv(RequestCode.PUT_KV_CONFIG, namespace="ORDER_TOPIC_CONFIG", key="OrderT", value="broker-kv:4")
        ).code == ResponseCode.SUCCESS
        got = await kv(RequestCode.GET_KV_CONFIG, namespace="ORDER_TOPIC_CONFIG", key="OrderT")
        assert (got.code, got.ext_fields["value"]) == (ResponseCode.SUCCESS, "broker-kv:4")
        missing = await kv(RequestCode.GET_KV_CONFIG, namespace="ORDER_TOPIC_CONFIG", key="x")
        assert missing.code == ResponseCode.QUERY_NOT_FOUND
        assert missing.remark == "No config item, Namespace: ORDER_TOPIC_CONFIG Key: x"
        listed = await kv(RequestCode.GET_KVLIST_BY_NAMESPACE, namespace="ORDER_TOPIC_CONFIG")
        assert KVTable.from_json(listed.body).table["OrderT"] == "broker-kv:4"
        assert (await kv(RequestCode.GET_KVLIST_BY_NAMESPACE, namespace="none")).code == ResponseCode.QUERY_NOT_FOUND
        assert (await kv(RequestCode.PUT_KV_CONFIG, key="k")).code == ResponseCode.SYSTEM_ERROR

        resp = await client.invoke(
            namesrv.addr,
            register_cmd("CKV", "broker-kv", "10.2.0.1:10911", 0, "10.2.0.1:10912", [TopicConfig("OrderT")]),
            TIMEOUT,
        )
        assert KVTable.from_json(resp.body).table["OrderT"] == "broker-kv:4"

        assert (
            await kv(RequestCode.DELETE_KV_CONFIG, namespace="ORDER_TOPIC_CONFIG", key="OrderT")
        ).code == ResponseCode.SUCCESS
        assert (
            await kv(RequestCode.GET_KV_CONFIG, namespace="ORDER_TOPIC_CONFIG", key="OrderT")
        ).code == ResponseCode.QUERY_NOT_FOUND


async def test_broker_expiry_closes_its_connection(namesrv: NamesrvProcess) -> None:
    topic = "ExpiringTopic"
    async with RemotingClient() as broker, RemotingClient() as client:
        resp = await broker.invoke(
            namesrv.addr,
            register_cmd("CE", "broker-exp", "10.3.0.1:10911", 0, "10.3.0.1:10912", [TopicConfig(topic)]),
            TIMEOUT,
        )
        assert resp.code == ResponseCode.SUCCESS
        registered = time.monotonic()
        conn = await broker.get_connection(namesrv.addr)

        async def route_gone() -> bool:
            r = await client.invoke(namesrv.addr, route_cmd(topic, 409), TIMEOUT)
            return r.code == ResponseCode.TOPIC_NOT_EXIST

        assert not await route_gone()
        # silent for longer than the expiry: dropped by the scan (every 200 ms)...
        assert await wait_for(route_gone, EXPIRE_MS / 1000 + 3)
        assert time.monotonic() - registered >= EXPIRE_MS / 1000

        async def broker_conn_closed() -> bool:
            return conn.closed

        # ...and the namesrv closed the broker's connection, as RocketMQ does
        assert await wait_for(broker_conn_closed, 2)
    assert "the broker channel expired: addr=10.3.0.1:10911" in namesrv.log()


async def test_connection_close_removes_brokers_at_once(namesrv: NamesrvProcess) -> None:
    topic = "ClosingTopic"
    async with RemotingClient() as client:
        broker = RemotingClient()
        try:
            resp = await broker.invoke(
                namesrv.addr,
                register_cmd("CC", "broker-close", "10.4.0.1:10911", 0, "10.4.0.1:10912", [TopicConfig(topic)]),
                TIMEOUT,
            )
            assert resp.code == ResponseCode.SUCCESS
        finally:
            await broker.close()
        closed = time.monotonic()

        async def route_gone() -> bool:
            r = await client.invoke(namesrv.addr, route_cmd(topic, 409), TIMEOUT)
            return r.code == ResponseCode.TOPIC_NOT_EXIST

        assert await wait_for(route_gone, 1.0, step=0.02)
        # well before the 1.5 s expiry could explain it
        assert time.monotonic() - closed < EXPIRE_MS / 1000 / 2


async def test_admin_requests(namesrv: NamesrvProcess) -> None:
    async with RemotingClient() as client:

        async def call(code: int, **ext: str) -> RemotingCommand:
            return await client.invoke(namesrv.addr, RemotingCommand(code, ext_fields=ext), TIMEOUT)

        await client.invoke(
            namesrv.addr,
            register_cmd(
                "CA",
                "broker-adm",
                "10.5.0.1:10911",
                0,
                "10.5.0.1:10912",
                [TopicConfig("AdmT", perm=6), TopicConfig("AdmU", perm=6)],
            ),
            TIMEOUT,
        )
        wiped = await call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, brokerName="broker-adm")
        assert wiped.ext_fields["wipeTopicCount"] == "2"
        route = TopicRouteData.from_json((await client.invoke(namesrv.addr, route_cmd("AdmT", 409), TIMEOUT)).body)
        assert route.queue_datas[0].perm == 4
        added = await call(RequestCode.ADD_WRITE_PERM_OF_BROKER, brokerName="broker-adm")
        assert added.ext_fields["addTopicCount"] == "2"

        version = await client.invoke(
            namesrv.addr,
            RemotingCommand(
                RequestCode.QUERY_DATA_VERSION,
                ext_fields={
                    "brokerName": "broker-adm",
                    "brokerAddr": "10.5.0.1:10911",
                    "clusterName": "CA",
                    "brokerId": "0",
                },
                body=DataVersion(1700000000000, 1).to_json(),
            ),
            TIMEOUT,
        )
        assert version.ext_fields["changed"] == "false"
        assert DataVersion.from_json(version.body) == DataVersion(1700000000000, 1)

        system = TopicList.from_json((await call(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS)).body)
        assert {"CA", "broker-adm"} <= set(system.topic_list) and system.broker_addr

        assert (await call(RequestCode.DELETE_TOPIC_IN_NAMESRV, topic="AdmU")).code == 0
        assert (await client.invoke(namesrv.addr, route_cmd("AdmU", 409), TIMEOUT)).code == ResponseCode.TOPIC_NOT_EXIST
        config = await call(RequestCode.GET_NAMESRV_CONFIG)
        assert b"listenPort=" in config.body


async def test_sigterm_stops_cleanly_and_kv_survives_restart(tmp_dir: Path) -> None:
    kv_path = tmp_dir / "kv" / "kvConfig.msgpack"
    first = NamesrvProcess("--kv-path", str(kv_path))
    try:
        addr = first.wait_listening()
        async with RemotingClient() as client:
            resp = await client.invoke(
                addr,
                RemotingCommand(RequestCode.PUT_KV_CONFIG, ext_fields={"namespace": "NS", "key": "k", "value": "v"}),
                TIMEOUT,
            )
            assert resp.code == ResponseCode.SUCCESS
        start = time.monotonic()
        first.proc.send_signal(signal.SIGTERM)
        assert first.proc.wait(5) == 0
        assert time.monotonic() - start < 2.0
        first._reader.join(5)
        assert "NameServer shutting down" in first.log()
    finally:
        first.kill()

    second = NamesrvProcess("--kv-path", str(kv_path))
    try:
        addr = second.wait_listening()
        async with RemotingClient(serialize_type=SerializeType.ROCKETMQ) as client:
            resp = await client.invoke(
                addr, RemotingCommand(RequestCode.GET_KV_CONFIG, ext_fields={"namespace": "NS", "key": "k"}), TIMEOUT
            )
            assert (resp.code, resp.ext_fields) == (ResponseCode.SUCCESS, {"value": "v"})
        second.proc.send_signal(signal.SIGINT)
        assert second.proc.wait(5) == 0
    finally:
        second.kill()


def test_port_in_use_fails_fast(namesrv: NamesrvProcess, tmp_dir: Path) -> None:
    port = namesrv.addr.rsplit(":", 1)[1]
    out = subprocess.run(
        [sys.executable, "-c", NAMESRV_MAIN, "-p", port, "--host", "127.0.0.1", "--kv-path", str(tmp_dir / "kv")],
        cwd=REPO,
        env=repo_env(),
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert out.returncode == 1
    assert "NameServer cannot start" in out.stderr and "in use" in out.stderr


# --------------------------------------------------------------------------- -c FILE (issue 11 item 8)
async def test_config_file_with_port_beside_it(tmp_dir: Path) -> None:
    """``-c namesrv.properties -p 0``: RocketMQ's keys as text, -p over listenPort, an
    unknown key warned about once."""
    kv_path = tmp_dir / "kv" / "kvConfig.msgpack"
    conf = tmp_dir / "namesrv.properties"
    conf.write_text(
        f"# RocketMQ's keys\nlistenPort=1\nbindAddress=127.0.0.1\nkvConfigPath={kv_path}\n"
        "orderMessageEnable=true\nclusterTest=false\nrocketmqHome=/opt/rocketmq\n"
        "scanNotActiveBrokerInterval=500\nnoSuchKey=42\n"
    )
    p = NamesrvProcess("-c", str(conf))
    try:
        addr = p.wait_listening()
        assert not addr.endswith(":1")
        async with RemotingClient() as client:
            resp = await client.invoke(addr, RemotingCommand(RequestCode.GET_NAMESRV_CONFIG), TIMEOUT)
            assert resp.code == ResponseCode.SUCCESS
            props = dict(line.split("=", 1) for line in resp.body.decode().splitlines())
            assert props["listenPort"] == addr.rsplit(":", 1)[1]
            assert props["kvConfigPath"] == str(kv_path)
            assert props["orderMessageEnable"] == "true"
            assert props["scanNotActiveBrokerInterval"] == "500"
            resp = await client.invoke(
                addr,
                RemotingCommand(RequestCode.PUT_KV_CONFIG, ext_fields={"namespace": "NS", "key": "k", "value": "v"}),
                TIMEOUT,
            )
            assert resp.code == ResponseCode.SUCCESS
        assert kv_path.exists()
        warned = [line for line in p.lines if "unknown key" in line]
        assert len(warned) == 1 and "'noSuchKey'" in warned[0] and "WARNING" in warned[0]
        p.proc.send_signal(signal.SIGTERM)
        assert p.proc.wait(5) == 0
    finally:
        p.kill()


@pytest.mark.parametrize(
    "text, named",
    [
        ("listenPort=abc\n", "listenPort: expected an integer, got 'abc'"),
        ("orderMessageEnable=maybe\n", "orderMessageEnable: expected true or false, got 'maybe'"),
        ("enableControllerInNamesrv=true\ncontrollerMasterTimeout=-1\n", "controllerMasterTimeout must be positive"),
    ],
)
def test_config_file_bad_value_stops_the_start(tmp_dir: Path, text: str, named: str) -> None:
    conf = tmp_dir / "namesrv.properties"
    conf.write_text(text)
    out = subprocess.run(
        [sys.executable, "-m", "rmq.cli", "namesrv", "-c", str(conf), "-p", "0", "--kv-path", str(tmp_dir / "kv")],
        cwd=REPO,
        env=repo_env(),
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert out.returncode == 2, out.stderr
    assert named in out.stderr and str(conf) in out.stderr
    assert "NameServer listening" not in out.stderr and "Traceback" not in out.stderr
