"""A request's verdict: ``Allowed`` or ``Denied`` (``permissions.validate``,
``namesrv_rules.validate_namesrv``). Apart from the rules so that an account can hold its
remembered verdicts (``acl_config.Account.decisions``) without importing them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Reason", "AllowedBy", "Allowed", "Denied", "Decision"]

Reason = Literal["parse", "no_access_key", "unknown_access_key", "signature", "admin", "permission"]
AllowedBy = Literal["global_white", "account_white", "trace_topic", "no_resource", "admin", "permission"]


@dataclass(frozen=True, slots=True)
class Allowed:
    by: AllowedBy
    access_key: str | None = None


@dataclass(frozen=True, slots=True)
class Denied:
    """A refusal: 4.9.8's exception message and first stack frame, plus a metric label."""

    reason: Reason
    message: str | None
    frame: str
    access_key: str | None = None


Decision = Allowed | Denied
