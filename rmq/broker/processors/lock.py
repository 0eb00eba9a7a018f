"""LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42): queue locks for orderly consumers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rmq.broker.seams import QueueLocks
from rmq.protocol.bodies import LockBatchRequestBody, LockBatchResponseBody, UnlockBatchRequestBody
from rmq.protocol.codes import ResponseCode
from rmq.protocol.errors import ProtocolError
from rmq.protocol.frame import RemotingCommand


@dataclass(eq=False)
class LockProcessor:
    locks: QueueLocks

    def lock_batch_mq(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        try:
            body = LockBatchRequestBody.from_json(request.body or b"")
        except ProtocolError as e:
            return request.create_response(ResponseCode.SYSTEM_ERROR, f"bad lock request body: {e}")
        ok = self.locks.try_lock_batch(body.consumer_group, body.mq_set, body.client_id)
        return request.create_response(ResponseCode.SUCCESS, body=LockBatchResponseBody(ok).to_json())

    def unlock_batch_mq(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        try:
            body = UnlockBatchRequestBody.from_json(request.body or b"")
        except ProtocolError as e:
            return request.create_response(ResponseCode.SYSTEM_ERROR, f"bad unlock request body: {e}")
        self.locks.unlock_batch(body.consumer_group, body.mq_set, body.client_id)
        return request.create_response(ResponseCode.SUCCESS)
