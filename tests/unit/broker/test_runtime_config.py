"""UPDATE_BROKER_CONFIG's checks and the broker.conf rewrite."""

from __future__ import annotations

import pytest

from rmq.broker.config import BrokerConfig
from rmq.broker.runtime_config import all_config_properties, check_update, properties_text, rewrite_properties
from rmq.store.config import ConfigError, MessageStoreConfig


def configs() -> tuple[BrokerConfig, MessageStoreConfig]:
    return BrokerConfig(brokerName="b1"), MessageStoreConfig(storePathRootDir="/tmp/x")


def test_check_update_converts_splits_and_names_bad_keys():
    bc, sc = configs()
    upd = check_update(
        bc,
        sc,
        {"fileReservedTime": "0.5", "deleteWhen": "04;16", "brokerPermission": "4", "mappedFileSizeCommitLog": "65536"},
    )
    assert upd.values == {
        "fileReservedTime": 0.5,
        "deleteWhen": "04;16",
        "brokerPermission": 4,
        "mappedFileSizeCommitLog": 65536,
    }
    assert upd.at_once == ["fileReservedTime", "deleteWhen", "brokerPermission"]
    assert upd.on_restart == ["mappedFileSizeCommitLog"]
    assert upd.text["fileReservedTime"] == "0.5"
    assert sc.fileReservedTime == 72 and bc.brokerPermission == 6, "nothing live changed"
    for props, key in (
        ({"nope": "1"}, "nope"),
        ({"deleteWhen": "24"}, "deleteWhen"),
        ({"cleanFileForciblyEnable": "yes"}, "cleanFileForciblyEnable"),
        ({"diskMaxUsedSpaceRatio": "0"}, "diskMaxUsedSpaceRatio"),
        ({"brokerRole": "LEADER"}, "brokerRole"),
    ):
        with pytest.raises(ConfigError) as e:
            check_update(bc, sc, props)
        assert str(e.value).startswith(key + ":"), e.value
    with pytest.raises(ConfigError):
        check_update(bc, sc, {})


def test_rewrite_keeps_comments_and_layout():
    text = "# broker-a\nbrokerName = broker-a\n\n! old style\ndeleteWhen: 04\ndeleteWhen=05\nx=1"
    out = rewrite_properties(text, {"deleteWhen": "04;16", "fileReservedTime": "48"})
    assert out == ("# broker-a\nbrokerName = broker-a\n\n! old style\ndeleteWhen=04;16\nx=1\nfileReservedTime=48\n")
    assert rewrite_properties("", {"a": "1"}) == "a=1\n"


def test_all_config_properties_spell_values_like_broker_conf():
    bc, sc = configs()
    props = all_config_properties(bc, sc)
    assert props["brokerRole"] == "ASYNC_MASTER" and props["fileReservedTime"] == "72"
    assert props["messageIndexEnable"] == "true" and props["brokerName"] == "b1"
    text = properties_text(props)
    assert text.splitlines() == [f"{k}={props[k]}" for k in sorted(props)]
