"""Errors raised by the remoting layer to its callers.

Malformed bytes from a peer are ``rmq.protocol.errors.ProtocolError``; they never reach a
caller of ``invoke``: the transport closes that connection instead. Everything here is
about one request's fate as seen by the side that sent it.
"""

from __future__ import annotations


class RemotingError(Exception):
    """Base of every remoting failure a caller may want to catch at once."""


class RemotingConnectError(RemotingError):
    """The TCP connection to the address could not be established (refused, timed out)."""


class RemotingTimeoutError(RemotingError):
    """No response arrived within the request's timeout; the pending entry is dropped."""


class RemotingSendRequestError(RemotingError):
    """The request could not be put on the wire (e.g. it does not encode)."""


class RemotingClosedError(RemotingError):
    """The connection (or the client) closed before the response arrived."""
