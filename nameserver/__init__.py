"""The NameServer: routes, broker registry, failover controller."""
