"""The admin command set's own errors (apart from base.py, so MQAdmin can raise them
without importing the command machinery that drives it)."""

from __future__ import annotations

__all__ = ["AdminError", "UsageError"]


class AdminError(Exception):
    """The command could not do what was asked; the message is the whole error line."""


class UsageError(Exception):
    """Bad flags the parser could not catch on its own (exit status 2)."""
