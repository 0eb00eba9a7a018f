"""The broker's configuration at run time: UPDATE_BROKER_CONFIG (25), GET_BROKER_CONFIG (26).

RocketMQ's Configuration object sets every key it is given on the live config beans,
whether or not the running broker reads it again, and writes all its configs over the
file given with ``-c``. Here:

* every key is checked first with the parser broker.conf goes through (type, range,
  cross-key rules); an unknown key or a bad value rejects the whole update, the error
  naming the key;
* keys the running broker reads at use time (``RUNTIME_KEYS``) take effect at once;
  the others are written to the file only and take effect at the next start (the
  answer's remark names them), so the live view never claims what is not in force;
* the file given with ``-c`` keeps its comments and layout: changed keys are rewritten
  in place, new ones appended (atomic replace).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from rmq.broker.config import BrokerConfig, apply_broker_properties
from rmq.common.properties import ConfigUpdate, properties_text, public_properties, rewrite_properties
from rmq.common.properties import format_value as _fmt
from rmq.store.config import ConfigError, MessageStoreConfig

__all__ = [
    "RUNTIME_KEYS",
    "ConfigUpdate",
    "all_config_properties",
    "properties_text",
    "check_update",
    "rewrite_properties",
]

#: Keys whose new value the running broker uses at once (each is read where it is used).
RUNTIME_KEYS = frozenset(
    {
        # BrokerConfig
        "brokerPermission",
        "autoCreateTopicEnable",
        "autoCreateSubscriptionGroup",
        "longPollingEnable",
        "shortPollingTimeMills",
        "slaveReadEnable",
        "notifyConsumerIdsChangedEnable",
        "rejectTransactionMessage",
        "traceOn",
        "transactionTimeOut",
        "transactionCheckMax",
        "transactionCheckInterval",
        # MessageStoreConfig: retention and disk watermarks (read on every cleanup run)
        "fileReservedTime",
        "deleteWhen",
        "diskMaxUsedSpaceRatio",
        "diskSpaceWarningLevelRatio",
        "diskSpaceCleanForciblyRatio",
        "cleanFileForciblyEnable",
        "deleteFileBatchMax",
        "cleanResourceInterval",
        "deleteCommitLogFilesInterval",
        # ... pulls, queries, flushing
        "maxTransferBytesOnMessageInMemory",
        "maxTransferCountOnMessageInMemory",
        "maxTransferBytesOnMessageInDisk",
        "maxTransferCountOnMessageInDisk",
        "offsetCheckInSlave",
        "defaultQueryMaxNum",
        "maxMsgsNumBatch",
        "syncFlushTimeout",
        "flushIntervalCommitLog",
        "flushCommitLogLeastPages",
        "flushCommitLogThoroughInterval",
        "flushIntervalConsumeQueue",
        "flushConsumeQueueLeastPages",
        "flushConsumeQueueThoroughInterval",
    }
)


def all_config_properties(bc: BrokerConfig, sc: MessageStoreConfig) -> dict[str, str]:
    """Every key of both config objects with its value as broker.conf would spell it,
    except secrets (fields with ``metadata={"secret": True}``): GET_BROKER_CONFIG is not
    admin-only."""
    out = public_properties((bc, sc))
    # NettyClientConfig.useTLS, which 4.9.8 lists too (mqadmin exportConfigs reads it): whether
    # the broker's own links (registration, slave sync, HA) are TLS
    out["useTLS"] = _fmt(bc.tls.outbound_tls)
    return out


def check_update(bc: BrokerConfig, sc: MessageStoreConfig, props: Mapping[str, str]) -> ConfigUpdate:
    """Convert and validate props against copies of the live configs; ConfigError
    names the first bad key. Nothing live changes here."""
    if not props:
        raise ConfigError("no key=value given")
    nb = dataclasses.replace(bc)
    ns = dataclasses.replace(sc)
    unknown = apply_broker_properties(nb, ns, props)
    if unknown:
        raise ConfigError(f"{unknown[0]}: not a broker config key")
    nb.validate_with(ns)
    ns.validate()
    values = {key: getattr(nb, key) if hasattr(nb, key) else getattr(ns, key) for key in props}
    return ConfigUpdate.split(values, RUNTIME_KEYS)
