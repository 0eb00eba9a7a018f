"""``with_header`` / ``with_body``: a request handler that starts from its decoded request
header / JSON body.

A header that does not decode (``ProtocolError``) is answered SYSTEM_ERROR with the
decoder's message, as RocketMQ answers a request whose custom header it cannot read.
The send and pull handlers decode inline (their hot path takes no extra call).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from rmq.protocol.bodies import Body
from rmq.protocol.codes import ResponseCode
from rmq.protocol.errors import ProtocolError
from rmq.protocol.frame import RemotingCommand

__all__ = ["with_header", "with_body"]


S = TypeVar("S")
H = TypeVar("H")
R = TypeVar("R")
V = TypeVar("V")
B = TypeVar("B", bound=Body)


def with_header(
    cls: type[H],
) -> Callable[[Callable[[S, Any, RemotingCommand, H], R]], Callable[[S, Any, RemotingCommand], R | RemotingCommand]]:
    """Decorate ``handler(self, conn, request, header)``; it is registered and called as
    ``handler(self, conn, request)``."""
    decode: Callable[[dict[str, str] | None], H] = cls.from_ext_fields  # type: ignore[attr-defined]  # every header class has it; Protocol over a classmethod does not type-check type[H]
    return _decoded(lambda request: decode(request.ext_fields), str)


def with_body(
    cls: type[B], what: str, empty: bytes = b""
) -> Callable[[Callable[[S, Any, RemotingCommand, B], R]], Callable[[S, Any, RemotingCommand], R | RemotingCommand]]:
    """Decorate ``handler(self, conn, request, body)``: the request's JSON body decoded as
    ``cls`` (``empty`` stands for a missing body); one that does not decode is answered
    SYSTEM_ERROR "bad <what> body: <why>"."""
    decode = cls.from_json
    return _decoded(lambda request: decode(request.body or empty), lambda e: f"bad {what} body: {e}")


def _decoded(
    decode: Callable[[RemotingCommand], V], remark: Callable[[ProtocolError], str]
) -> Callable[[Callable[[S, Any, RemotingCommand, V], R]], Callable[[S, Any, RemotingCommand], R | RemotingCommand]]:
    def wrap(
        handler: Callable[[S, Any, RemotingCommand, V], R],
    ) -> Callable[[S, Any, RemotingCommand], R | RemotingCommand]:
        @functools.wraps(handler)
        def decoded(self: S, conn: Any, request: RemotingCommand) -> R | RemotingCommand:
            try:
                value = decode(request)
            except ProtocolError as e:
                return request.create_response(ResponseCode.SYSTEM_ERROR, remark(e))
            return handler(self, conn, request, value)

        return decoded

    return wrap
