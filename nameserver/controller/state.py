"""What a controller persists per broker group, and its codec.

One ``GroupRecord`` per broker group: the master, the epoch and where it began, the
epoch history, the broker ids handed out and the in-sync set (RocketMQ 5's
SyncStateSet: the members a successor may be elected from, master included). The
same dict shape is stored as one msgpack file by the embedded controller
(``controller.msgpack``) and as one JSON value per group in etcd, where operators can
read it with ``etcdctl get --prefix``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from rmq.protocol.controller import EpochRecord

__all__ = ["GroupRecord", "HISTORY_KEPT"]

HISTORY_KEPT = 64


@dataclass(slots=True)
class GroupRecord:
    cluster: str
    name: str
    epoch: int = 0
    epoch_start_offset: int = 0
    master_addr: str | None = None
    master_ha_addr: str | None = None
    ids: dict[str, int] = field(default_factory=dict)  # addr -> assigned broker id
    history: list[EpochRecord] = field(default_factory=list)
    sync_state: list[str] = field(default_factory=list)  # addrs, master first

    def to_obj(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "epoch": self.epoch,
            "epochStartOffset": self.epoch_start_offset,
            "masterAddr": self.master_addr,
            "masterHaAddr": self.master_ha_addr,
            "brokerIds": dict(self.ids),
            "history": [
                [h.epoch, h.start_offset, h.master_addr, h.reason, h.time_ms] for h in self.history[-HISTORY_KEPT:]
            ],
            "syncStateSet": list(self.sync_state),
        }

    @classmethod
    def from_obj(cls, name: str, d: dict[str, Any]) -> GroupRecord:
        """ValueError naming what is wrong: a controller must not decide from a record
        it cannot read."""
        try:
            master = d["masterAddr"]
            return cls(
                str(d["cluster"]),
                str(name),
                int(d["epoch"]),
                int(d["epochStartOffset"]),
                None if master is None else str(master),
                None if d["masterHaAddr"] is None else str(d["masterHaAddr"]),
                {str(a): int(i) for a, i in d["brokerIds"].items()},
                [EpochRecord(int(e), int(s), str(m), str(r), int(t)) for e, s, m, r, t in d["history"]],
                # version-1 files predate the persisted in-sync set: the master alone,
                # the set grows again with its next report
                [str(a) for a in d.get("syncStateSet", [master] if master else [])],
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"group {name}: bad controller record: {type(e).__name__}: {e}") from None

    def to_json(self) -> bytes:
        return json.dumps(self.to_obj(), separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def from_json(cls, name: str, raw: bytes) -> GroupRecord:
        try:
            obj = json.loads(raw)
        except ValueError as e:
            raise ValueError(f"group {name}: controller record is not JSON: {e}") from None
        if not isinstance(obj, dict):
            raise ValueError(f"group {name}: controller record is not a JSON object")
        return cls.from_obj(name, obj)
