"""The pure parts of nameserver.etcd: the controllerEtcd* settings, endpoint URLs, prefix range
ends, the JSON of transaction compares and ops. (The client itself is tested against real etcd
processes in tests/cluster/test_etcd_client.py.)"""

from __future__ import annotations

import pytest

from nameserver.etcd import Compare, EtcdClient, EtcdSettings, Op, endpoint_url, prefix_range_end
from rmq.common.properties import PropertiesError


def test_settings_from_properties(tmp_path):
    ca, cert, key = (tmp_path / n for n in ("ca.pem", "c.pem", "c.key"))
    for f in (ca, cert, key):
        f.write_text("x")
    s = EtcdSettings.from_properties(
        {
            "controllerEtcdEndpoints": "10.0.0.1:2379; https://10.0.0.2:2379;http://10.0.0.3:2379",
            "controllerEtcdCaFile": str(ca),
            "controllerEtcdCertFile": str(cert),
            "controllerEtcdKeyFile": str(key),
            "controllerEtcdUser": "rmq",
            "controllerEtcdPassword": "s3cret",
            "listenPort": "9876",  # not ours: not looked at
        }
    )
    assert s.endpoints == ("10.0.0.1:2379", "https://10.0.0.2:2379", "http://10.0.0.3:2379")
    assert (s.ca_file, s.cert_file, s.key_file, s.user, s.password) == (str(ca), str(cert), str(key), "rmq", "s3cret")
    assert "s3cret" not in repr(s)
    plain = EtcdSettings.from_properties({"controllerEtcdEndpoints": "a:1,b:2"})
    assert plain.endpoints == ("a:1", "b:2") and plain.ca_file is None and plain.user is None


@pytest.mark.parametrize(
    "props, key",
    [
        ({}, "controllerEtcdEndpoints"),
        ({"controllerEtcdEndpoints": " ; "}, "controllerEtcdEndpoints"),
        ({"controllerEtcdEndpoints": "host"}, "controllerEtcdEndpoints"),
        ({"controllerEtcdEndpoints": "host:99999"}, "controllerEtcdEndpoints"),
        ({"controllerEtcdEndpoints": "grpc://host:2379"}, "controllerEtcdEndpoints"),
        ({"controllerEtcdEndpoints": "h:1", "controllerEtcdCaFile": "/nonexistent/ca.pem"}, "controllerEtcdCaFile"),
        ({"controllerEtcdEndpoints": "h:1", "controllerEtcdUser": "u"}, "controllerEtcdPassword"),
        ({"controllerEtcdEndpoints": "h:1", "controllerEtcdPassword": "p"}, "controllerEtcdUser"),
    ],
)
def test_settings_errors_name_the_key(props, key):
    with pytest.raises(PropertiesError) as e:
        EtcdSettings.from_properties(props)
    assert str(e.value).startswith(f"{key}:")
    assert isinstance(e.value, ValueError)


def test_settings_cert_needs_key(tmp_path):
    cert = tmp_path / "c.pem"
    cert.write_text("x")
    with pytest.raises(PropertiesError, match="^controllerEtcdKeyFile:"):
        EtcdSettings.from_properties({"controllerEtcdEndpoints": "h:1", "controllerEtcdCertFile": str(cert)})


def test_endpoint_url():
    assert endpoint_url("127.0.0.1:2379") == "http://127.0.0.1:2379"
    assert endpoint_url("127.0.0.1:2379", tls=True) == "https://127.0.0.1:2379"
    assert endpoint_url("http://h:1/", tls=True) == "http://h:1"
    assert endpoint_url("HTTPS://h:02379") == "https://h:2379"
    assert endpoint_url("[::1]:2379") == "http://[::1]:2379"
    for bad in ("h", ":1", "h:0", "h:x", "h:1/v3", "unix://h:1"):
        with pytest.raises(ValueError):
            endpoint_url(bad)


def test_prefix_range_end():
    assert prefix_range_end(b"/rmq/") == b"/rmq0"
    assert prefix_range_end(b"a\xff") == b"b"
    assert prefix_range_end(b"\xff\xff") == b"\x00"
    assert prefix_range_end(b"") == b"\x00"


def test_txn_json():
    assert (Compare.mod_revision("k") == 7).to_json() == {
        "key": "aw==",
        "target": "MOD",
        "result": "EQUAL",
        "mod_revision": "7",
    }
    assert (Compare.create_revision(b"k") == 0).to_json()["create_revision"] == "0"
    assert (Compare.value("k") != b"v").to_json() == {
        "key": "aw==",
        "target": "VALUE",
        "result": "NOT_EQUAL",
        "value": "dg==",
    }
    assert (Compare.version("k") > 1).result == "GREATER" and (Compare.lease("k") < 5).target == "LEASE"
    assert Op.put("k", b"v", lease=12).to_json() == {"request_put": {"key": "aw==", "value": "dg==", "lease": "12"}}
    assert Op.put("k", b"v").to_json() == {"request_put": {"key": "aw==", "value": "dg=="}}
    assert Op.get("k").to_json() == {"request_range": {"key": "aw=="}}
    assert Op.delete("k").to_json() == {"request_delete_range": {"key": "aw=="}}


async def test_client_arguments():
    with pytest.raises(TypeError):
        EtcdClient("h:1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no endpoints"):
        EtcdClient([])
    with pytest.raises(ValueError, match="user and password"):
        EtcdClient(["h:1"], user="u")
    with pytest.raises(ValueError, match="CA file"):
        EtcdClient(["h:1"], ca_file="/nonexistent/ca.pem")
    async with EtcdClient(["h:1", "https://h:2"], user="u", password="pw-not-shown") as c:
        assert c.endpoints == ["h:1", "https://h:2"] and c.current_endpoint == "h:1"
        assert "pw-not-shown" not in repr(c)
