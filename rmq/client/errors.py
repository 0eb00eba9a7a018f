"""Errors the client raises.

* ``MQBrokerError(code, remark)``: a broker or NameServer answered with a non-success
  code (Java ``MQBrokerException``). A send that was not stored raises this, with the
  broker's response code and remark.
* ``MQClientError``: the client itself refused or could not proceed (bad argument, no
  route, not started; Java ``MQClientException``). ``code`` is a ``ResponseCode`` or
  ``ClientErrorCode`` when one applies.
* ``RemotingError`` and subclasses (re-exported from ``rmq.remoting``): the request
  did not get an answer (connect refused, timeout, connection closed).

``MQError`` is the base of the first two.
"""

from __future__ import annotations

from rmq.protocol.codes import ResponseCode
from rmq.remoting.errors import (
    RemotingClosedError,
    RemotingConnectError,
    RemotingError,
    RemotingSendRequestError,
    RemotingTimeoutError,
)

__all__ = [
    "MQError",
    "MQClientError",
    "MQBrokerError",
    "ClientErrorCode",
    "RemotingError",
    "RemotingConnectError",
    "RemotingTimeoutError",
    "RemotingSendRequestError",
    "RemotingClosedError",
]


class ClientErrorCode:
    """Java ``ClientErrorCode``: client-side failure codes (not on the wire)."""

    CONNECT_BROKER_EXCEPTION = 10001
    ACCESS_BROKER_TIMEOUT = 10002
    BROKER_NOT_EXIST_EXCEPTION = 10003
    NO_NAME_SERVER_EXCEPTION = 10004
    NOT_FOUND_TOPIC_EXCEPTION = 10005
    REQUEST_TIMEOUT_EXCEPTION = 10006
    CREATE_REPLY_MESSAGE_EXCEPTION = 10007


class MQError(Exception):
    """Base of the client's own errors."""


class MQClientError(MQError):
    """The client could not do what was asked (Java ``MQClientException``)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class MQBrokerError(MQError):
    """A broker / NameServer answer with a failure code (Java ``MQBrokerException``)."""

    def __init__(self, code: int, remark: str | None, broker_addr: str | None = None) -> None:
        self.code = code
        self.remark = remark
        self.broker_addr = broker_addr
        where = f" from {broker_addr}" if broker_addr else ""
        super().__init__(f"CODE: {code} ({ResponseCode.name_of(code)}) DESC: {remark}{where}")

    @property
    def code_name(self) -> str:
        return ResponseCode.name_of(self.code)
