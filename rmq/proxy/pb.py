"""The ``apache.rocketmq.v2`` messages, built at import from the committed descriptor set into a
private descriptor pool.

Why a private pool: a 5.x client's generated modules register the same symbols
(``apache.rocketmq.v2.*``) in protobuf's default pool under other file names; two definitions of
one symbol in one pool are an error. Ours never touch the default pool, so the proxy's messages
and a client's can live in one process, and the proxy works with any protobuf >= 4 runtime
(there is no generated code pinned to a protoc version).

Use: ``pb.msg("SendMessageRequest")`` is the class; ``pb.Code.OK`` etc. are the enum values.
"""

from __future__ import annotations

import functools
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, duration_pb2, message_factory, timestamp_pb2
from google.protobuf.message import Message

from rmq.proxy.proto import DESCRIPTOR_SET_FILE, PROTO_NAME

__all__ = ["PACKAGE", "SERVICE", "msg", "pool", "enum_value", "Code", "Message"]

PACKAGE = "apache.rocketmq.v2"
SERVICE = f"{PACKAGE}.MessagingService"


@functools.cache
def pool() -> descriptor_pool.DescriptorPool:
    """The private pool: Duration and Timestamp (from the runtime), then our file."""
    p = descriptor_pool.DescriptorPool()
    for mod in (duration_pb2, timestamp_pb2):
        fdp = descriptor_pb2.FileDescriptorProto()
        mod.DESCRIPTOR.CopyToProto(fdp)
        p.Add(fdp)
    fds = descriptor_pb2.FileDescriptorSet.FromString(DESCRIPTOR_SET_FILE.read_bytes())
    for fdp in fds.file:
        if fdp.name == PROTO_NAME:
            p.Add(fdp)
    return p


@functools.cache
def msg(name: str) -> type[Message]:
    """The message class ``apache.rocketmq.v2.<name>`` (nested names with dots)."""
    return message_factory.GetMessageClass(pool().FindMessageTypeByName(f"{PACKAGE}.{name}"))


def enum_value(enum: str, name: str) -> int:
    return int(pool().FindEnumTypeByName(f"{PACKAGE}.{enum}").values_by_name[name].number)


class _Enum:
    """Attribute access to one enum's values: ``Code.OK == 20000``."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, item: str) -> int:
        try:
            return enum_value(self._name, item)
        except KeyError:
            raise AttributeError(f"{self._name}.{item}") from None

    def name(self, number: int) -> str:
        d = pool().FindEnumTypeByName(f"{PACKAGE}.{self._name}").values_by_number.get(number)
        return d.name if d is not None else str(number)


Code: Any = _Enum("Code")
Permission: Any = _Enum("Permission")
MessageType: Any = _Enum("MessageType")
ClientType: Any = _Enum("ClientType")
AddressScheme: Any = _Enum("AddressScheme")
Encoding: Any = _Enum("Encoding")
DigestType: Any = _Enum("DigestType")
FilterType: Any = _Enum("FilterType")
TransactionResolution: Any = _Enum("TransactionResolution")
TransactionSource: Any = _Enum("TransactionSource")
