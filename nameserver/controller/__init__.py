"""Failover controller: election rules (``election``), what is persisted per group
(``state``), where (``file_store``: the embedded controller's file; ``etcd_store``:
etcd, several controllers, compare-and-swap), and the NameServer's side of it
(``service``: leadership, persistence before every answer, forwarding to the leader)."""

from nameserver.controller.config import ControllerConfig
from nameserver.controller.election import CONTROLLER_FILE_NAME, Assignment, Controller, ControllerError

__all__ = ["ControllerConfig", "Controller", "ControllerError", "Assignment", "CONTROLLER_FILE_NAME"]
