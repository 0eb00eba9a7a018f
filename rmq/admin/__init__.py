"""rmq.admin."""
