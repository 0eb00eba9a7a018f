"""Replace a small file atomically and durably (metadata, epoch history)."""

from __future__ import annotations

import os

__all__ = ["atomic_write"]


def atomic_write(path: str, payload: bytes) -> None:
    """Write to a temp file, fsync it, rename it over path, fsync the directory.
    Blocking: callers on the event loop run it in a worker thread."""
    d = os.path.dirname(path) or "."
    os.makedirs(d, exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(payload)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
