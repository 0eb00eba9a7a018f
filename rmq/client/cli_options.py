"""Options of ``rmq produce | consume | admin`` that an environment variable may give
instead of the flag (the ACL credentials, the TLS settings): declared and read in one
way, so each names its variable in ``--help`` and a flag always wins over the variable."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

__all__ = ["add_env_option", "option_or_env"]


def add_env_option(parser: argparse.ArgumentParser, flag: str, env_name: str, help: str, **kwargs: Any) -> None:
    """``flag`` (default None: unset, so the variable applies); ``{env}`` in ``help`` is the variable."""
    parser.add_argument(flag, default=None, help=help.format(env=env_name), **kwargs)


def option_or_env(args: argparse.Namespace, dest: str, env_name: str, env: Mapping[str, str]) -> Any:
    """The flag's value, else the variable's; None when neither is set (or both are empty)."""
    return getattr(args, dest, None) or env.get(env_name) or None
