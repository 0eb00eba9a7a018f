"""``with_header``: a request handler that starts from its decoded request header.

A header that does not decode (``ProtocolError``) is answered SYSTEM_ERROR with the
decoder's message, as RocketMQ answers a request whose custom header it cannot read.
The send and pull handlers decode inline (their hot path takes no extra call).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from rmq.protocol.codes import ResponseCode
from rmq.protocol.errors import ProtocolError
from rmq.protocol.frame import RemotingCommand

__all__ = ["with_header"]


S = TypeVar("S")
H = TypeVar("H")
R = TypeVar("R")


def with_header(
    cls: type[H],
) -> Callable[[Callable[[S, Any, RemotingCommand, H], R]], Callable[[S, Any, RemotingCommand], R | RemotingCommand]]:
    """Decorate ``handler(self, conn, request, header)``; it is registered and called as
    ``handler(self, conn, request)``."""
    decode: Callable[[dict[str, str] | None], H] = cls.from_ext_fields  # type: ignore[attr-defined]  # every header class has it; Protocol over a classmethod does not type-check type[H]

    def wrap(
        handler: Callable[[S, Any, RemotingCommand, H], R],
    ) -> Callable[[S, Any, RemotingCommand], R | RemotingCommand]:
        @functools.wraps(handler)
        def decoded(self: S, conn: Any, request: RemotingCommand) -> R | RemotingCommand:
            try:
                header = decode(request.ext_fields)
            except ProtocolError as e:
                return request.create_response(ResponseCode.SYSTEM_ERROR, str(e))
            return handler(self, conn, request, header)

        return decoded

    return wrap
