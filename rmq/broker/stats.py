"""BrokerStats: counters the status line, GET_BROKER_RUNTIME_INFO and metrics read.

Per message only integer additions; rates are derived from snapshots by readers.
"""
from __future__ import annotations

import time
from collections import defaultdict

from rmq.store.results import GetMessageResult, PutMessageResult


class BrokerStats:
    def __init__(self) -> None:
        self.boot_timestamp = time.time_ns() // 1_000_000
        self.put_msgs = 0
        self.put_bytes = 0
        self.put_failures = 0
        self.get_msgs = 0
        self.get_bytes = 0
        self.put_by_topic: defaultdict[str, int] = defaultdict(int)
        self.get_by_group_topic: defaultdict[tuple[str, str], int] = defaultdict(int)

    def on_put(self, result: PutMessageResult, request) -> None:
        if result.status.stored:
            self.put_msgs += result.msg_num
            self.put_bytes += result.wrote_bytes
        else:
            self.put_failures += 1

    def on_get(self, group: str, topic: str, result: GetMessageResult) -> None:
        n = len(result.buffers)
        self.get_msgs += n
        self.get_bytes += result.buffer_total_size
        self.get_by_group_topic[(group, topic)] += n
