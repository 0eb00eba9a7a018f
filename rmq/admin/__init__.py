"""rmq.admin: the mqadmin-style command set (``rmq admin <command> [flags]``).

Layout:

* ``base``      options (mqadmin's letters), ``Command`` + ``@register``, ``Output``,
                ``AdminError`` / ``UsageError``, ``describe_error``
* ``admin``     ``MQAdmin``: admin requests and CommandUtil lookups (Java DefaultMQAdminExt)
* ``output``    ``Table`` (mqadmin's column layouts), ``fastjson_pretty``, formatters
* ``main``      argument parsing, ``help``, the error path and exit codes
* ``commands``  one module per mqadmin package (cluster, topic, broker, ...)

Uses ``rmq.client``, ``rmq.remoting`` and ``rmq.protocol`` only.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    from rmq.admin.main import main as _main

    return _main(argv)
