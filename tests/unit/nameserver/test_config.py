"""``rmq namesrv -c FILE``: one properties file with RocketMQ's key names (issue 11 item 8)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from nameserver.cli import build_parser, settings_from_args
from nameserver.config import NamesrvSettings, load_namesrv_config
from nameserver.kvconfig import default_kv_path
from rmq.common.properties import PropertiesError


def _file(tmp_path: Path, text: str) -> str:
    f = tmp_path / "namesrv.properties"
    f.write_text(text)
    return str(f)


# --------------------------------------------------------------------------- nameserver.config
def test_defaults_without_a_file() -> None:
    s = load_namesrv_config(None)
    assert (s.netty.listenPort, s.netty.bindAddress) == (9876, "0.0.0.0")
    assert (s.namesrv.orderMessageEnable, s.namesrv.clusterTest) == (False, False)
    assert s.namesrv.kv_path == default_kv_path()
    assert s.controller_config is None and s.unknown_keys == []


def test_rocketmq_keys_from_text(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        "listenPort=9877\nrocketmqHome=/opt/rocketmq\n"
        f"kvConfigPath={tmp_path}/kv.msgpack\nconfigStorePath=/x/namesrv.properties\n"
        "orderMessageEnable=true\nclusterTest=FALSE\nproductEnvName=dev\n"
        "scanNotActiveBrokerInterval=2000\nbrokerExpiredTimeMillis=6000\n"
        "acceptStandardJsonOnly=true\nmetricsPromExporterPort=5557\n"
        "serverWorkerThreads=16\nbindAddress=127.0.0.1\nlogLevel=debug\n"
        "enableControllerInNamesrv=true\ncontrollerMasterTimeout=3000\n",
    )
    s = load_namesrv_config(path)
    n = s.namesrv
    assert (s.netty.listenPort, s.netty.bindAddress, s.netty.serverWorkerThreads) == (9877, "127.0.0.1", 16)
    assert (n.rocketmqHome, n.kv_path, n.configStorePath, n.productEnvName) == (
        "/opt/rocketmq",
        tmp_path / "kv.msgpack",
        path,  # NamesrvStartup: the -c file wins, updateNamesrvConfig writes back to it
        "dev",
    )
    assert (n.orderMessageEnable, n.clusterTest, n.acceptStandardJsonOnly) == (True, False, True)
    assert (n.scanNotActiveBrokerInterval, n.brokerExpiredTimeMillis) == (2000, 6000)
    assert (n.metricsPromExporterPort, n.logLevel) == (5557, "DEBUG")
    assert s.controller_config is not None
    assert s.controller_config.controllerMasterTimeout == 3000


def test_unknown_keys_are_warned_once_each(tmp_path: Path, caplog) -> None:
    path = _file(tmp_path, "listenPort=1\nnoSuchKey=1\nalsoUnknown=x\n")
    caplog.set_level(logging.WARNING, logger="rmq.nameserver")
    s = load_namesrv_config(path)
    assert s.unknown_keys == ["noSuchKey", "alsoUnknown"]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "'noSuchKey'" in lines[0] and path in lines[0]
    assert "'alsoUnknown'" in lines[1]


@pytest.mark.parametrize(
    "text, msg",
    [
        ("listenPort=abc\n", "listenPort: expected an integer, got 'abc'"),
        ("listenPort=70000\n", "listenPort: 70000 is not a TCP port"),
        ("orderMessageEnable=yes\n", "orderMessageEnable: expected true or false"),
        ("metricsPromExporterPort=-1\n", "metricsPromExporterPort: -1 is not a TCP port"),
        ("scanNotActiveBrokerInterval=0\n", "scanNotActiveBrokerInterval: must be positive"),
        ("brokerExpiredTimeMillis=-5\n", "brokerExpiredTimeMillis: must be positive"),
        ("logLevel=LOUD\n", "logLevel: expected one of DEBUG, INFO, WARNING, ERROR"),
        ("enableControllerInNamesrv=true\ncontrollerScanInterval=0\n", "controllerScanInterval must be positive"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, text: str, msg: str) -> None:
    with pytest.raises(PropertiesError) as ei:
        load_namesrv_config(_file(tmp_path, text))
    assert msg in str(ei.value)


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(PropertiesError, match="cannot read"):
        load_namesrv_config(str(tmp_path / "missing.properties"))


def test_command_line_wins_over_the_file(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        "listenPort=9877\norderMessageEnable=false\ncontrollerMasterTimeout=5000\nenableControllerInNamesrv=false\n",
    )
    p = build_parser()
    s = settings_from_args(p.parse_args(["-c", path]))
    assert s.netty.listenPort == 9877 and s.controller_config is None
    s = settings_from_args(
        p.parse_args(
            [
                "-c",
                path,
                "-p",
                "0",
                "--host",
                "127.0.0.1",
                "--order-message-enable",
                "--controller",
                "--controller-master-timeout-ms",
                "3000",
                "--kv-path",
                "/k",
                "--broker-expire-ms",
                "1500",
                "--scan-interval-ms",
                "200",
                "--metrics-port",
                "5558",
                "--accept-standard-json-only",
                "--log-level",
                "warning",
            ]
        )
    )
    assert (s.netty.listenPort, s.netty.bindAddress) == (0, "127.0.0.1")
    n = s.namesrv
    assert (n.orderMessageEnable, n.acceptStandardJsonOnly, n.kvConfigPath) == (True, True, "/k")
    assert (n.brokerExpiredTimeMillis, n.scanNotActiveBrokerInterval) == (1500, 200)
    assert (n.metricsPromExporterPort, n.logLevel) == (5558, "WARNING")
    assert s.controller_config is not None
    assert s.controller_config.controllerMasterTimeout == 3000
    # a bad option value is named by its key too
    with pytest.raises(PropertiesError, match="^listenPort: 65536 is not a TCP port"):
        settings_from_args(p.parse_args(["-p", "65536"]))


def test_every_option_has_a_key() -> None:
    from nameserver.cli import _OPTION_KEYS

    dests = {a.dest for a in build_parser()._actions} - {"help", "config"}
    assert dests == set(_OPTION_KEYS)
    s = NamesrvSettings()
    for key in _OPTION_KEYS.values():
        assert any(hasattr(o, key) for o in (s.namesrv, s.netty, s.controller)), key
