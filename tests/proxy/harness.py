"""A real `rmq proxy` process for tests (tests/harness.py's way: ephemeral port, log on disk)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from tests.harness import RmqProcess

READY = r"rmq proxy listening on ([\d.]+:\d+)"


class ProxyProcess(RmqProcess):
    @property
    def addr(self) -> str:
        """host:port the proxy listens on (127.0.0.1), once started."""
        return self.match.group(1) if self.match is not None else ""


def proxy_process(namesrv: str, workdir: Path, *defines: str, name: str = "proxy") -> ProxyProcess:
    """``rmq proxy -n NAMESRV -p 0 -D bindAddress=127.0.0.1 -D k=v ...`` (``defines``: "k=v")."""
    args = ["proxy", "-n", namesrv, "-p", "0", "-D", "bindAddress=127.0.0.1"]
    for d in defines:
        args += ["-D", d]
    return ProxyProcess(name, args, workdir / name, READY)


@contextlib.contextmanager
def start_proxy(namesrv: str, workdir: Path, *defines: str, name: str = "proxy") -> Iterator[ProxyProcess]:
    p = proxy_process(namesrv, workdir, *defines, name=name)
    try:
        p.start()
        yield p
    finally:
        p.stop()
