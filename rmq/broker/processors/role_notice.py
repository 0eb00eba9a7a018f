"""NOTIFY_BROKER_ROLE_CHANGED (1008, oneway; RocketMQ 5's): the controller decided something
for this broker's group. The broker heartbeats at once and learns the decision from that
answer; the notice itself decides nothing (a forged one costs a heartbeat). Registered in
controller mode only."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rmq.protocol.frame import RemotingCommand

__all__ = ["RoleChangeNoticeProcessor"]


@dataclass(eq=False)
class RoleChangeNoticeProcessor:
    heartbeat_now: Callable[[], None]

    def process(self, conn: Any, request: RemotingCommand) -> None:
        self.heartbeat_now()
