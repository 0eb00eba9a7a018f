"""innerClientAuthenticationCredentials in broker.conf and in the NameServer's config (with
the NameServer's aclEnable): parsed in both forms, a bad value stops the load naming the
key and not the value, and GET_BROKER_CONFIG never shows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from nameserver.config import load_namesrv_config
from rmq.auth.credentials import Credential
from rmq.broker.config import load_broker_config
from rmq.broker.runtime_config import all_config_properties
from rmq.common.properties import PropertiesError
from rmq.store.config import ConfigError

JSON = '{"accessKey":"clusterAK01","secretKey":"clusterSecret01"}'
CRED = Credential("clusterAK01", "clusterSecret01")


def _broker(tmp_path: Path, line: str):
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=b1\nstorePathRootDir={tmp_path}/store\n{line}\n")
    return load_broker_config(str(conf))


@pytest.mark.parametrize("value", [JSON, "clusterAK01:clusterSecret01"])
def test_broker_conf_takes_both_forms(tmp_path, value):
    loaded = _broker(tmp_path, f"innerClientAuthenticationCredentials={value}")
    assert loaded.broker.inner_credential == CRED
    assert "innerClientAuthenticationCredentials" not in loaded.unknown_keys
    # nowhere GET_BROKER_CONFIG (not admin-only) or a repr could show it
    props = all_config_properties(loaded.broker, loaded.store)
    assert "innerClientAuthenticationCredentials" not in props
    assert not any("clusterSecret01" in v for v in props.values())
    assert "clusterSecret01" not in repr(loaded.broker)


def test_broker_without_the_key_signs_nothing(tmp_path):
    assert _broker(tmp_path, "aclEnable=true").broker.inner_credential is None


def test_bad_broker_value_names_the_key_not_the_value(tmp_path):
    with pytest.raises(ConfigError) as e:
        _broker(tmp_path, "innerClientAuthenticationCredentials=clusterAK01:short")
    assert "innerClientAuthenticationCredentials" in str(e.value) and "short" not in str(e.value).split(":", 1)[1]


def test_namesrv_acl_keys(tmp_path):
    f = tmp_path / "namesrv.properties"
    f.write_text(f"aclEnable=true\nrocketmqHome={tmp_path}\ninnerClientAuthenticationCredentials={JSON}\n")
    s = load_namesrv_config(str(f))
    assert s.namesrv.aclEnable and s.namesrv.rocketmqHome == str(tmp_path)
    assert s.namesrv.inner_credential == CRED and s.unknown_keys == []
    assert "clusterSecret01" not in repr(s)
    f.write_text("innerClientAuthenticationCredentials=not-a-pair\n")
    with pytest.raises(PropertiesError, match="^innerClientAuthenticationCredentials:"):
        load_namesrv_config(str(f))
    assert load_namesrv_config(None).namesrv.aclEnable is False
