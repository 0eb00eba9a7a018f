"""The NameServer's configuration at run time: GET_NAMESRV_CONFIG (319) and
UPDATE_NAMESRV_CONFIG (318), over one ``NamesrvSettings``.

RocketMQ 4.9.8's Configuration lists every key of NamesrvConfig and NettyServerConfig,
and an update sets whatever keys it is given on those objects (unknown ones silently
dropped) and writes all its configs over ``configStorePath``; keys of the black list
(``configBlackList``, ``configStorePath``, ``kvConfigPath``, ``rocketmqHome`` and those
``configBlackList`` names) are refused with NO_PERMISSION. Here:

* ``config_properties`` lists NamesrvConfig, NettyServerConfig and (when it runs here)
  the controller's keys, never a secret (fields with ``metadata={"secret": True}``);
* ``check_update`` refuses a black-listed key (NO_PERMISSION, "Can not update config in
  black list: KEY"), a secret, an unknown key or a bad value (the error names the key)
  before anything changes; the whole update is checked against copies first;
* keys the running NameServer reads at use time (``RUNTIME_KEYS``) take effect at once;
  the others are written to the file only and take effect at the next start, so the
  live view never claims what is not in force -- and with no file to write to (started
  without ``-c``) such a key is refused;
* the file keeps its comments and layout (``rewrite_properties``; atomic replace).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from nameserver.config import NamesrvSettings
from rmq.common.properties import ConfigUpdate, PropertiesError, apply_properties, format_value, public_properties

__all__ = [
    "ALWAYS_BLACK_LISTED",
    "RUNTIME_KEYS",
    "ConfigRefused",
    "black_list",
    "config_properties",
    "check_update",
    "apply_update",
]

#: DefaultRequestProcessor.initConfigBlackList adds these whatever configBlackList says.
ALWAYS_BLACK_LISTED = ("configBlackList", "configStorePath", "kvConfigPath", "rocketmqHome")

#: Keys the running NameServer reads where it uses them (route answers, the expiry scan,
#: logging), so a new value takes effect at once.
RUNTIME_KEYS = frozenset(
    {
        "orderMessageEnable",
        "scanNotActiveBrokerInterval",
        "brokerExpiredTimeMillis",
        "acceptStandardJsonOnly",
        "logLevel",
        "productEnvName",
    }
)


class ConfigRefused(Exception):
    """An update refused as a whole; ``no_permission``: a black-listed or secret key
    (NO_PERMISSION, as 4.9.8), else a bad key or value (SYSTEM_ERROR)."""

    def __init__(self, message: str, *, no_permission: bool = False) -> None:
        super().__init__(message)
        self.no_permission = no_permission


def black_list(settings: NamesrvSettings) -> set[str]:
    keys = set(ALWAYS_BLACK_LISTED)
    keys.update(k.strip() for k in settings.namesrv.configBlackList.split(";") if k.strip())
    return keys


def _secrets(settings: NamesrvSettings) -> set[str]:
    return {f.name for o in settings.objects() for f in dataclasses.fields(o) if f.metadata.get("secret")}


def config_properties(
    settings: NamesrvSettings,
    *,
    listen_port: int | None = None,
    kv_path: str | None = None,
    controller: bool | None = None,
) -> dict[str, str]:
    """Every non-secret key with its value as a properties file spells it: NamesrvConfig,
    NettyServerConfig, ``enableControllerInNamesrv`` and, when the controller runs here,
    its keys. ``listen_port`` / ``kv_path`` / ``controller``: what is actually in use (a
    bound port 0, the default KV file, a controller started by the caller)."""
    running = settings.controller.enableControllerInNamesrv if controller is None else controller
    objects: list[Any] = [settings.namesrv, settings.netty]
    if running:
        objects.append(settings.controller)
    out = public_properties(objects)
    out["enableControllerInNamesrv"] = format_value(running)
    if listen_port is not None:
        out["listenPort"] = str(listen_port)
    if kv_path is not None:
        out["kvConfigPath"] = kv_path
    return out


def check_update(settings: NamesrvSettings, props: Mapping[str, str]) -> ConfigUpdate:
    """Convert and validate ``props`` against copies of the live configs; nothing live
    changes here. ``ConfigRefused`` names the first key refused."""
    if not props:
        raise ConfigRefused("no key=value given")
    blocked = black_list(settings)
    secrets = _secrets(settings)
    for key in props:
        if key in blocked:
            raise ConfigRefused(f"Can not update config in black list: {key}", no_permission=True)
        if key in secrets:
            raise ConfigRefused(f"{key}: a secret, not settable remotely", no_permission=True)
    copy = dataclasses.replace(
        settings,
        namesrv=dataclasses.replace(settings.namesrv),
        netty=dataclasses.replace(settings.netty),
        controller=dataclasses.replace(settings.controller),
    )
    owners = {f.name: obj for obj in reversed(copy.objects()) for f in dataclasses.fields(obj)}
    for key in props:
        if key not in owners:
            raise ConfigRefused(f"{key}: not a NameServer config key")
    try:
        for obj in copy.objects():
            apply_properties(obj, {k: v for k, v in props.items() if owners[k] is obj})
        copy.validate()
    except PropertiesError as e:
        raise ConfigRefused(str(e)) from None
    update = ConfigUpdate.split({k: getattr(owners[k], k) for k in props}, RUNTIME_KEYS)
    if update.on_restart and not settings.namesrv.configStorePath:
        raise ConfigRefused(
            f"{update.on_restart[0]}: takes effect only at a restart, and this NameServer was started "
            "without a config file (-c) to write it to"
        )
    return update


def apply_update(settings: NamesrvSettings, update: ConfigUpdate) -> None:
    """Set the keys that take effect at once on the live config objects."""
    owners = {f.name: obj for obj in reversed(settings.objects()) for f in dataclasses.fields(obj)}
    for key in update.at_once:
        setattr(owners[key], key, update.values[key])
