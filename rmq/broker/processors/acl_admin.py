"""The ACL-management codes of AdminBrokerProcessor (spec 2.9): 50 UPDATE_AND_CREATE_ACL_CONFIG,
51 DELETE_ACL_CONFIG, 52 GET_BROKER_CLUSTER_ACL_INFO, 53 UPDATE_GLOBAL_WHITE_ADDRS_CONFIG.

The files are the truth: each write reads the ACL files as they are now (not the set in
force, which the reload loop may not have caught up with), rewrites one of them
atomically (``atomic_write``) with ``dataVersion`` bumped, loads the files again and puts
that set in force at once, so the next request already sees the change. The reload loop
then finds the same content and leaves it (a reload that read the files just before the
write and lands just after it can put the previous set back; its next poll, one interval
later, sees the changed file and loads it again). Writes are serialized (4.9.8's handlers are
``synchronized``) and run in a worker thread: the event loop never waits on the disk.

The rewrites themselves are ``rmq.auth.acl_update`` (sans-IO). Only admin accounts get
here when ACL is on (``rmq.auth.permissions.ADMIN_CODES``); with ACL off, 4.9.8 hit a
NullPointerException (and code 52 never answered); rmq says that ACL is not enabled.
Code 54 (GET_BROKER_CLUSTER_ACL_CONFIG, which returned every secret) is not registered:
the dispatcher answers REQUEST_CODE_NOT_SUPPORTED, as 4.9.8 does.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rmq.auth.acl_config import AclConfigError, AclSet, load_acl
from rmq.auth.acl_update import (
    DELETE_ACL_CONFIG_FAILED,
    UPDATE_AND_CREATE_ACL_CONFIG_FAILED,
    UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED,
    AccountDelete,
    AccountUpdate,
    AclUpdateError,
    AclVersionInfo,
    GlobalWhiteUpdate,
    delete_account_document,
    delete_failed_remark,
    global_white_failed_remark,
    update_account_document,
    update_failed_remark,
    update_global_white_document,
    white_addrs_file,
)
from rmq.broker.processors.decode import with_header
from rmq.common.clock import now_ms
from rmq.common.fs import atomic_write
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.frame import RemotingCommand

__all__ = ["AclHolder", "BrokerNames", "AclAdminProcessor", "NOT_ENABLED"]

log = logging.getLogger("rmq.broker.acl")

NOT_ENABLED = "ACL is not enabled on this broker (aclEnable=false in its broker.conf)"

_Answer = RemotingCommand | Awaitable[RemotingCommand]
# (file content or None when it does not exist) -> new content, or None: leave the file
_Edit = Callable[[bytes | None], str | None]


class AclHolder(Protocol):
    """Where the ACL in force lives (the remoting auth hook): read, and replaced whole."""

    acl: AclSet


class BrokerNames(Protocol):
    """What code 52 names (BrokerConfig has them)."""

    brokerName: str
    brokerClusterName: str

    @property
    def broker_addr(self) -> str: ...


@dataclass(eq=False)
class AclAdminProcessor:
    home: str  # the ACL home (rocketmqHome, else $ROCKETMQ_HOME, else the working directory)
    names: BrokerNames
    # The ACL in force; None when aclEnable=false (the holder is made at start).
    holder: Callable[[], AclHolder | None]
    clock: Callable[[], int] = now_ms
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False, repr=False)

    def handlers(self) -> tuple[tuple[int, Callable[[Any, RemotingCommand], _Answer]], ...]:
        return (
            (RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, self.update_and_create_acl_config),
            (RequestCode.DELETE_ACL_CONFIG, self.delete_acl_config),
            (RequestCode.GET_BROKER_CLUSTER_ACL_INFO, self.get_broker_cluster_acl_info),
            (RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, self.update_global_white_addrs_config),
        )

    # ------------------------------------------------------------------ codes
    @with_header(AccountUpdate)
    def update_and_create_acl_config(self, conn: Any, request: RemotingCommand, update: AccountUpdate) -> _Answer:
        ak = update.access_key

        def edits(acl: AclSet) -> list[tuple[str, _Edit]]:
            # An existing account is rewritten where it is in force; a new one goes to the default file.
            path = acl.file_of(ak) or self._default_file(acl)
            return [(path, lambda text: update_account_document(text, update, self.clock(), path))]

        return self._write(
            conn,
            request,
            UPDATE_AND_CREATE_ACL_CONFIG_FAILED,
            f"create/update of account {ak}",
            edits,
            lambda reason: update_failed_remark(ak, reason),
        )

    @with_header(AccountDelete)
    def delete_acl_config(self, conn: Any, request: RemotingCommand, delete: AccountDelete) -> _Answer:
        ak = delete.access_key

        def edits(acl: AclSet) -> list[tuple[str, _Edit]]:
            # Every file that defines the key, or a shadowed copy would come into force.
            paths = [f.path for f in acl.files if any(a.access_key == ak for a in f.accounts)]
            if not ak or not paths:
                raise AclUpdateError(delete_failed_remark(ak))
            return [(p, self._delete_from(p, ak)) for p in paths]

        return self._write(
            conn,
            request,
            DELETE_ACL_CONFIG_FAILED,
            f"delete of account {ak}",
            edits,
            lambda reason: delete_failed_remark(ak, reason),
        )

    @with_header(GlobalWhiteUpdate)
    def update_global_white_addrs_config(self, conn: Any, request: RemotingCommand, h: GlobalWhiteUpdate) -> _Answer:
        def remark(reason: str | None) -> str:
            return global_white_failed_remark(h.global_white_addrs, reason)

        def edits(acl: AclSet) -> list[tuple[str, _Edit]]:
            try:
                path = white_addrs_file(self.home, h.acl_file_full_path)
            except AclUpdateError as e:
                raise AclUpdateError(remark(str(e))) from None
            if h.acl_file_full_path and not os.path.isfile(path):
                raise AclUpdateError(remark(f"{path} does not exist"))
            return [(path, lambda text: update_global_white_document(text, h.addresses, self.clock(), path))]

        return self._write(
            conn,
            request,
            UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED,
            "update of the global white addresses",
            edits,
            remark,
        )

    def get_broker_cluster_acl_info(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        holder = self.holder()
        if holder is None:
            return request.create_response(ResponseCode.SYSTEM_ERROR, NOT_ENABLED)
        n = self.names
        info = AclVersionInfo.of(holder.acl, n.brokerName, n.broker_addr, n.brokerClusterName)
        return request.create_response(ResponseCode.SUCCESS, ext_fields=info.to_ext_fields())

    # ------------------------------------------------------------------ the write path
    def _delete_from(self, path: str, access_key: str) -> _Edit:
        return lambda text: delete_account_document(text, access_key, self.clock(), path)

    def _default_file(self, acl: AclSet) -> str:
        return acl.default_file or str(Path(self.home) / "conf" / "plain_acl.yml")

    def _write(
        self,
        conn: Any,
        request: RemotingCommand,
        failed: int,
        what: str,
        edits: Callable[[AclSet], list[tuple[str, _Edit]]],
        remark: Callable[[str | None], str],
    ) -> _Answer:
        holder = self.holder()
        if holder is None:
            return request.create_response(failed, f"{NOT_ENABLED}: nothing was changed")
        peer = getattr(conn, "remote_address", "?")

        async def write() -> RemotingCommand:
            async with self._lock:
                try:
                    paths, acl = await asyncio.to_thread(self._rewrite, edits)
                except AclUpdateError as e:
                    log.warning("ACL: %s from %s refused: %s", what, peer, e)
                    return request.create_response(failed, str(e))
                except AclConfigError as e:
                    # names file, line and field; never a secret (rmq.auth.acl_config)
                    log.warning("ACL: %s from %s refused, the ACL files do not load: %s", what, peer, e)
                    return request.create_response(failed, remark(f"The ACL files do not load: {e}"))
                except OSError as e:
                    log.error("ACL: %s from %s failed: %s", what, peer, e)
                    return request.create_response(failed, remark(f"{e.filename}: {e.strerror}"))
                holder.acl = acl
            log.info("ACL: %s from %s written to %s", what, peer, ", ".join(paths))
            return request.create_response(ResponseCode.SUCCESS)

        return write()

    def _rewrite(self, edits: Callable[[AclSet], list[tuple[str, _Edit]]]) -> tuple[list[str], AclSet]:
        """In a worker thread: plan on the files as they are, write, load the result."""
        written: list[str] = []
        for path, edit in edits(load_acl(self.home)):
            try:
                text: bytes | None = Path(path).read_bytes()
            except FileNotFoundError:
                text = None
            new = edit(text)
            if new is not None:
                atomic_write(path, new.encode("utf-8"))
                written.append(path)
        return written, load_acl(self.home)
