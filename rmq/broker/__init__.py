"""rmq.broker."""
