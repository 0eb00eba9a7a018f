"""Write CommitLog files straight from the record codec, as the broker lays them out.

For tests that need records a broker would not write (PREPARED/ROLLBACK transaction
records, torn or damaged ones, look-alike records inside bodies) and for the benchmark's
gigabyte of CommitLog. Queue offsets are assigned as the broker assigns them (per
topic-queue; PREPARED/ROLLBACK records get 0 and do not advance it), a record never
crosses a file (BLANK + the next file when record + 8 bytes do not fit), and files are
full-size with zeros after the data, as preallocated files are.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from rmq.protocol.message import SysFlag, encode_blank, encode_record, properties_to_string

STORE_HOST = bytes([127, 0, 0, 1]) + (10911).to_bytes(4, "big")
BORN_HOST = bytes([127, 0, 0, 1]) + (50000).to_bytes(4, "big")


@dataclass
class Written:
    """One record as written: where, and what a ConsumeQueue unit for it holds."""

    topic: str
    queue_id: int
    queue_offset: int
    phys: int
    size: int
    sys_flag: int
    properties: dict[str, str]
    store_timestamp: int


@dataclass
class CommitLogWriter:
    directory: str
    file_size: int
    start_offset: int = 0  # a multiple of file_size (older files deleted)
    queue_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    written: list[Written] = field(default_factory=list)
    keep: bool = True  # keep `written` (the benchmark does not)

    def __post_init__(self) -> None:
        os.makedirs(self.directory, exist_ok=True)
        self._f = None
        self._file_start = self.start_offset - self.file_size
        self._pos = self.file_size  # no file open yet: the first append rolls

    @property
    def offset(self) -> int:
        """Absolute offset of the next record."""
        return self._file_start + self._pos

    def _roll(self) -> None:
        if self._f is not None:
            if self._pos < self.file_size:
                self._f.write(encode_blank(self.file_size - self._pos))
            self._f.truncate(self.file_size)
            self._f.close()
        self._file_start += self.file_size
        self._pos = 0
        self._f = open(os.path.join(self.directory, f"{self._file_start:020d}"), "wb", buffering=8 << 20)

    def append(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        properties: dict[str, str],
        *,
        sys_flag: int = 0,
        store_timestamp: int = 1_700_000_000_000,
        born_timestamp: int | None = None,
        flag: int = 0,
        queue_offset: int | None = None,
    ) -> Written:
        props = properties_to_string(properties).encode("utf-8")
        tran = sys_flag & 0xC
        key = (topic, queue_id)
        if queue_offset is None:
            if tran in (SysFlag.TRANSACTION_PREPARED_TYPE, SysFlag.TRANSACTION_ROLLBACK_TYPE):
                queue_offset = 0
            else:
                queue_offset = self.queue_offsets.get(key, 0)
                self.queue_offsets[key] = queue_offset + 1
        size = 91 + len(body) + len(topic.encode("utf-8")) + len(props)
        if self._f is None or self._pos + size + 8 > self.file_size:
            self._roll()
        phys = self.offset
        rec = encode_record(
            topic=topic.encode("utf-8"),
            body=body,
            properties=props,
            queue_id=queue_id,
            flag=flag,
            queue_offset=queue_offset,
            physical_offset=phys,
            sys_flag=sys_flag,
            born_timestamp=store_timestamp - 3 if born_timestamp is None else born_timestamp,
            born_host=BORN_HOST,
            store_timestamp=store_timestamp,
            store_host=STORE_HOST,
        )
        assert len(rec) == size
        self._f.write(rec)
        self._pos += size
        w = Written(topic, queue_id, queue_offset, phys, size, sys_flag, properties, store_timestamp)
        if self.keep:
            self.written.append(w)
        return w

    def append_raw(self, data: bytes) -> int:
        """Bytes as they are (a damaged record, garbage); returns their offset."""
        if self._f is None:
            self._roll()
        at = self.offset
        self._f.write(data)
        self._pos += len(data)
        return at

    def close(self, fill: bool = True, blank: bool = False) -> None:
        """End the last file: full size with zeros after the data (unless fill is
        False); with blank, a BLANK record after the data as if the file had rolled."""
        if self._f is not None:
            if blank and self._pos + 8 <= self.file_size:
                self._f.write(encode_blank(self.file_size - self._pos))
            if fill:
                self._f.truncate(self.file_size)
            self._f.close()
            self._f = None
