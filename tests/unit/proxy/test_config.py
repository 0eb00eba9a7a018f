"""`rmq proxy` configuration: RocketMQ ProxyConfig key names from a properties file or
rmq-proxy.json, -D overrides, and a bad value named."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq.proxy.config import PropertiesError, load_proxy_config
from rmq.proxy.server import main


def test_json_and_properties_files(tmp_path: Path) -> None:
    j = tmp_path / "rmq-proxy.json"
    j.write_text('{"namesrvAddr": "10.0.0.1:9876;10.0.0.2:9876", "grpcServerPort": 18081, "useDelayLevel": false}')
    cfg, raw = load_proxy_config(str(j), {"maxMessageSize": "1024"})
    assert cfg.namesrv_list() == ["10.0.0.1:9876", "10.0.0.2:9876"]
    assert (cfg.grpcServerPort, cfg.useDelayLevel, cfg.maxMessageSize) == (18081, False, 1024)
    assert raw["useDelayLevel"] == "false"
    p = tmp_path / "proxy.properties"
    p.write_text("namesrvAddr=127.0.0.1:9876\ntls.server.mode=disabled\naclEnable=true\n")
    cfg, raw = load_proxy_config(str(p))
    assert cfg.grpcServerPort == 8081 and raw["tls.server.mode"] == "disabled" and raw["aclEnable"] == "true"
    assert cfg.send_limits().delay_levels_ms[0] == 1000


@pytest.mark.parametrize(
    "overrides, key",
    [({"grpcServerPort": "x"}, "grpcServerPort"), ({"messageDelayLevel": "1s 5q"}, "messageDelayLevel")],
)
def test_bad_values_are_named(overrides: dict[str, str], key: str) -> None:
    with pytest.raises(PropertiesError) as ei:
        load_proxy_config(None, overrides)
    assert key in str(ei.value)


def test_cli_refuses_to_start_without_a_nameserver(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-p", "0"]) == 2
    assert "NameServer" in capsys.readouterr().err
    assert main(["-n", "127.0.0.1:9876", "-D", "grpcServerPort=notaport"]) == 2
    assert "grpcServerPort" in capsys.readouterr().err
