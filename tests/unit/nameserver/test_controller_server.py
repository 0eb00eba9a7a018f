"""The controller's wiring in NameServer and `rmq namesrv` (in-process, loopback)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nameserver.cli import build_parser, controller_config
from nameserver.controller import Controller, ControllerConfig
from nameserver.server import NameServer
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.controller import BrokerHeartbeatRequestHeader, decode_group_statuses
from rmq.protocol.frame import RemotingCommand
from rmq.remoting.client import RemotingClient

T = 3.0


def heartbeat(**kw) -> RemotingCommand:
    h = BrokerHeartbeatRequestHeader("C", "b", "10.0.0.1:10911", 0, "ASYNC_MASTER", **kw)
    return RemotingCommand(RequestCode.BROKER_HEARTBEAT, ext_fields=h.to_ext_fields())


async def test_without_controller_the_codes_are_not_served(tmp_path: Path) -> None:
    async with NameServer("127.0.0.1", 0, kv_path=tmp_path / "kv.msgpack") as ns, RemotingClient() as c:
        for code in (
            RequestCode.BROKER_HEARTBEAT,
            RequestCode.CONTROLLER_ELECT_MASTER,
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
        ):
            resp = await c.invoke(ns.address, RemotingCommand(code, ext_fields={}), T)
            assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert not (tmp_path / "controller.msgpack").exists()


async def test_decision_is_on_disk_before_the_answer(tmp_path: Path) -> None:
    cfg = ControllerConfig(enableControllerInNamesrv=True)
    async with NameServer("127.0.0.1", 0, kv_path=tmp_path / "kv.msgpack", controller=cfg) as ns, RemotingClient() as c:
        resp = await c.invoke(ns.address, heartbeat(max_offset=10), T)
        assert resp.code == ResponseCode.SUCCESS
        assert resp.ext_fields["masterEpoch"] == "1" and resp.ext_fields["brokerId"] == "0"
        on_disk = (tmp_path / "controller.msgpack").read_bytes()
        r = Controller(cfg)
        r.restore(on_disk, 0)
        assert r.groups["b"].epoch == 1
        # a malformed heartbeat is answered with the reason and changes nothing
        bad = heartbeat()
        bad.ext_fields["role"] = "BOSS"
        resp = await c.invoke(ns.address, bad, T)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "role" in resp.remark
        bad = heartbeat()
        bad.body = b"{not json"
        resp = await c.invoke(ns.address, bad, T)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "JSON" in resp.remark
        resp = await c.invoke(
            ns.address, RemotingCommand(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, ext_fields={"brokerName": "b"}), T
        )
        [g] = decode_group_statuses(resp.body)
        assert (g.epoch, g.master_addr, [m.role for m in g.members]) == (1, "10.0.0.1:10911", ["ASYNC_MASTER"])


async def test_damaged_controller_file_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / "controller.msgpack").write_bytes(b"\xc1garbage")
    ns = NameServer(
        "127.0.0.1", 0, kv_path=tmp_path / "kv.msgpack", controller=ControllerConfig(enableControllerInNamesrv=True)
    )
    with pytest.raises(ValueError, match="controller.msgpack: controller file is damaged"):
        await ns.start()


def test_cli_config(tmp_path: Path) -> None:
    p = build_parser()
    assert controller_config(p.parse_args([])) is None
    cfg = controller_config(p.parse_args(["--controller", "--controller-master-timeout-ms", "3000"]))
    assert cfg is not None and cfg.controllerMasterTimeout == 3000
    f = tmp_path / "namesrv.properties"
    f.write_text(
        "# controller\nenableControllerInNamesrv = true\nhaSlaveFallbehindMax=1024\n"
        "enableElectUncleanMaster=TRUE\nlistenPort=9876\n"
    )
    cfg = controller_config(p.parse_args(["-c", str(f)]))
    assert cfg is not None and (cfg.haSlaveFallbehindMax, cfg.enableElectUncleanMaster) == (1024, True)
    for text, why in [
        ("enableElectUncleanMaster=yes\n", "enableElectUncleanMaster: expected true or false"),
        ("controllerMasterTimeout=ten\n", "controllerMasterTimeout: expected an integer"),
        ("enableControllerInNamesrv=true\ncontrollerMasterTimeout=0\n", "must be positive"),
        ("justakey\n", "line 1: expected key=value"),
    ]:
        f.write_text(text)
        with pytest.raises(ValueError, match=why):
            controller_config(p.parse_args(["-c", str(f)]))
    with pytest.raises(ValueError, match="cannot read"):
        controller_config(p.parse_args(["-c", str(tmp_path / "missing")]))
