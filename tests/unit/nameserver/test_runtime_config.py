"""GET_NAMESRV_CONFIG / UPDATE_NAMESRV_CONFIG: the pure rules (nameserver.runtime_config)
and the processor in-process: live keys change at once, the -c file is rewritten in
place, black-listed, secret and unknown keys are refused naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from nameserver.config import NamesrvSettings, load_namesrv_config
from nameserver.runtime_config import ConfigRefused, apply_update, check_update, config_properties
from nameserver.server import NameServer
from rmq.common.properties import parse_properties_text
from rmq.protocol.bodies import TopicRouteData
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.remoting.client import RemotingClient
from tests.unit.nameserver.test_server import register, route

T = 3.0


def test_config_properties_lists_rocketmq_keys_and_no_secret() -> None:
    s = NamesrvSettings()
    s.controller.enableControllerInNamesrv = True
    s.controller.controllerEtcdPassword = "hush"
    s.namesrv.innerClientAuthenticationCredentials = "ak:sk"
    props = config_properties(s, listen_port=19876, kv_path="/kv.msgpack")
    for key in (
        "rocketmqHome",
        "kvConfigPath",
        "configStorePath",
        "productEnvName",
        "clusterTest",
        "orderMessageEnable",
        "configBlackList",
        "listenPort",
        "serverWorkerThreads",
        "serverSelectorThreads",
        "serverSocketBacklog",
        "writeBufferHighWaterMark",
        "useEpollNativeSelector",
        "enableControllerInNamesrv",
        "controllerMasterTimeout",
    ):
        assert key in props, key
    assert (props["listenPort"], props["kvConfigPath"], props["orderMessageEnable"]) == (
        "19876",
        "/kv.msgpack",
        "false",
    )
    assert "controllerEtcdPassword" not in props and "innerClientAuthenticationCredentials" not in props
    assert "hush" not in "".join(props.values()) and "ak:sk" not in "".join(props.values())
    # the controller's keys only when it runs here
    assert "controllerMasterTimeout" not in config_properties(NamesrvSettings())


@pytest.mark.parametrize("key", ["configBlackList", "configStorePath", "kvConfigPath", "rocketmqHome"])
def test_black_list_refused_with_no_permission(key: str) -> None:
    with pytest.raises(ConfigRefused, match=f"Can not update config in black list: {key}") as e:
        check_update(NamesrvSettings(), {key: "x"})
    assert e.value.no_permission


def test_configured_black_list_and_secrets_and_unknown_keys() -> None:
    s = NamesrvSettings()
    s.namesrv.configBlackList = "configBlackList;productEnvName"
    with pytest.raises(ConfigRefused, match="black list: productEnvName"):
        check_update(s, {"productEnvName": "dev"})
    for secret in ("controllerEtcdPassword", "innerClientAuthenticationCredentials"):
        with pytest.raises(ConfigRefused, match=secret) as e:
            check_update(s, {secret: "x"})
        assert e.value.no_permission
    with pytest.raises(ConfigRefused, match="^noSuchKey: not a NameServer config key") as e:
        check_update(s, {"orderMessageEnable": "true", "noSuchKey": "1"})
    assert not e.value.no_permission
    with pytest.raises(ConfigRefused, match="^scanNotActiveBrokerInterval: must be positive"):
        check_update(s, {"scanNotActiveBrokerInterval": "0"})
    with pytest.raises(ConfigRefused, match="^orderMessageEnable: expected true or false"):
        check_update(s, {"orderMessageEnable": "yes"})
    assert s.namesrv.orderMessageEnable is False  # nothing applied by a refused update


def test_live_and_restart_keys() -> None:
    s = NamesrvSettings()
    u = check_update(s, {"orderMessageEnable": "TRUE", "logLevel": "debug", "brokerExpiredTimeMillis": "5000"})
    assert u.on_restart == [] and u.remark is None
    apply_update(s, u)
    assert (s.namesrv.orderMessageEnable, s.namesrv.logLevel, s.namesrv.brokerExpiredTimeMillis) == (
        True,
        "DEBUG",
        5000,
    )
    # a key read only at start needs a file to go to
    with pytest.raises(ConfigRefused, match="^serverWorkerThreads: takes effect only at a restart"):
        check_update(s, {"serverWorkerThreads": "4"})
    s.namesrv.configStorePath = "/somewhere/namesrv.properties"
    u = check_update(s, {"serverWorkerThreads": "4", "controllerMasterTimeout": "3000"})
    assert u.on_restart == ["serverWorkerThreads", "controllerMasterTimeout"] and "serverWorkerThreads" in (
        u.remark or ""
    )
    apply_update(s, u)
    assert s.netty.serverWorkerThreads == 8 and s.controller.controllerMasterTimeout == 10_000  # not live


async def _update(c: RemotingClient, ns: NameServer, text: str) -> RemotingCommand:
    return await c.invoke(ns.address, RemotingCommand(RequestCode.UPDATE_NAMESRV_CONFIG, body=text.encode()), T)


async def test_update_over_the_wire_changes_routes_and_rewrites_the_file(tmp_path: Path) -> None:
    conf = tmp_path / "namesrv.properties"
    conf.write_text(f"# ours\nlistenPort=0\nkvConfigPath={tmp_path}/kv.msgpack\norderMessageEnable=false\n")
    ns = NameServer("127.0.0.1", 0, settings=load_namesrv_config(str(conf)))
    async with ns, RemotingClient() as c:
        assert (await c.invoke(ns.address, register("b1", "10.0.0.1:1", ["OT"]), T)).code == 0
        ns.kv.put_kv_config("ORDER_TOPIC_CONFIG", "OT", "b1:4")
        assert TopicRouteData.from_json((await c.invoke(ns.address, route("OT"), T)).body).order_topic_conf is None

        resp = await _update(c, ns, "orderMessageEnable=true\nscanNotActiveBrokerInterval=4000\n")
        assert resp.code == ResponseCode.SUCCESS and resp.remark is None
        assert TopicRouteData.from_json((await c.invoke(ns.address, route("OT"), T)).body).order_topic_conf == "b1:4"
        assert ns.scan_interval_ms == 4000 and ns.scan_initial_delay_ms == 2000

        shown = parse_properties_text(
            (await c.invoke(ns.address, RemotingCommand(RequestCode.GET_NAMESRV_CONFIG), T)).body.decode()
        )
        assert shown["orderMessageEnable"] == "true" and shown["listenPort"] == str(ns.port)
        assert shown["configStorePath"] == str(conf) and shown["kvConfigPath"] == f"{tmp_path}/kv.msgpack"

        resp = await _update(c, ns, "serverWorkerThreads=4")
        assert resp.code == ResponseCode.SUCCESS and "serverWorkerThreads" in resp.remark

        resp = await _update(c, ns, "kvConfigPath=/tmp/elsewhere")
        assert (resp.code, resp.remark) == (
            ResponseCode.NO_PERMISSION,
            "Can not update config in black list: kvConfigPath",
        )
        resp = await _update(c, ns, "nope=1")
        assert resp.code == ResponseCode.SYSTEM_ERROR and "nope" in resp.remark
    text = conf.read_text()
    assert text.startswith("# ours\nlistenPort=0\n")
    assert "orderMessageEnable=true\n" in text and "orderMessageEnable=false" not in text
    assert "scanNotActiveBrokerInterval=4000\n" in text and "serverWorkerThreads=4\n" in text
    assert "/tmp/elsewhere" not in text and "nope" not in text


async def test_without_a_file_live_keys_still_change(tmp_path: Path) -> None:
    ns = NameServer("127.0.0.1", 0, kv_path=tmp_path / "kv.msgpack")
    async with ns, RemotingClient() as c:
        assert (await _update(c, ns, "acceptStandardJsonOnly=true")).code == ResponseCode.SUCCESS
        assert ns.accept_standard_json_only is True
        resp = await _update(c, ns, "listenPort=1234")
        assert resp.code == ResponseCode.SYSTEM_ERROR and "listenPort" in resp.remark
    assert list(tmp_path.iterdir()) == [] or all(p.name.startswith("kv") for p in tmp_path.iterdir())
