"""LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42): queue locks for orderly consumers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rmq.broker.processors.decode import with_body
from rmq.broker.seams import QueueLocks
from rmq.protocol.bodies import LockBatchRequestBody, LockBatchResponseBody, UnlockBatchRequestBody
from rmq.protocol.codes import ResponseCode
from rmq.protocol.frame import RemotingCommand


@dataclass(eq=False)
class LockProcessor:
    locks: QueueLocks

    @with_body(LockBatchRequestBody, "lock request")
    def lock_batch_mq(self, conn: Any, request: RemotingCommand, body: LockBatchRequestBody) -> RemotingCommand:
        ok = self.locks.try_lock_batch(body.consumer_group, body.mq_set, body.client_id)
        return request.create_response(ResponseCode.SUCCESS, body=LockBatchResponseBody(ok).to_json())

    @with_body(UnlockBatchRequestBody, "unlock request")
    def unlock_batch_mq(self, conn: Any, request: RemotingCommand, body: UnlockBatchRequestBody) -> RemotingCommand:
        self.locks.unlock_batch(body.consumer_group, body.mq_set, body.client_id)
        return request.create_response(ResponseCode.SUCCESS)
