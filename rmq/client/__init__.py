"""rmq.client."""
