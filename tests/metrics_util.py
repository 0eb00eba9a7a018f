"""Scraping /metrics over HTTP in tests, and free TCP ports on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import urllib.request
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families


@dataclass
class Scrape:
    """One /metrics page: declared families (name -> type) and samples."""

    types: dict[str, str] = field(default_factory=dict)
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)

    def values(self, name: str, **labels: str) -> list[float]:
        return [v for n, ls, v in self.samples if n == name and all(ls.get(k) == want for k, want in labels.items())]

    def value(self, name: str, **labels: str) -> float:
        """The one sample that matches (fails if there are none or several)."""
        vs = self.values(name, **labels)
        assert len(vs) == 1, f"{name}{labels}: {len(vs)} samples, expected 1"
        return vs[0]

    def total(self, name: str, **labels: str) -> float:
        return sum(self.values(name, **labels))

    def series(self, name: str) -> list[dict[str, str]]:
        return [ls for n, ls, _ in self.samples if n == name]


def scrape(port: int, host: str = "127.0.0.1", timeout: float = 5.0) -> Scrape:
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout) as r:
        text = r.read().decode()
    out = Scrape()
    for fam in text_string_to_metric_families(text):
        # the parser strips _total from counter family names; keep the exposed name
        out.types[fam.name + ("_total" if fam.type == "counter" else "")] = fam.type
        for s in fam.samples:
            out.samples.append((s.name, dict(s.labels), s.value))
    return out


def free_ports(n: int) -> list[int]:
    """n distinct ports nobody listens on right now (held together while chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def listening_ports(pid: int) -> set[int]:
    """TCP ports the process listens on (from /proc: its socket inodes in LISTEN state)."""
    inodes = set()
    with contextlib.suppress(FileNotFoundError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(table) as f:
            next(f)
            for line in f:
                parts = line.split()
                if parts[3] == "0A" and parts[9] in inodes:  # 0A = LISTEN
                    ports.add(int(parts[1].rsplit(":", 1)[1], 16))
    return ports


async def eventually(pred, timeout: float = 20.0, interval: float = 0.1, what: str = "condition"):
    """Poll pred() (sync; a scrape is quick) until it returns a truthy value, which is
    returned; an AssertionError or OSError inside counts as "not yet"."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while True:
        try:
            r = pred()
            if r:
                return r
        except (AssertionError, OSError) as e:
            last_exc = e
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout}s waiting for {what}" + (f": {last_exc}" if last_exc else "")
            )
        await asyncio.sleep(interval)
