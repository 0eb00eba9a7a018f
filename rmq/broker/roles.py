"""The one role-change routine (RocketMQ's changeSpecialServiceStatus with changeToMaster /
changeToSlave): which services run on a master and which on a slave.

Master only: the HA service (slaves connect to it; a SYNC_MASTER's puts wait for an ack),
delayed-message delivery (schedule), the transaction check, and ``master_services``
(the POP revive loop, timer-message delivery). Slave only: the HA client and
the metadata copy from the master (slave sync; its loop runs on every broker that may be a
slave and copies only while the store is a SLAVE). The store's role is switched through
the store itself (``set_role`` / ``switch_to_slave``), which also lifts or sets the
dispatch limit.

Static roles call ``start_static`` once; controller mode (rmq/broker/controller_role.py)
decides the role and calls ``change_to_master`` / ``step_down`` / ``change_to_slave``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from ha.client import HAClient
from ha.service import HAService
from rmq.broker.config import BrokerConfig, ha_address
from rmq.broker.schedule import ScheduleMessageService
from rmq.broker.slave_sync import SlaveSynchronize
from rmq.broker.transaction import TransactionalMessageService
from rmq.remoting.tls import outbound_context
from rmq.runtime.service import TaskSet
from rmq.store.config import BrokerRole, MessageStoreConfig
from rmq.store.message_store import MessageStore

__all__ = ["ReplicationHooks", "RoleServices"]

log = logging.getLogger("rmq.broker.roles")


class MasterService(Protocol):
    """A loop that runs only while this broker is a master (rmq.runtime.service.ServiceLoop)."""

    def start(self) -> None: ...

    async def stop(self, cancel: bool = False) -> None: ...


class ReplicationHooks(Protocol):
    """What controller mode adds to replication: the epoch history in the handshake
    (rmq/broker/controller_role.py's FailoverEpochs). Static roles have none."""

    def epoch_and_start(self) -> tuple[int, int]: ...

    def ha_service_options(self) -> dict[str, Any]: ...

    def ha_client_options(self) -> dict[str, Any]: ...


@dataclass(eq=False)
class RoleServices:
    broker_config: BrokerConfig
    store_config: MessageStoreConfig
    store: MessageStore
    listen_host: str
    schedule: ScheduleMessageService
    transactions: TransactionalMessageService
    slave_sync: SlaveSynchronize
    replication: ReplicationHooks | None = None
    master_services: list[MasterService] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Replication: the master's HAService or the slave's HAClient (None otherwise).
        self.ha_service: HAService | None = None
        self.ha_client: HAClient | None = None
        # the master's HA address as the NameServers answer it (static slaves)
        self.ha_server_addr = ""
        # HA handshakes refused for want of the cluster credential, by reason: kept
        # here, across HA services, for rocketmq_auth_failures_total
        self.ha_auth_failures: dict[str, int] = {}
        self._tasks = TaskSet(log)

    # ------------------------------------------------------------------ the master's address
    @property
    def master_addr(self) -> str | None:
        """The master this slave copies metadata from (None on a master)."""
        return self.slave_sync.master_addr

    def on_register_result(self, master_addr: str | None, ha_server_addr: str | None) -> None:
        """A NameServer's answer to a static slave's registration names its master."""
        if self.replication is not None or self.store_config.brokerRole != BrokerRole.SLAVE:
            return  # (in controller mode the controller's answer names the master)
        if master_addr:
            self.slave_sync.master_addr = master_addr
        if ha_server_addr:
            self.ha_server_addr = ha_server_addr
            # RocketMQ: the NameServer's answer only when haMasterAddress is unset
            if self.ha_client is not None and not self.store_config.haMasterAddress:
                self.ha_client.update_master_address(ha_server_addr)

    # ------------------------------------------------------------------ replication
    def epoch(self) -> tuple[int, int]:
        """(epoch, epoch start offset); (0, -1) without epochs (static roles)."""
        r = self.replication
        return r.epoch_and_start() if r is not None else (0, -1)

    def _ha_peer(self) -> dict[str, Any]:
        """What both ends of the HA link are told about this broker (ha.peer.HAPeer): its
        cluster and name, its epoch, the inner credential that signs the handshake."""
        bc = self.broker_config
        return {
            "cluster": bc.brokerClusterName,
            "broker_name": bc.brokerName,
            "epoch_provider": self.epoch,
            "credential": bc.inner_credential,
        }

    async def start_ha_service(self) -> HAService:
        """Master: accept slaves on haListenPort (idempotent). A SYNC_MASTER's puts then
        wait for a slave's ack."""
        svc = self.ha_service
        if svc is None:
            opts = self.replication.ha_service_options() if self.replication is not None else {}
            svc = HAService(
                self.store,
                host=self.listen_host,
                port=self.store_config.haListenPort,
                auth_failures=self.ha_auth_failures,
                tls=self.broker_config.tls,
                **self._ha_peer(),
                **opts,
            )
            self.ha_service = svc
        await svc.start()
        self.store_config.haListenPort = svc.port
        if self.store_config.brokerRole == BrokerRole.SYNC_MASTER:
            self.store.replica_waiter = svc.replica_waiter
        return svc

    async def stop_ha_service(self) -> None:
        svc = self.ha_service
        if svc is None:
            return
        if self.store.replica_waiter == svc.replica_waiter:
            self.store.replica_waiter = None
        self.ha_service = None
        await svc.stop()

    async def start_ha_client(self, master_ha_addr: str | None = None) -> HAClient:
        """Slave: replicate from the master (haMasterAddress, else the NameServer's
        answer); idempotent."""
        client = self.ha_client
        if client is None:
            bc = self.broker_config
            opts = self.replication.ha_client_options() if self.replication is not None else {}
            client = HAClient(
                self.store, broker_id=bc.brokerId, ssl=outbound_context(bc.tls), **self._ha_peer(), **opts
            )
            self.ha_client = client
        addr = master_ha_addr or self.store_config.haMasterAddress or self.ha_server_addr
        if addr:
            client.update_master_address(addr)
        await client.start()
        return client

    async def stop_ha_client(self) -> None:
        client = self.ha_client
        if client is None:
            return
        self.ha_client = None
        await client.stop()

    def ha_runtime_info(self) -> dict[str, Any]:
        """GET_BROKER_HA_STATUS: RocketMQ 5.x HARuntimeInfo plus role, epoch and id."""
        sc = self.store_config
        role = sc.brokerRole
        if self.ha_service is not None:
            info = self.ha_service.runtime_info()
        elif self.ha_client is not None:
            info = self.ha_client.runtime_info()
        else:
            info = {
                "master": role != BrokerRole.SLAVE,
                "inSyncSlaveNums": 0,
                "haConnectionInfo": [],
                "haClientRuntimeInfo": {},
            }
        st = self.store
        info["masterCommitLogMaxOffset"] = info.get("masterCommitLogMaxOffset") or (
            st.max_phy_offset if role != BrokerRole.SLAVE else 0
        )
        epoch, start = self.epoch()
        bc = self.broker_config
        info.update(
            {
                "brokerRole": role.value,
                "brokerName": bc.brokerName,
                "brokerId": bc.brokerId,
                "epoch": epoch,
                "haServerAddr": ha_address(bc, sc) if self.ha_service is not None else "",
                "epochStartOffset": start,
                "commitLogMaxOffset": st.max_phy_offset,
                "dispatchBehindBytes": st.dispatch_behind_bytes,
            }
        )
        return info

    # ------------------------------------------------------------------ the routine
    async def change_special_service_status(self, should_start: bool) -> None:
        """Master-only services on or off (idempotent): delayed delivery, transaction check."""
        if should_start:
            self.schedule.start()
            self.transactions.check_service.start()
            for svc in self.master_services:
                svc.start()
        else:
            await self.schedule.stop()
            await self.transactions.check_service.stop()
            for svc in self.master_services:
                await svc.stop()

    async def start_static(self) -> None:
        """Static roles (brokerRole from broker.conf), at start."""
        if self.store_config.brokerRole != BrokerRole.SLAVE:
            await self.change_special_service_status(True)
            await self.start_ha_service()
        else:
            await self.start_ha_client()

    async def change_to_master(self, role: BrokerRole, *, drop_slaves: bool = False) -> HAService:
        """Lead as role (the store has prepared to lead): id 0, HA service, the replica
        wait of a SYNC_MASTER installed before writes start, writes on, master services on."""
        self.broker_config.brokerId = 0
        self.slave_sync.master_addr = None
        svc = await self.start_ha_service()
        if drop_slaves:
            svc.drop_slaves()  # they re-handshake and learn the new epoch
        if role == BrokerRole.SYNC_MASTER:
            # a SYNC put never goes unreplicated silently
            self.store.replica_waiter = svc.replica_waiter
        self.store.set_role(role)
        await self.change_special_service_status(True)
        return svc

    async def step_down(self) -> None:
        """A master stops leading: writes stop first (puts waiting for a slave are answered
        FLUSH_SLAVE_TIMEOUT when the HA service stops), then the master services."""
        self.store.switch_to_slave()
        await self.stop_ha_service()
        await self.change_special_service_status(False)

    def follow(self, broker_id: int, master_addr: str) -> None:
        """This slave's id in its group and the master it copies metadata from."""
        self.broker_config.brokerId = broker_id
        self.slave_sync.master_addr = master_addr

    async def change_to_slave(self, master_ha_addr: str) -> None:
        """Replicate from the master and copy its metadata now (then every interval)."""
        await self.start_ha_client(master_ha_addr)
        self._tasks.spawn(self.slave_sync.sync_all(), name="slave-sync-now")

    async def shutdown(self) -> None:
        await self._tasks.close()
        await self.stop_ha_client()
        await self.stop_ha_service()
        await self.transactions.check_service.stop()
        await self.schedule.stop()
        for svc in self.master_services:
            await svc.stop()
