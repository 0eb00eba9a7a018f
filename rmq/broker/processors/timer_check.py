"""GET_TIMER_CHECK_POINT (60): the timer service's checkpoint as RocketMQ 5's
AdminBrokerProcessor.getTimerCheckPoint answers it (TimerCheckpoint.encode, 56 bytes), what
a slave copies (rmq/broker/slave_sync.py) so that, promoted, it resumes timer delivery from
its master's progress. Layout: rmq/broker/timer.py encode_timer_check."""

from __future__ import annotations

from typing import Any, Protocol

from rmq.protocol.codes import ResponseCode
from rmq.protocol.frame import RemotingCommand

__all__ = ["TimerCheckProcessor", "TimerCheckSource"]


class TimerCheckSource(Protocol):
    def check_body(self) -> bytes: ...


class TimerCheckProcessor:
    def __init__(self, timer: TimerCheckSource) -> None:
        self.timer = timer

    def get_timer_check_point(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        return request.create_response(ResponseCode.SUCCESS, None, body=self.timer.check_body())
