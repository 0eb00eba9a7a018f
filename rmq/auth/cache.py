"""A bounded memo for the per-request checks (signing order, white lists, permission verdicts).

Each memo lives on the object whose data it is derived from (an ``Account``, an
``AclSet``, an ``AclGuard``), so it is dropped exactly when that object is: a reload, a
code 50-53 write or a new cluster credential builds new accounts and a new set, and
with them empty memos. Nothing is ever invalidated by hand.
"""

from __future__ import annotations

from typing import TypeVar

__all__ = ["BoundedCache"]

K = TypeVar("K")
V = TypeVar("V")


class BoundedCache(dict[K, V]):
    """A dict that forgets everything at once when it reaches ``limit`` entries.

    Clients choose the keys (topics, groups, ext field names, addresses), so a memo must
    stay bounded however many distinct ones they send. Clearing when full costs nothing
    per hit (an LRU's bookkeeping would cost about what a hit saves) and refills with
    what is in use within a few requests. Reads are plain ``dict.get`` (C, no Python
    call on the hot path).
    """

    __slots__ = ("limit",)

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def put(self, key: K, value: V) -> V:
        if len(self) >= self.limit:
            self.clear()
        self[key] = value
        return value
