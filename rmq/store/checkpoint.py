"""StoreCheckpoint: the 4 KiB `checkpoint` file (spec 4.4)."""

from __future__ import annotations

import mmap
import os
import struct

_LONGS = struct.Struct(">qqqqq")
FILE_SIZE = 4096


class StoreCheckpoint:
    """physicMsgTimestamp @0, logicsMsgTimestamp @8, indexMsgTimestamp @16 (+5.x fields).

    Values live in memory and reach the mapping on flush(), as in RocketMQ, so a crash
    leaves the last flushed (older, hence safe) timestamps for abnormal recovery.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        existed = os.path.exists(path)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(self._fd).st_size < FILE_SIZE:
            os.posix_fallocate(self._fd, 0, FILE_SIZE)
        self._mm = mmap.mmap(self._fd, FILE_SIZE)
        self.physic_msg_timestamp: int
        self.logics_msg_timestamp: int
        self.index_msg_timestamp: int
        self.master_flushed_offset: int
        self.confirm_phy_offset: int
        if existed:
            (
                self.physic_msg_timestamp,
                self.logics_msg_timestamp,
                self.index_msg_timestamp,
                self.master_flushed_offset,
                self.confirm_phy_offset,
            ) = _LONGS.unpack_from(self._mm, 0)
        else:
            self.physic_msg_timestamp = 0
            self.logics_msg_timestamp = 0
            self.index_msg_timestamp = 0
            self.master_flushed_offset = 0
            self.confirm_phy_offset = 0

    def min_timestamp(self) -> int:
        """min(physic, logics) - 3 s, floored at 0: where abnormal recovery may start."""
        m = min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000
        return max(m, 0)

    def min_timestamp_index(self) -> int:
        return min(self.min_timestamp(), self.index_msg_timestamp)

    def write(self) -> None:
        """Copy the values into the mapping (cheap; loop thread)."""
        _LONGS.pack_into(
            self._mm,
            0,
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_phy_offset,
        )

    def sync(self) -> None:
        """fdatasync (blocking; call from a flush thread after write())."""
        os.fdatasync(self._fd)

    def flush(self) -> None:
        self.write()
        self.sync()

    def close(self) -> None:
        try:
            self._mm.close()
        finally:
            os.close(self._fd)
