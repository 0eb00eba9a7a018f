"""How the server processes (broker, proxy) log: one format, on stderr, which the tests
and the operators' greps read."""

from __future__ import annotations

import logging
import sys

__all__ = ["start_server_logging"]


def start_server_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
