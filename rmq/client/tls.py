"""``--tls`` / ``--tls-config`` for ``rmq produce | consume | admin`` (Java's ``-Dtls.enable=true``
and ``-Dtls.config.file=...``).

``--tls`` (or ``RMQ_TLS=1``) makes every connection TLS; as RocketMQ's Java client in its
default test mode, any server certificate is accepted. ``--tls-config FILE`` (or
``RMQ_TLS_CONFIG``) reads RocketMQ's tls.properties for the ``tls.client.*`` keys
(``tls.test.mode.enable=false``, ``tls.client.authServer``, ``tls.client.trustCertPath``,
``tls.client.certPath``/``keyPath``/``keyPassword``) and implies ``--tls``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

from rmq.client.cli_options import add_env_option, option_or_env
from rmq.client.errors import MQClientError
from rmq.common.properties import PropertiesError
from rmq.remoting.tls import TlsSettings, client_context, load_tls_settings

__all__ = ["TLS_ENV", "TLS_CONFIG_ENV", "add_tls_options", "tls_options"]

TLS_ENV = "RMQ_TLS"
TLS_CONFIG_ENV = "RMQ_TLS_CONFIG"


def add_tls_options(parser: argparse.ArgumentParser) -> None:
    add_env_option(
        parser,
        "--tls",
        TLS_ENV,
        "connect with TLS, trusting any server certificate unless --tls-config says otherwise (env {env}=1)",
        action="store_true",
    )
    add_env_option(
        parser,
        "--tls-config",
        TLS_CONFIG_ENV,
        "RocketMQ tls.properties with the tls.client.* keys; implies --tls (env {env})",
        metavar="FILE",
    )


def tls_options(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> tuple[bool, TlsSettings]:
    """(use TLS, the client TLS settings) from the flags, else the environment variables.
    ``MQClientError`` when the file, or a certificate it names, cannot be read or has a bad
    value (checked here: the tools report it as one line)."""
    env = os.environ if env is None else env
    path = option_or_env(args, "tls_config", TLS_CONFIG_ENV, env)
    flag = getattr(args, "tls", None) or env.get(TLS_ENV, "").strip().lower() in ("1", "true", "yes")
    if path is None:
        return bool(flag), TlsSettings()
    try:
        settings, _ = load_tls_settings({"tls.config.file": path})
        client_context(settings)
    except PropertiesError as e:
        raise MQClientError(f"--tls-config {path}: {e}") from None
    return True, settings
