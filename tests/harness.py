"""Real rmq processes for integration tests: ephemeral ports, logs on disk, always reaped.

    with start_namesrv(tmp_path) as ns, start_broker(tmp_path, ns.addr, name="broker-a") as br:
        ...  # ns.addr, br.addr, br.store_dir, br.log_text()

Processes run `python -m rmq.cli ...` with the test's interpreter. Each one's stdout and
stderr go to a file under its directory; a process that does not report ready in time,
or dies, fails the test with the tail of its log.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

from rmq.child_process import ChildProcess

READY_TIMEOUT = 30.0


class RmqProcess(ChildProcess):
    """``python -m rmq.cli <args>`` with the test's interpreter."""

    def __init__(
        self, name: str, args: list[str], workdir: Path, ready: str, env: dict[str, str] | None = None
    ) -> None:
        super().__init__(name, [sys.executable, "-m", "rmq.cli", *args], workdir, ready, env)
        self.args = args
        # Run under another command (e.g. `unshare --mount sh -c '...; exec "$@"' sh`).
        self.prefix: list[str] = []

    def start(self, timeout: float = READY_TIMEOUT) -> RmqProcess:
        self.argv = [*self.prefix, sys.executable, "-m", "rmq.cli", *self.args]
        super().start(timeout)
        return self


class NameServerProcess(RmqProcess):
    @property
    def port(self) -> int:
        assert self.match is not None
        return int(self.match.group(1))

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"


class BrokerProcess(RmqProcess):
    def __init__(self, *a, store_dir: Path, conf_path: Path, **kw) -> None:
        super().__init__(*a, **kw)
        self.store_dir = store_dir
        self.conf_path = conf_path

    @property
    def addr(self) -> str:
        assert self.match is not None
        return self.match.group(1)

    @property
    def port(self) -> int:
        return int(self.addr.rsplit(":", 1)[1])


def namesrv_process(workdir: Path, *extra: str, name: str = "namesrv") -> NameServerProcess:
    d = workdir / name
    return NameServerProcess(
        name,
        ["namesrv", "-p", "0", "--host", "127.0.0.1", "--kv-path", str(d / "kvConfig.msgpack"), *extra],
        d,
        r"NameServer listening on [\d.]+:(\d+)",
    )


def broker_process(
    workdir: Path, namesrv: str | None, name: str = "broker-a", conf: dict[str, object] | None = None
) -> BrokerProcess:
    d = workdir / name
    store = d / "store"
    props: dict[str, object] = {
        "brokerClusterName": "TestCluster",
        "brokerName": name,
        "brokerId": 0,
        "listenPort": 0,
        "brokerIP1": "127.0.0.1",
        "storePathRootDir": str(store),
        "mappedFileSizeCommitLog": 4 * 1024 * 1024,
        "maxHashSlotNum": 10000,
        "maxIndexNum": 40000,
    }
    props.update(conf or {})
    d.mkdir(parents=True, exist_ok=True)
    conf_path = d / "broker.conf"
    conf_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    args = ["broker", "-c", str(conf_path)]
    if namesrv:
        args += ["-n", namesrv]
    return BrokerProcess(
        name, args, d, r"The broker\[[^,]+, ([\d.]+:\d+)\] boot success", store_dir=store, conf_path=conf_path
    )


@contextlib.contextmanager
def start_namesrv(workdir: Path, *extra: str, name: str = "namesrv") -> Iterator[NameServerProcess]:
    p = namesrv_process(workdir, *extra, name=name)
    try:
        yield p.start()
    finally:
        p.stop()


@contextlib.contextmanager
def start_broker(
    workdir: Path, namesrv: str | None, name: str = "broker-a", conf: dict[str, object] | None = None
) -> Iterator[BrokerProcess]:
    p = broker_process(workdir, namesrv, name, conf)
    try:
        yield p.start()
    finally:
        p.stop()


@contextlib.contextmanager
def start_cluster(
    workdir: Path, conf: dict[str, object] | None = None, name: str = "broker-a"
) -> Iterator[SimpleNamespace]:
    """A NameServer and one broker registered with it: ``.namesrv``, ``.broker`` (addresses),
    ``.ns``, ``.br`` (the processes)."""
    with start_namesrv(workdir) as ns, start_broker(workdir, ns.addr, name=name, conf=conf) as br:
        yield SimpleNamespace(namesrv=ns.addr, broker=br.addr, ns=ns, br=br)


def wait_for(pred: Callable[[], object], timeout: float, what: str = "condition", interval: float = 0.02) -> float:
    """Poll ``pred`` (blocking: off any event loop) until it holds; the seconds it took.
    AssertionError naming ``what`` after ``timeout`` seconds."""
    t = time.monotonic()
    while not pred():
        if time.monotonic() - t > timeout:
            raise AssertionError(f"{what} not reached in {timeout}s")
        time.sleep(interval)
    return time.monotonic() - t
