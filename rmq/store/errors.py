"""Errors the store raises (statuses it returns are in rmq.store.results)."""


class StoreError(Exception):
    """The store cannot open or use its files (wrong sizes, locked, unreadable)."""


class StoreLockedError(StoreError):
    """Another process holds the store's lock file."""
