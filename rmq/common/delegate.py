"""Methods a facade hands on to one of its parts, written once.

``get_messages = Delegate("reader", MessageReader.get_messages)`` in a class body makes
``obj.get_messages`` the bound ``obj.reader.get_messages``: the part's own method, so its
signature (names, defaults, types) is the part's, written nowhere else, and a call costs
no forwarding frame. The method is looked up on the part at each access, so a part
replaced later (or a method patched on it) is the one called.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Concatenate, Generic, ParamSpec, Self, TypeVar, overload

__all__ = ["Delegate"]

P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C")


class Delegate(Generic[C, P, R]):
    """A non-data descriptor: an instance attribute of the same name still wins."""

    def __init__(self, part: str, method: Callable[Concatenate[C, P], R]) -> None:
        self.part = part
        self.name = method.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        # the facade's name and the part's must agree, or the table would lie
        if name != self.name:
            raise TypeError(f"{owner.__name__}.{name} delegates to {self.part}.{self.name}: the names must agree")

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Self: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> Callable[P, R]: ...

    def __get__(self, obj: object | None, owner: type | None = None) -> Self | Callable[P, R]:
        if obj is None:
            return self
        bound: Callable[P, R] = getattr(getattr(obj, self.part), self.name)
        return bound

    def __repr__(self) -> str:
        return f"Delegate({self.part!r}, {self.name!r})"
