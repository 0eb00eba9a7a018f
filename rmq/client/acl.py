"""Client-side ACL: Java's ``AclClientRPCHook`` (spec 1.1-1.2).

Every request the client sends gets ``AccessKey`` and ``Signature`` (HMAC-SHA1 over the
sorted ext values and the body) added to its ext fields just before it is encoded; the
NameServer ignores them, a broker with ``aclEnable=true`` checks them.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

from rmq.auth.signing import SigningError, SigningKey, SigningOrder, sign_request
from rmq.client.cli_options import add_env_option, option_or_env
from rmq.protocol.frame import RemotingCommand

__all__ = [
    "ACCESS_KEY_ENV",
    "SECRET_KEY_ENV",
    "AclClientRPCHook",
    "SigningError",
    "add_credential_options",
    "credentials",
    "signing_hook",
]


class AclClientRPCHook:
    """A ``RemotingClient`` request hook that signs with one AccessKey / SecretKey pair."""

    __slots__ = ("access_key", "_key", "_order", "security_token")

    def __init__(self, access_key: str, secret_key: str, security_token: str | None = None) -> None:
        if not access_key:
            raise SigningError("an AccessKey is needed to sign requests")
        if not secret_key:
            # AclSigner refuses it on every request; refusing it once, up front, is clearer
            raise SigningError(
                "[10015:signature-failed] unable to calculate a request signature. error=empty secret key"
            )
        self.access_key = access_key
        # Every request is signed: the HMAC key states are made once and each header
        # class's key order is sorted once (rmq.auth.signing). Never in repr or logs.
        self._key = SigningKey(secret_key)
        self._order = SigningOrder()
        self.security_token = security_token

    def __repr__(self) -> str:
        return f"AclClientRPCHook(access_key={self.access_key!r})"

    def __call__(self, addr: str, cmd: RemotingCommand) -> None:
        # A new dict: callers may reuse an ext map (a retried request, a cached header);
        # sign_request also drops a stale Signature from a retry.
        cmd.ext_fields = sign_request(
            cmd.ext_fields, cmd.body, self.access_key, self._key, self.security_token, order=self._order
        )


def signing_hook(access_key: str | None, secret_key: str | None) -> AclClientRPCHook | None:
    """The hook for a pair of credentials, None without them. ``SigningError`` when only
    one of the two is set: a typo would otherwise surface as "No accessKey is configured"
    on every request."""
    if not access_key and not secret_key:
        return None
    if not access_key or not secret_key:
        raise SigningError("an AccessKey and a SecretKey must be given together")
    return AclClientRPCHook(access_key, secret_key)


# --------------------------------------------------------------------------- command lines
ACCESS_KEY_ENV = "RMQ_ACCESS_KEY"
SECRET_KEY_ENV = "RMQ_SECRET_KEY"


def add_credential_options(parser: argparse.ArgumentParser) -> None:
    """``--access-key`` / ``--secret-key`` for ``rmq produce | consume | admin``."""
    add_env_option(parser, "--access-key", ACCESS_KEY_ENV, "sign requests with this AccessKey (env {env})")
    add_env_option(
        parser, "--secret-key", SECRET_KEY_ENV, "the AccessKey's SecretKey (env {env}; prefer it: a flag shows in ps)"
    )


def credentials(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """The flags, else the environment variables; (None, None) when neither is set."""
    env = os.environ if env is None else env
    access_key = option_or_env(args, "access_key", ACCESS_KEY_ENV, env)
    secret_key = option_or_env(args, "secret_key", SECRET_KEY_ENV, env)
    return access_key, secret_key
