"""Failover controller requests (sans-IO): headers and bodies spoken between brokers,
``rmq admin`` and the controller running inside a NameServer.

Codes are RocketMQ 5's: BROKER_HEARTBEAT (904), CONTROLLER_ELECT_MASTER (1002),
CONTROLLER_GET_SYNC_STATE_DATA (1006). Header field names follow RocketMQ 5's
``BrokerHeartbeatRequestHeader`` / ``ElectMasterRequestHeader`` /
``ElectMasterResponseHeader`` where it has them; what RocketMQ does not carry there is
ours and says so below. Bodies are JSON, declared like every body (``rmq.protocol.bodies``).

BROKER_HEARTBEAT (a broker, every second, to the controller NameServer):

* header ``clusterName``, ``brokerName``, ``brokerAddr``, ``brokerId`` (its id now),
  ``epoch`` (its epoch file's last epoch, 0 if none), ``maxOffset`` (CommitLog max
  offset), and ours: ``role`` (ASYNC_MASTER / SYNC_MASTER / SLAVE),
  ``epochStartOffset`` (start of that epoch; -1 if none).
* body ``{"haServerAddr": "ip:port", "slaveAckOffsets": {"<slave>": offset}}``: a
  master's view of each slave's acked CommitLog offset. A slave is named by its
  broker address (``ip:port``) or, when the master only knows that, by its broker id
  as a decimal string.
* response header (ours; RocketMQ's 904 answers nothing): ``masterAddr``,
  ``masterHaAddr``, ``masterBrokerId`` (always 0), ``masterEpoch``,
  ``epochStartOffset`` (where the group's current epoch began), ``brokerId`` (the id
  the asking broker must register with: 0 if it is the master). All absent while the
  group has no master. Also ``masterLeaseMillis`` (to the master only: how long it may
  acknowledge writes, counted from when it *sent* this heartbeat; always shorter than
  ``controllerMasterTimeout``, after which a successor may be elected),
  ``syncStateSet`` (the group's in-sync set as ``addr;addr``, master included: whom a
  successor is elected from), ``enableElectUncleanMaster`` (the controller may elect
  outside that set) and ``controllerLeaderAddr`` (the controller that decided).
* CONTROLLER_NOT_LEADER (2007): no controller leads (standby without a leader, etcd
  unreachable); ``controllerLeaderAddr`` names the leader when the answering
  controller knows one.

RMQ_FAILSAFE_CHECK (ours, 10901): master -> in-sync slave; SUCCESS means "I follow you
in that epoch and no controller answered me within a lease either"; anything else is
a refusal with the reason in the remark.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rmq.protocol import bodies as jb
from rmq.protocol.errors import ProtocolError
from rmq.protocol.headers import Header, Long, _wire

__all__ = [
    "ROLE_SLAVE",
    "MASTER_ROLES",
    "BrokerHeartbeatRequestHeader",
    "BrokerHeartbeatResponseHeader",
    "HeartbeatBody",
    "ElectMasterRequestHeader",
    "ElectMasterResponseHeader",
    "GetSyncStateDataRequestHeader",
    "FailsafeCheckRequestHeader",
    "MemberStatus",
    "EpochRecord",
    "GroupStatus",
    "encode_group_statuses",
    "decode_group_statuses",
]

ROLE_SLAVE = "SLAVE"
MASTER_ROLES = frozenset({"ASYNC_MASTER", "SYNC_MASTER"})
_ROLES = MASTER_ROLES | {ROLE_SLAVE}


@_wire(heartbeat_timeout_millis="heartbeatTimeoutMills")
@dataclass(slots=True)
class BrokerHeartbeatRequestHeader(Header):
    cluster_name: str
    broker_name: str
    broker_addr: str
    broker_id: Long
    role: str
    epoch: int = 0
    max_offset: Long = 0
    epoch_start_offset: Long = -1
    heartbeat_timeout_millis: Long | None = None  # RocketMQ 5's; not used by rmq

    def check(self) -> None:
        """ProtocolError for values no broker sends."""
        if self.role not in _ROLES:
            raise ProtocolError(f"header field role must be one of {', '.join(sorted(_ROLES))}, not {self.role!r}")
        if self.broker_id < 0 or self.epoch < 0 or self.max_offset < 0:
            raise ProtocolError("brokerId, epoch and maxOffset must not be negative")
        if not self.broker_name or not self.broker_addr or ":" not in self.broker_addr:
            raise ProtocolError(f"bad brokerName/brokerAddr {self.broker_name!r} {self.broker_addr!r}")


@_wire()
@dataclass(slots=True)
class BrokerHeartbeatResponseHeader(Header):
    master_addr: str | None = None
    master_ha_addr: str | None = None
    master_broker_id: Long | None = None
    master_epoch: int | None = None
    epoch_start_offset: Long | None = None
    broker_id: Long | None = None
    # ours, from here on
    master_lease_millis: Long | None = None
    sync_state_set: str | None = None
    enable_elect_unclean_master: bool | None = None
    controller_leader_addr: str | None = None

    def sync_state_members(self) -> list[str]:
        """The in-sync set as broker addresses (the master included)."""
        return [a for a in (self.sync_state_set or "").split(";") if a]


@_wire()
@dataclass(slots=True)
class FailsafeCheckRequestHeader(Header):
    """RMQ_FAILSAFE_CHECK (ours): a master whose lease lapsed while no controller
    leads asks each in-sync slave whether it still follows it in ``epoch`` and cannot
    reach a leading controller either."""

    broker_name: str
    master_addr: str
    epoch: int
    # the lease the master takes if every member confirms: how long a confirming
    # slave, elected later, must wait before taking writes
    lease_millis: Long | None = None


@jb.json_body(
    ("ha_server_addr", "haServerAddr", jb.STR_ONLY),
    ("slave_ack_offsets", "slaveAckOffsets", jb.map_of(jb.NON_NEGATIVE_LONG)),
)
@dataclass(slots=True)
class HeartbeatBody(jb.Body):
    ha_server_addr: str | None = None
    slave_ack_offsets: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: jb.Text | None) -> HeartbeatBody:
        """An empty or absent body is a heartbeat without HA details."""
        return cls.from_obj(jb.loads_fastjson(data)) if data else cls()


@_wire()
@dataclass(slots=True)
class ElectMasterRequestHeader(Header):
    """CONTROLLER_ELECT_MASTER (1002). brokerAddr (ours) names the broker to promote;
    without it the controller picks, and only when the master is gone."""

    broker_name: str
    cluster_name: str | None = None
    broker_id: Long | None = None
    designate_elect: bool | None = None
    broker_addr: str | None = None


@_wire()
@dataclass(slots=True)
class ElectMasterResponseHeader(Header):
    master_broker_id: Long | None = None
    master_address: str | None = None
    master_epoch: int | None = None
    epoch_start_offset: Long | None = None


@_wire()
@dataclass(slots=True)
class GetSyncStateDataRequestHeader(Header):
    """CONTROLLER_GET_SYNC_STATE_DATA (1006); brokerName (ours) narrows to one group
    (RocketMQ sends a JSON list of names in the body)."""

    broker_name: str | None = None


# ---------------------------------------------------------------- status body (1006)
@jb.json_body(
    ("addr", "addr", jb.STR, jb.REQUIRED),
    ("broker_id", "brokerId", jb.LONG, jb.REQUIRED),
    ("role", "role", jb.STR, jb.REQUIRED),
    ("epoch", "epoch", jb.INT, jb.REQUIRED),
    ("max_offset", "maxOffset", jb.LONG, jb.REQUIRED),
    ("ack_offset", "ackOffset", jb.LONG, None),
    ("in_sync", "inSync", jb.BOOL, jb.REQUIRED),
    ("alive", "alive", jb.BOOL, jb.REQUIRED),
    ("last_heartbeat_ago_ms", "lastHeartbeatAgoMs", jb.LONG, jb.REQUIRED),
)
@dataclass(slots=True)
class MemberStatus(jb.Body):
    addr: str
    broker_id: int
    role: str
    epoch: int
    max_offset: int
    ack_offset: int | None  # as the group's master last reported it
    in_sync: bool
    alive: bool
    last_heartbeat_ago_ms: int


@jb.json_body(
    ("epoch", "epoch", jb.INT, jb.REQUIRED),
    ("start_offset", "startOffset", jb.LONG, jb.REQUIRED),
    ("master_addr", "masterAddr", jb.STR, jb.REQUIRED),
    ("reason", "reason", jb.STR, jb.REQUIRED),
    ("time_ms", "timeMs", jb.LONG, jb.REQUIRED),
)
@dataclass(slots=True)
class EpochRecord(jb.Body):
    """One decision: epoch began at start_offset with master_addr, and why."""

    epoch: int
    start_offset: int
    master_addr: str
    reason: str
    time_ms: int  # wall clock


@jb.json_body(
    ("cluster", "cluster", jb.STR, jb.REQUIRED),
    ("broker_name", "brokerName", jb.STR, jb.REQUIRED),
    ("epoch", "epoch", jb.INT, jb.REQUIRED),
    ("epoch_start_offset", "epochStartOffset", jb.LONG, jb.REQUIRED),
    ("master_addr", "masterAddr", jb.STR, None),
    ("master_alive", "masterAlive", jb.BOOL, jb.REQUIRED),
    ("members", "members", jb.list_of(jb.body_of(MemberStatus)), jb.REQUIRED),
    ("history", "history", jb.list_of(jb.body_of(EpochRecord)), jb.REQUIRED),
)
@dataclass(slots=True)
class GroupStatus(jb.Body):
    cluster: str
    broker_name: str
    epoch: int
    epoch_start_offset: int
    master_addr: str | None
    master_alive: bool
    members: list[MemberStatus]
    history: list[EpochRecord]


@jb.json_body(("groups", "groups", jb.list_of(jb.body_of(GroupStatus)), jb.REQUIRED))
@dataclass(slots=True)
class _GroupStatuses(jb.Body):
    groups: list[GroupStatus]


def encode_group_statuses(groups: list[GroupStatus]) -> bytes:
    return _GroupStatuses(groups).to_json()


def decode_group_statuses(raw: bytes | None) -> list[GroupStatus]:
    try:
        return _GroupStatuses.from_json(raw or b"{}").groups
    except ProtocolError as e:
        raise ProtocolError(f"sync state data is malformed: {e}") from None
