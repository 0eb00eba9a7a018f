"""rmq's RocketMQ 5 gRPC protocol definition (``rocketmq_v2.proto``) and its compiled
descriptor set (``rocketmq_v2.binpb``); ``rmq.proxy.pb`` loads the latter."""

from __future__ import annotations

from pathlib import Path

__all__ = ["PROTO_FILE", "DESCRIPTOR_SET_FILE", "PROTO_NAME"]

HERE = Path(__file__).resolve().parent
PROTO_FILE = HERE / "rocketmq_v2.proto"
DESCRIPTOR_SET_FILE = HERE / "rocketmq_v2.binpb"
#: the file name the descriptors are registered under (in rmq.proxy's private pool)
PROTO_NAME = "rmq/proxy/rocketmq_v2.proto"
