"""rmq.common.delegate: a facade's method that is its part's."""

from __future__ import annotations

import pytest

from rmq.common.delegate import Delegate


class Part:
    def __init__(self, tag: str) -> None:
        self.tag = tag

    def read(self, what: str, n: int = 1) -> str:
        return f"{self.tag}:{what}" * n


class Facade:
    read = Delegate("part", Part.read)

    def __init__(self) -> None:
        self.part = Part("a")


def test_the_facade_calls_its_part_bound():
    f = Facade()
    assert f.read("x") == "a:x" and f.read("y", n=2) == "a:ya:y"
    assert f.read.__self__ is f.part  # the part's own bound method: no forwarding frame
    f.part = Part("b")  # looked up at each access
    assert f.read("x") == "b:x"
    assert isinstance(Facade.read, Delegate)


def test_an_instance_attribute_still_wins():
    f = Facade()
    f.read = lambda what, n=1: "patched"  # type: ignore[method-assign,assignment]
    assert f.read("x") == "patched"


def test_names_must_agree():
    # Python 3.11 wraps an error of __set_name__ in a RuntimeError; 3.12 does not
    with pytest.raises((TypeError, RuntimeError)) as ei:

        class Bad:
            fetch = Delegate("part", Part.read)

    err = ei.value if isinstance(ei.value, TypeError) else ei.value.__cause__
    assert isinstance(err, TypeError) and "names must agree" in str(err)
