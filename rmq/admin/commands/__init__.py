"""Every ``rmq admin`` subcommand; importing this package registers them.

A new command: a ``Command`` subclass decorated with ``@register`` in one of these
modules (or a new module imported below). See ``rmq.admin.base``.
"""

# imported for their @register side effect; __all__ says so to the linters
from rmq.admin.commands import acl  # noqa: I001  (its own line: the long one below stays as it is)
from rmq.admin.commands import broker, cluster, connection, consumer, controller, ha, message, namesrv, offset, topic
from rmq.admin.commands import export, not_applicable, probe, stats, store

__all__ = ["broker", "cluster", "connection", "consumer", "controller", "ha", "message", "namesrv", "offset", "topic"]
__all__ += ["acl", "export", "not_applicable", "probe", "stats", "store"]
