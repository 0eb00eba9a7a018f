"""A small etcd cluster for the benchmarks: ``members`` real etcd processes on free
ports of 127.0.0.1, data under ``workdir`` (removed by ``close()``).

    etcd = Etcd(workdir, members=3).start()    # returns once every member names one leader
    etcd.endpoints                             # ["127.0.0.1:port", ...]
    etcd.leader_index()                        # which member is etcd's raft leader
    etcd.procs[0]                              # a ChildProcess (kill() = SIGKILL)
    etcd.close()                               # kill every member, remove the data

Needs ``etcd`` on PATH (Debian etcd-server; scripts/install_test_deps.sh installs it).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from rmq.child_process import ChildProcess


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n distinct ports free on ``host`` now (held together while chosen)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]


class Etcd:
    def __init__(self, workdir: Path, members: int = 3, *, heartbeat_ms: int = 100, election_ms: int = 1000) -> None:
        binary = shutil.which("etcd")
        if binary is None:
            raise RuntimeError("no etcd on PATH: install Debian etcd-server (scripts/install_test_deps.sh does)")
        self.dir = Path(tempfile.mkdtemp(prefix="etcd-", dir=workdir))
        ports = free_ports(2 * members)
        self.client_ports, peer_ports = ports[:members], ports[members:]
        cluster = ",".join(f"m{i}=http://127.0.0.1:{p}" for i, p in enumerate(peer_ports))
        self.procs = []
        for i in range(members):
            url = f"http://127.0.0.1:{self.client_ports[i]}"
            peer = f"http://127.0.0.1:{peer_ports[i]}"
            argv = [
                binary,
                *("--name", f"m{i}", "--data-dir", str(self.dir / f"m{i}" / "data")),
                *("--listen-client-urls", url, "--advertise-client-urls", url),
                *("--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer),
                *("--initial-cluster", cluster, "--initial-cluster-state", "new"),
                *("--initial-cluster-token", self.dir.name),
                *("--heartbeat-interval", str(heartbeat_ms), "--election-timeout", str(election_ms)),
                *("--logger", "zap", "--log-outputs", "stderr"),
            ]
            # a member of 3 logs "ready" only once a quorum is up: readiness is judged over HTTP
            self.procs.append(ChildProcess(f"etcd-m{i}", argv, self.dir / f"m{i}", ready=""))

    @property
    def endpoints(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.client_ports]

    def start(self, timeout: float = 30.0) -> Etcd:
        for p in self.procs:
            p.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in self.procs:
                if not p.alive():
                    raise RuntimeError(f"{p.name} exited:\n{p.tail(15)}")
            if self.leader_index(every=True) is not None:
                return self
            time.sleep(0.05)
        raise RuntimeError(f"etcd not healthy within {timeout} s:\n{self.procs[0].tail(15)}")

    def status(self, i: int, timeout: float = 0.5) -> dict[str, Any]:
        """Member i's /v3/maintenance/status (OSError when it does not answer)."""
        req = urllib.request.Request(
            f"http://{self.endpoints[i]}/v3/maintenance/status", b"{}", {"Content-Type": "application/json"}
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(req, timeout=timeout) as r:
            return dict(json.loads(r.read()))

    def leader_index(self, every: bool = False) -> int | None:
        """The member leading etcd's raft, as the members that answer see it (``every``:
        all members must answer and agree); None when not known."""
        ids: dict[int, int] = {}
        leaders = set()
        for i in range(len(self.procs)):
            try:
                st = self.status(i)
            except (OSError, ValueError):
                if every:
                    return None
                continue
            ids[int(st["header"]["member_id"])] = i
            leaders.add(int(st.get("leader", 0)))
        if len(leaders) != 1:
            return None
        return ids.get(leaders.pop())

    def close(self) -> None:
        for p in self.procs:
            p.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
