"""``KVConfigManager``: the NameServer's namespace -> key -> value store.

RocketMQ keeps it in ``~/namesrv/kvConfig.json``; rmq keeps the same table as
msgpack (``{"configTable": {namespace: {key: value}}}``), replaced atomically and
durably (``rmq.common.fs.atomic_write``: temp file, fsync, rename, fsync of the directory).

The in-memory table changes synchronously; writing the file is a separate,
blocking step (``snapshot()`` then ``write_file(data)``) so the server can run it in
a thread and keep the event loop off the disk. The namespace the NameServer itself
reads is ``ORDER_TOPIC_CONFIG`` (topic -> ``brokerName:queueNum;...``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import msgpack

from rmq.common.fs import atomic_write
from rmq.protocol.bodies import KVTable

__all__ = ["KVConfigManager", "NAMESPACE_ORDER_TOPIC_CONFIG", "default_kv_path"]

logger = logging.getLogger("rmq.nameserver.kvconfig")

#: NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG
NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


def default_kv_path() -> Path:
    """Where RocketMQ keeps its KV file (``~/namesrv/``), with our msgpack suffix."""
    return Path.home() / "namesrv" / "kvConfig.msgpack"


class KVConfigManager:
    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        """``path`` None: memory only (tests, or a NameServer that must not persist)."""
        self.path = Path(path) if path is not None else None
        self._table: dict[str, dict[str, str]] = {}

    # ------------------------------------------------------------------ file
    def load(self) -> None:
        """Read the file if it exists (blocking). A missing file is an empty table; an
        unreadable one is an error, not silently an empty table."""
        if self.path is None or not self.path.exists():
            return
        raw = self.path.read_bytes()
        try:
            obj = msgpack.unpackb(raw, raw=False)
        except Exception as e:  # msgpack raises several unrelated types
            raise ValueError(f"KV config file {self.path} is not msgpack: {e}") from e
        table = obj.get("configTable") if isinstance(obj, dict) else None
        if not isinstance(table, dict):
            raise ValueError(f"KV config file {self.path} has no configTable")
        loaded: dict[str, dict[str, str]] = {}
        for ns, kv in table.items():
            if isinstance(ns, str) and isinstance(kv, dict):
                loaded[ns] = {k: v for k, v in kv.items() if isinstance(k, str) and isinstance(v, str)}
        self._table = loaded
        logger.info("load KV config table OK: %s, %d namespace(s)", self.path, len(loaded))

    def snapshot(self) -> bytes:
        """The table as file content (cheap; call on the loop, write in a thread)."""
        return msgpack.packb({"configTable": self._table}, use_bin_type=True)

    def write_file(self, data: bytes) -> None:
        """Atomically replace the file with ``data`` (blocking: temp, fsync, rename)."""
        if self.path is None:
            return
        atomic_write(str(self.path), data)

    def persist(self) -> None:
        """``write_file(snapshot())`` in one blocking call."""
        self.write_file(self.snapshot())

    # ------------------------------------------------------------------ table
    def put_kv_config(self, namespace: str, key: str, value: str | None) -> None:
        """Set ``key``. A None value (a request without one) leaves the key unset but
        the namespace created: what Java's HashMap holding null looks like from
        outside (GET answers QUERY_NOT_FOUND, the KV list omits it)."""
        kv = self._table.setdefault(namespace, {})
        if value is None:
            kv.pop(key, None)
            logger.info("putKVConfig without a value, namespace=%s key=%s", namespace, key)
            return
        prev = kv.get(key)
        kv[key] = value
        if prev is None:
            logger.info("putKVConfig create new config item, namespace=%s key=%s value=%s", namespace, key, value)
        else:
            logger.info("putKVConfig update config item, namespace=%s key=%s value=%s", namespace, key, value)

    def get_kv_config(self, namespace: str, key: str) -> str | None:
        kv = self._table.get(namespace)
        return None if kv is None else kv.get(key)

    def delete_kv_config(self, namespace: str, key: str) -> bool:
        """True if something was removed. The namespace stays, possibly empty (as Java)."""
        kv = self._table.get(namespace)
        if kv is None or key not in kv:
            return False
        value = kv.pop(key)
        logger.info("deleteKVConfig delete a config item, namespace=%s key=%s value=%s", namespace, key, value)
        return True

    def get_kv_list_by_namespace(self, namespace: str) -> KVTable | None:
        """The namespace's table, None if the namespace never existed."""
        kv = self._table.get(namespace)
        return None if kv is None else KVTable(dict(kv))

    def namespaces(self) -> list[str]:
        return list(self._table)
