"""rmq: a RocketMQ 4.x compatible message broker cluster in Python."""

__version__ = "0.1.0"
