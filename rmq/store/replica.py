"""Replica append (slave side): the master's CommitLog bytes go in at the same offsets;
dispatch builds the ConsumeQueues and the index from them."""

from __future__ import annotations

import asyncio

from rmq.store.commitlog import CommitLog
from rmq.store.dispatch import ReputMessageService

__all__ = ["ReplicaAppender"]


class ReplicaAppender:
    """HAClient's face of the store: files for replicated offsets and the appends."""

    def __init__(self, commitlog: CommitLog, reput: ReputMessageService) -> None:
        self.commitlog = commitlog
        self.reput = reput

    @property
    def commitlog_empty(self) -> bool:
        """No CommitLog file at all (a new slave takes any first offset its master sends)."""
        return not self.commitlog.mfq.mapped_files

    def replica_file_ready(self, offset: int) -> bool:
        """False when replicated bytes at offset need a new CommitLog file first."""
        return self.commitlog.replica_file(offset) is not None

    async def create_replica_file(self, offset: int) -> None:
        """Create the CommitLog file for replicated offset in a worker thread."""
        cl = self.commitlog
        mf = await asyncio.get_running_loop().run_in_executor(None, cl.make_replica_file, offset)
        if cl.replica_file(offset) is not None:  # someone else made it meanwhile
            mf.close()
            return
        cl.add_replica_file(mf, offset)
        if self.reput.reput_from_offset < cl.min_offset:
            # a slave that starts mid-stream: nothing to dispatch below its first file
            self.reput.reset_offset(cl.min_offset)

    def append_replicated(self, offset: int, blocks: list[memoryview]) -> int:
        """Append a master's contiguous bytes at offset (one file); returns the new end.
        Dispatch is woken and builds ConsumeQueues and the index from them."""
        return self.commitlog.append_replica(offset, blocks)
