"""Every ``rmq admin`` subcommand; importing this package registers them.

A new command: a ``Command`` subclass decorated with ``@register`` in one of these
modules (or a new module imported below). See ``rmq.admin.base``.
"""
from rmq.admin.commands import (broker, cluster, connection, consumer, controller,  # noqa: F401
                                ha, message, namesrv, offset, topic)
