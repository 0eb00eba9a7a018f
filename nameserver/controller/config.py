"""The controller's keys (namesrv.properties), RocketMQ 5's names where it has them."""

from __future__ import annotations

from dataclasses import dataclass, field

from nameserver.etcd import EtcdSettings

__all__ = ["ControllerConfig"]

_ETCD_KEYS = (
    "controllerEtcdEndpoints",
    "controllerEtcdCaFile",
    "controllerEtcdCertFile",
    "controllerEtcdKeyFile",
    "controllerEtcdUser",
    "controllerEtcdPassword",
)


@dataclass
class ControllerConfig:
    """Times in ms.

    ``controllerEtcdEndpoints`` (``host:port;host:port``) puts the controller's state in
    etcd and lets every NameServer run a controller: one leads through an etcd lease
    of ``controllerElectionTtl``, the others stand by. Empty: the embedded controller
    (one per cluster, state in controller.msgpack). ``controllerEtcdKeyPrefix``
    separates rmq clusters sharing one etcd.

    ``controllerMasterLease`` (0: four fifths of ``controllerMasterTimeout``, at most
    ``controllerMasterTimeout`` - 200): how long a master may acknowledge writes
    after a heartbeat the controller answered. Shorter than the timeout after which
    its successor may be elected, so an isolated master stops first.
    """

    enableControllerInNamesrv: bool = False
    controllerMasterTimeout: int = 10_000
    haSlaveFallbehindMax: int = 1024 * 1024 * 256
    enableElectUncleanMaster: bool = False
    controllerScanInterval: int = 1000
    controllerMasterLease: int = 0
    controllerEtcdEndpoints: str = ""
    controllerEtcdKeyPrefix: str = "/rmq"
    controllerElectionTtl: int = 3000
    controllerEtcdCaFile: str = ""
    controllerEtcdCertFile: str = ""
    controllerEtcdKeyFile: str = ""
    controllerEtcdUser: str = ""
    controllerEtcdPassword: str = field(default="", repr=False, metadata={"secret": True})

    def validate(self) -> None:
        for key in (
            "controllerMasterTimeout",
            "controllerScanInterval",
            "haSlaveFallbehindMax",
            "controllerElectionTtl",
        ):
            if getattr(self, key) <= 0:
                raise ValueError(f"{key} must be positive, got {getattr(self, key)}")
        if self.controllerMasterLease < 0 or (
            self.controllerMasterLease and self.controllerMasterLease >= self.controllerMasterTimeout
        ):
            raise ValueError(
                f"controllerMasterLease must be shorter than controllerMasterTimeout "
                f"({self.controllerMasterTimeout}), got {self.controllerMasterLease}"
            )
        self.etcd_settings()  # the controllerEtcd* keys, each error naming its key
        if not self.controllerEtcdKeyPrefix.startswith("/"):
            raise ValueError(f"controllerEtcdKeyPrefix must start with '/', got {self.controllerEtcdKeyPrefix!r}")

    def etcd_settings(self) -> EtcdSettings | None:
        """Where etcd is and how to log in; None: the embedded controller."""
        if not self.controllerEtcdEndpoints.strip():
            return None
        return EtcdSettings.from_properties({k: str(getattr(self, k)) for k in _ETCD_KEYS})

    @property
    def etcd_endpoints(self) -> list[str]:
        s = self.etcd_settings()
        return list(s.endpoints) if s is not None else []

    @property
    def master_lease_ms(self) -> int:
        if self.controllerMasterLease:
            return self.controllerMasterLease
        t = self.controllerMasterTimeout
        return max(1, min(t * 4 // 5, t - 200))
