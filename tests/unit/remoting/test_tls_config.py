"""RocketMQ's tls.* keys (spec rocketmq-4x-acl-tls.md §3.1) and the same-port decision (§3.2):
pure parsing, then the loaders of broker.conf / the NameServer's file."""

from __future__ import annotations

import pytest

from nameserver.config import load_namesrv_config
from rmq.broker.config import load_broker_config
from rmq.common.properties import PropertiesError
from rmq.remoting.tls import (
    ClientAuth,
    Decision,
    TlsMode,
    TlsSettings,
    decide,
    load_tls_settings,
    parse_tls_settings,
    tls_properties,
)


def test_defaults_are_rocketmq_4_9_8s():
    s, ignored = parse_tls_settings({})
    assert ignored == []
    assert s.server_mode is TlsMode.PERMISSIVE
    assert s.test_mode is True
    assert s.server_need_client_auth is ClientAuth.NONE
    assert s.enable is None and s.server_auth_client is False and s.client_auth_server is False
    assert s.config_file == "/etc/rocketmq/tls.properties"
    assert not s.outbound_tls


def test_every_key_lands_in_its_field():
    props = {
        "tls.server.mode": "Enforcing",
        "tls.enable": "true",
        "tls.test.mode.enable": "false",
        "tls.server.need.client.auth": "REQUIRE",
        "tls.server.keyPath": "/k.pem",
        "tls.server.keyPassword": "pw",
        "tls.server.certPath": "/c.pem",
        "tls.server.authClient": "true",
        "tls.server.trustCertPath": "/ca.pem",
        "tls.client.keyPath": "/ck.pem",
        "tls.client.keyPassword": "cpw",
        "tls.client.certPath": "/cc.pem",
        "tls.client.authServer": "TRUE",
        "tls.client.trustCertPath": "/cca.pem",
    }
    s, ignored = parse_tls_settings(props)
    assert ignored == []
    assert s == TlsSettings(
        server_mode=TlsMode.ENFORCING,
        enable=True,
        test_mode=False,
        server_need_client_auth=ClientAuth.REQUIRE,
        server_key_path="/k.pem",
        server_key_password="pw",
        server_cert_path="/c.pem",
        server_auth_client=True,
        server_trust_cert_path="/ca.pem",
        client_key_path="/ck.pem",
        client_key_password="cpw",
        client_cert_path="/cc.pem",
        client_auth_server=True,
        client_trust_cert_path="/cca.pem",
    )
    # passwords stay out of repr and of the printed properties
    assert "pw" not in repr(s)
    shown = s.to_properties()
    assert shown["tls.server.keyPassword"] == "******" and shown["tls.server.mode"] == "enforcing"
    assert shown["tls.test.mode.enable"] == "false"


@pytest.mark.parametrize(
    "key, value",
    [
        ("tls.server.mode", "enforcign"),
        ("tls.server.need.client.auth", "always"),
        ("tls.test.mode.enable", "yes"),
        ("tls.enable", "1"),
    ],
)
def test_a_bad_value_names_its_key(key, value):
    with pytest.raises(PropertiesError, match=key.replace(".", r"\.")):
        parse_tls_settings({key: value})


def test_the_file_overrides_all_but_mode_enable_and_file():
    props = {"tls.server.mode": "enforcing", "tls.server.keyPath": "/from-conf.pem", "tls.bogus": "x"}
    file_props = {
        "tls.server.keyPath": "/from-file.pem",
        "tls.server.mode": "disabled",
        "tls.enable": "true",
        "tls.config.file": "/other",
    }
    s, ignored = parse_tls_settings(props, file_props, "/etc/tls.properties")
    assert s.server_key_path == "/from-file.pem"
    assert s.server_mode is TlsMode.ENFORCING and s.enable is None and s.config_file == "/etc/rocketmq/tls.properties"
    assert sorted(ignored) == sorted(
        [
            "tls.bogus",
            "/etc/tls.properties: tls.server.mode",
            "/etc/tls.properties: tls.enable",
            "/etc/tls.properties: tls.config.file",
        ]
    )


def test_outbound_tls_follows_enable_else_enforcing():
    assert TlsSettings(server_mode=TlsMode.ENFORCING).outbound_tls
    assert not TlsSettings(server_mode=TlsMode.ENFORCING, enable=False).outbound_tls
    assert TlsSettings(server_mode=TlsMode.PERMISSIVE, enable=True).outbound_tls
    assert not TlsSettings(server_mode=TlsMode.DISABLED).outbound_tls


@pytest.mark.parametrize(
    "mode, first, expected",
    [
        (TlsMode.DISABLED, 0x16, Decision.REFUSE_TLS),
        (TlsMode.DISABLED, 0x00, Decision.PLAINTEXT),
        (TlsMode.PERMISSIVE, 0x16, Decision.TLS),
        (TlsMode.PERMISSIVE, 0x00, Decision.PLAINTEXT),
        (TlsMode.PERMISSIVE, 0x01, Decision.PLAINTEXT),
        (TlsMode.ENFORCING, 0x16, Decision.TLS),
        (TlsMode.ENFORCING, 0x00, Decision.REFUSE_PLAINTEXT),
        (TlsMode.ENFORCING, ord("G"), Decision.REFUSE_PLAINTEXT),
    ],
)
def test_first_byte_decision_table(mode, first, expected):
    assert decide(mode, first) is expected


def test_split_and_config_file(tmp_path):
    tls, rest = tls_properties({"tls.server.mode": "enforcing", "listenPort": "1", "tlsX": "y"})
    assert tls == {"tls.server.mode": "enforcing"} and rest == {"listenPort": "1", "tlsX": "y"}
    f = tmp_path / "tls.properties"
    f.write_text("tls.server.need.client.auth=optional\ntls.test.mode.enable=false\n")
    s, _ = load_tls_settings({"tls.config.file": str(f)})
    assert s.server_need_client_auth is ClientAuth.OPTIONAL and not s.test_mode and s.config_file == str(f)
    with pytest.raises(PropertiesError, match="tls.config.file"):
        load_tls_settings({"tls.config.file": str(tmp_path / "missing")})


def test_broker_and_namesrv_files_take_tls_keys(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=b\nbrokerIP1=127.0.0.1\ntls.server.mode=disabled\ntls.enable=true\n")
    loaded = load_broker_config(str(conf))
    assert loaded.broker.tls.server_mode is TlsMode.DISABLED and loaded.broker.tls.outbound_tls
    assert loaded.unknown_keys == []
    assert TlsSettings() == type(loaded.broker)().tls  # another config keeps the default

    ns = tmp_path / "namesrv.properties"
    ns.write_text("listenPort=0\ntls.server.mode=enforcing\ntls.server.bogus=1\n")
    s = load_namesrv_config(str(ns))
    assert s.netty.tls.server_mode is TlsMode.ENFORCING
    assert s.unknown_keys == ["tls.server.bogus"]
    assert load_namesrv_config(None).netty.tls.server_mode is TlsMode.PERMISSIVE


def test_missing_certificate_stops_the_start(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=b\ntls.test.mode.enable=false\ntls.server.certPath={tmp_path}/no.pem\n")
    from rmq.store.config import ConfigError

    with pytest.raises(ConfigError, match="tls.server"):
        load_broker_config(str(conf))
