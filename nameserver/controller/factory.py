"""Which controller a NameServer runs: embedded (a local file, always the leader) or
one of several on etcd (leader by lease, state by compare-and-swap)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from nameserver.controller.config import ControllerConfig
from nameserver.controller.etcd_store import EtcdLeadership, EtcdStateStore
from nameserver.controller.file_store import FileStateStore
from nameserver.controller.service import ControllerService, StaticLeadership
from rmq.auth.credentials import Credential

__all__ = ["build_controller_service"]


def build_controller_service(
    config: ControllerConfig,
    file_path: Path | None,
    self_addr: Callable[[], str],
    on_failover: Callable[[str, str], None] | None = None,
    credential: Credential | None = None,
) -> ControllerService:
    config.validate()
    etcd = config.etcd_settings()
    if etcd is None:
        return ControllerService(
            config,
            FileStateStore(file_path),
            StaticLeadership(self_addr),
            self_addr,
            on_failover=on_failover,
            credential=credential,
        )
    client = etcd.client()
    leadership = EtcdLeadership(client, config.controllerEtcdKeyPrefix, self_addr, config.controllerElectionTtl)
    legacy = file_path if file_path is not None and file_path.exists() else None
    store = EtcdStateStore(client, config.controllerEtcdKeyPrefix, leadership.fence, legacy)
    return ControllerService(config, store, leadership, self_addr, on_failover=on_failover, credential=credential)
