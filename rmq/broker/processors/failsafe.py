"""RMQ_FAILSAFE_CHECK (10901, rmq's own): a master whose lease is about to lapse while no
controller answers asks each in-sync slave whether it may go on (rmq/broker/master_lease.py).

SUCCESS: this broker is a slave following that master in that epoch and cannot reach a
controller either (a heartbeat round begun after the check got no SUCCESS); anything
else is refused with the reason in the remark. Registered
in controller mode only (a static broker answers REQUEST_CODE_NOT_SUPPORTED).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Protocol

from rmq.broker.processors.decode import with_header
from rmq.protocol.codes import ResponseCode
from rmq.protocol.controller import FailsafeCheckRequestHeader
from rmq.protocol.frame import RemotingCommand

__all__ = ["FailsafeWitness", "FailsafeCheckProcessor"]

log = logging.getLogger("rmq.broker.role")


class FailsafeWitness(Protocol):
    """The slave's side of the check (ControllerRole.failsafe_check)."""

    async def failsafe_check(self, h: FailsafeCheckRequestHeader) -> str | None:
        """None: confirm; else why this broker refuses."""
        ...


@dataclass(eq=False)
class FailsafeCheckProcessor:
    witness: FailsafeWitness

    def __post_init__(self) -> None:
        self._said: tuple[str, int, bool] | None = None

    @with_header(FailsafeCheckRequestHeader)
    def process(self, conn: Any, request: RemotingCommand, h: FailsafeCheckRequestHeader) -> Awaitable[RemotingCommand]:
        return self._answer(request, h)

    async def _answer(self, request: RemotingCommand, h: FailsafeCheckRequestHeader) -> RemotingCommand:
        why = await self.witness.failsafe_check(h)
        said = (h.master_addr, h.epoch, why is None)
        if said != self._said:  # once per change, not per check
            self._said = said
            if why is None:
                log.warning(
                    "failsafe: group %s epoch %d: confirmed to master %s that this slave cannot reach a controller "
                    "either (if elected, it takes writes only a lease time after its last confirmation)",
                    h.broker_name,
                    h.epoch,
                    h.master_addr,
                )
            else:
                log.warning(
                    "failsafe: group %s epoch %d: refused master %s: %s", h.broker_name, h.epoch, h.master_addr, why
                )
        if why is None:
            return request.create_response(ResponseCode.SUCCESS)
        return request.create_response(ResponseCode.ILLEGAL_OPERATION, why)
