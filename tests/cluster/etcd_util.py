"""Real etcd clusters for tests: 1 or 3 members (or any number) on free ports of one host, in a
temporary directory that goes away with them.

    with etcd_cluster(tmp_path, members=3) as cluster:  # healthy when it yields
        async with cluster.client() as etcd: ...      # an EtcdClient for cluster.endpoints
        cluster.kill(0); cluster.restart(0)           # SIGKILL one member; start it again
        cluster.pause(1); cluster.resume(1)           # SIGSTOP / SIGCONT: a member that hangs
        cluster.move_leader(0)                        # etcd's own leader, e.g. before killing it

``EtcdCluster(workdir, members=3, host="127.0.0.1", tls=False, client_cert_auth=False,
auth=None)``: the cluster lives in a new directory under ``workdir`` (default: the system's temp
directory), removed with it — etcd preallocates about 120 MB of WAL per member, too much to keep
in pytest's kept tmp_paths. ``host`` is the address every member listens on (a bridge address
such as ``rig.root_ip`` of tests/cluster/netns.py for clients in network namespaces);
``tls=True`` serves clients over https with a certificate of a test CA made here (``ca_file``;
``client_cert``/``client_key`` for ``client_cert_auth=True``); ``auth=(user, password)`` creates
that user with the root role and enables authentication once the cluster is up. Members are
peers over plain http.

The methods are synchronous (process control and a short HTTP poll). A test whose event loop
keeps leases alive meanwhile calls the waiting ones (``start_all``, ``restart``, ``wait_healthy``)
through ``asyncio.to_thread``; ``kill``, ``pause`` and ``resume`` return at once.

``TcpProxy`` relays one address on the test's event loop and can go silent (``blackhole()``):
what a client on the far side of a network partition sees, without namespaces.

Needs ``/usr/bin/etcd`` (Debian ``etcd-server``; scripts/install_test_deps.sh installs it).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nameserver.etcd import EtcdClient
from rmq.child_process import ChildProcess

__all__ = ["EtcdCluster", "TcpProxy", "etcd_cluster", "etcd_binary"]

HEARTBEAT_MS = 100
ELECTION_MS = 500  # etcd's minimum lease TTL is then 1 s (1.5 x election timeout, rounded up)
READY_TIMEOUT = 20.0


def etcd_binary() -> str:
    path = shutil.which("etcd")
    if path is None:
        raise RuntimeError("no etcd on PATH: install Debian etcd-server (scripts/install_test_deps.sh does)")
    return path


def _free_ports(host: str, n: int) -> list[int]:
    """n ports free on ``host`` now, held together while chosen so they differ."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket(family)) for _ in range(n)]
        for s in socks:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]


class EtcdCluster:
    """See the module docstring. ``close()`` (or the context manager) kills every member and
    removes the directory; it runs however the test ends."""

    def __init__(
        self,
        workdir: Path | None = None,
        members: int = 1,
        *,
        host: str = "127.0.0.1",
        tls: bool = False,
        client_cert_auth: bool = False,
        auth: tuple[str, str] | None = None,
    ) -> None:
        if workdir is not None and not isinstance(workdir, str | os.PathLike):
            # the first version took members first: etcd_cluster(3) must not go unnoticed
            raise TypeError(f"EtcdCluster(workdir, members, ...): workdir is a path, got {workdir!r}")
        if members < 1:
            raise ValueError("an etcd cluster has at least one member")
        self.size = members
        self.host = host
        self.tls = tls or client_cert_auth
        self.client_cert_auth = client_cert_auth
        self.auth = auth
        self.dir = Path(tempfile.mkdtemp(prefix="rmq-etcd-", dir=workdir))
        self.ca_file: Path | None = None
        self.client_cert: Path | None = None
        self.client_key: Path | None = None
        self._server_pair: tuple[Path, Path] | None = None
        if self.tls:
            self._make_certs()
        self._token = uuid.uuid4().hex  # keeps members of another test's cluster out
        self.client_ports: list[int] = []
        self.peer_ports: list[int] = []
        self.procs: list[ChildProcess] = []
        self._paused: set[int] = set()

    # ------------------------------------------------------------------ addresses
    @property
    def endpoints(self) -> list[str]:
        """``host:port`` of each member's client port (https when ``tls``)."""
        return [f"{self._host_in_url}:{p}" for p in self.client_ports]

    @property
    def urls(self) -> list[str]:
        scheme = "https" if self.tls else "http"
        return [f"{scheme}://{e}" for e in self.endpoints]

    @property
    def _host_in_url(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host

    def client(self, *, endpoints: list[str] | None = None, timeout: float = 1.0, **kw: Any) -> EtcdClient:
        """An EtcdClient for this cluster (its endpoints, CA, client certificate and user unless
        given otherwise in ``kw``)."""
        opts: dict[str, Any] = {}
        if self.ca_file is not None:
            opts["ca_file"] = str(self.ca_file)
        if self.client_cert_auth:
            opts["cert_file"], opts["key_file"] = str(self.client_cert), str(self.client_key)
        if self.auth is not None:
            opts["user"], opts["password"] = self.auth
        opts.update(kw)
        return EtcdClient(endpoints if endpoints is not None else self.endpoints, timeout=timeout, **opts)

    # ------------------------------------------------------------------ lifecycle
    def start_all(self, timeout: float = READY_TIMEOUT) -> EtcdCluster:
        """Start every member that is not running; return once all answer and agree on a leader.
        The first start sets the cluster up (ports, auth); a later one restarts from the data."""
        first = not self.procs
        for attempt in range(3):
            if first:
                self._layout()
            for p in self.procs:
                if not p.alive():
                    p.start()
            try:
                self.wait_healthy(timeout=timeout)
                break
            except _PortTaken:
                # another process took a port between choosing and binding: new ports, new data
                if not first or attempt == 2:
                    raise
                self._kill_all()
                for i in range(self.size):
                    shutil.rmtree(self._member_dir(i), ignore_errors=True)
        if first and self.auth is not None:
            self._enable_auth()
        return self

    def kill(self, i: int) -> None:
        """SIGKILL member i (a crash; its data stays for ``restart``)."""
        self._paused.discard(i)
        self.procs[i].kill()

    def stop_all(self) -> None:
        """Kill every member (data kept: ``start_all`` brings the cluster back)."""
        self._kill_all()

    def restart(self, i: int, timeout: float = READY_TIMEOUT) -> None:
        """Start member i again (after ``kill``); return once it answers and knows a leader."""
        if self.procs[i].alive():
            self.kill(i)
        self.procs[i].start()
        self.wait_healthy([i], timeout=timeout)

    def pause(self, i: int) -> None:
        """SIGSTOP member i: connections to it open and hang, as to a frozen machine."""
        self.procs[i].signal(signal.SIGSTOP)
        self._paused.add(i)

    def resume(self, i: int) -> None:
        self.procs[i].signal(signal.SIGCONT)
        self._paused.discard(i)

    def close(self) -> None:
        self._kill_all()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> EtcdCluster:
        """Starts the cluster unless ``start_all`` already did."""
        if not self.procs:
            try:
                self.start_all()
            except BaseException:
                self.close()
                raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _kill_all(self) -> None:
        for i in range(len(self.procs)):
            self.kill(i)

    # ------------------------------------------------------------------ health
    def status(self, i: int, timeout: float = 1.0) -> dict[str, Any]:
        """Member i's /v3/maintenance/status answer (raises OSError when it does not answer)."""
        return self._post(i, "/v3/maintenance/status", {}, timeout=timeout)

    def leader_index(self) -> int | None:
        """Which member leads (among those that answer), None when none knows."""
        for i in range(self.size):
            try:
                st = self.status(i, timeout=0.5)
            except OSError:
                continue
            leader = int(st.get("leader", 0))
            if leader and leader == int(st["header"]["member_id"]):
                return i
        return None

    def move_leader(self, to: int, timeout: float = READY_TIMEOUT) -> None:
        """Make member ``to`` etcd's leader (etcd's leadership transfer), e.g. to kill the leader."""
        self.wait_healthy(timeout=timeout)
        current = self.leader_index()
        if current is None or current == to:
            return
        target = int(self.status(to)["header"]["member_id"])
        self._post(current, "/v3/maintenance/transfer-leadership", {"targetID": str(target)}, token=self._root_token())
        self.wait_healthy(timeout=timeout)
        assert self.leader_index() == to, "leadership did not move"

    def wait_healthy(self, members: list[int] | None = None, timeout: float = READY_TIMEOUT) -> None:
        """Until each of ``members`` (default: all) answers and names as leader a member that is
        running and answers too (after a leader is killed, the others name it until they notice)."""
        which = list(range(self.size)) if members is None else members
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            for i in which:
                p = self.procs[i]
                if not p.alive():
                    log = p.tail(20)
                    if "address already in use" in log:
                        raise _PortTaken(log)
                    raise RuntimeError(f"etcd member {i} exited with {p.proc and p.proc.returncode}:\n{log}")
            seen: dict[int, tuple[int, int]] = {}  # member index -> (member id, leader id)
            others = [i for i in range(self.size) if i not in which and self.procs[i].alive() and i not in self._paused]
            for i in which + others:
                try:
                    # a starting member's gateway accepts and then waits for the cluster: short
                    st = self.status(i, timeout=0.25)
                except OSError as e:
                    last = f"m{i}: {e}"
                    if i in which:
                        break
                    continue
                seen[i] = (int(st["header"]["member_id"]), int(st.get("leader", 0)))
            else:
                leaders = {seen[i][1] for i in which}
                live_leaders = {mid for mid, leader in seen.values() if mid == leader}
                if len(leaders) == 1 and leaders <= live_leaders:
                    return
                last = f"leaders named: {sorted(leaders)}, members leading: {sorted(live_leaders)}"
            time.sleep(0.05)
        tails = "\n".join(f"--- member {i}:\n{self.procs[i].tail(15)}" for i in which)
        raise RuntimeError(f"etcd not healthy within {timeout}s ({last}):\n{tails}")

    # ------------------------------------------------------------------ set-up
    def _member_dir(self, i: int) -> Path:
        return self.dir / f"m{i}"

    def _layout(self) -> None:
        ports = _free_ports(self.host, 2 * self.size)
        self.client_ports, self.peer_ports = ports[: self.size], ports[self.size :]
        peers = ",".join(f"m{i}=http://{self._host_in_url}:{p}" for i, p in enumerate(self.peer_ports))
        self.procs = []
        for i in range(self.size):
            client_url = self.urls[i]
            peer_url = f"http://{self._host_in_url}:{self.peer_ports[i]}"
            argv = [
                etcd_binary(),
                *("--name", f"m{i}", "--data-dir", str(self._member_dir(i) / "data")),
                *("--listen-client-urls", client_url, "--advertise-client-urls", client_url),
                *("--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url),
                *("--initial-cluster", peers, "--initial-cluster-token", self._token),
                *("--initial-cluster-state", "new"),
                *("--heartbeat-interval", str(HEARTBEAT_MS), "--election-timeout", str(ELECTION_MS)),
                *("--logger", "zap", "--log-outputs", "stderr"),
            ]
            if self._server_pair is not None:
                argv += ["--cert-file", str(self._server_pair[0]), "--key-file", str(self._server_pair[1])]
            if self.client_cert_auth:
                argv += ["--client-cert-auth", "--trusted-ca-file", str(self.ca_file)]
            # readiness is judged over HTTP (wait_healthy): a member of 3 logs "ready" only once a
            # quorum is up, so starting one must not wait for its log
            self.procs.append(ChildProcess(f"etcd-m{i}", argv, self._member_dir(i), ready=""))

    def _make_certs(self) -> None:
        """A CA; a server certificate for ``host`` (+ 127.0.0.1, localhost); a client certificate."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        d = self.dir / "certs"
        d.mkdir()
        now = datetime.datetime.now(datetime.UTC)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rmq etcd test CA")])
        ips = {ipaddress.ip_address(self.host), ipaddress.ip_address("127.0.0.1")}
        server_san = [x509.DNSName("localhost"), *(x509.IPAddress(ip) for ip in ips)]
        made: dict[str, Path] = {}
        # etcd's JSON gateway dials etcd's own gRPC port with the server certificate: with
        # --client-cert-auth that certificate must be good for client authentication as well
        server_usage = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
        for name, usage, san in (
            ("ca", None, None),
            ("server", server_usage, server_san),
            ("client", [ExtendedKeyUsageOID.CLIENT_AUTH], None),
        ):
            key = ca_key if usage is None else ec.generate_private_key(ec.SECP256R1())
            subject = ca_name if usage is None else x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"etcd-{name}")])
            builder = (
                x509.CertificateBuilder()
                .subject_name(subject)
                .issuer_name(ca_name)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(hours=1))
                .not_valid_after(now + datetime.timedelta(days=2))
                .add_extension(x509.BasicConstraints(ca=usage is None, path_length=None), critical=True)
            )
            if usage is not None:
                builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
            if san is not None:
                builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
            cert = builder.sign(ca_key, hashes.SHA256())
            made[name] = d / f"{name}.pem"
            made[name].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
            if usage is not None:
                made[f"{name}-key"] = d / f"{name}.key"
                made[f"{name}-key"].write_bytes(
                    key.private_bytes(
                        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
                    )
                )
        self.ca_file = made["ca"]
        self._server_pair = (made["server"], made["server-key"])
        self.client_cert, self.client_key = made["client"], made["client-key"]

    def _enable_auth(self) -> None:
        assert self.auth is not None
        user, password = self.auth
        self._post(0, "/v3/auth/user/add", {"name": user, "password": password})
        self._post(0, "/v3/auth/user/grant", {"user": user, "role": "root"})
        self._post(0, "/v3/auth/enable", {})

    def invalidate_tokens(self) -> None:
        """Make etcd forget every auth token it handed out (auth disabled and enabled again), as
        when a token expires. A member restart does not: it replays the authentications from its
        log and knows the tokens again."""
        assert self.auth is not None, "a cluster started with auth=(user, password)"
        self._post(0, "/v3/auth/disable", {}, token=self._root_token())
        self._post(0, "/v3/auth/enable", {})

    def _root_token(self) -> str | None:
        if self.auth is None:
            return None
        user, password = self.auth
        return str(self._post(0, "/v3/auth/authenticate", {"name": user, "password": password})["token"])

    def _post(
        self, i: int, path: str, body: dict[str, Any], timeout: float = 5.0, token: str | None = None
    ) -> dict[str, Any]:
        """POST to member i's gateway; an error answer raises urllib's HTTPError (an OSError)."""
        ctx = None
        if self.tls:
            ctx = ssl.create_default_context(cafile=str(self.ca_file))
            if self.client_cert_auth:
                ctx.load_cert_chain(str(self.client_cert), str(self.client_key))
        headers = {"Authorization": token} if token else {}
        req = urllib.request.Request(self.urls[i] + path, json.dumps(body).encode(), headers, method="POST")
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))
        with opener.open(req, timeout=timeout) as r:
            return json.loads(r.read())


class _PortTaken(RuntimeError):
    pass


@contextlib.contextmanager
def etcd_cluster(workdir: Path | None = None, members: int = 1, **kw: Any) -> Iterator[EtcdCluster]:
    """A started, healthy cluster (``EtcdCluster`` arguments); killed and removed afterwards."""
    with EtcdCluster(workdir, members, **kw) as cluster:
        yield cluster


# ---------------------------------------------------------------------------------- partitions
class TcpProxy:
    """Relays ``listen host:port`` -> ``target`` on the running loop. ``blackhole()`` holds every
    byte in both directions and leaves connections open (new ones are accepted and not relayed):
    requests hang as across a partition. ``heal()`` lets them through again."""

    def __init__(self, target: str, host: str = "127.0.0.1") -> None:
        self.target = target
        self.host = host
        self.addr = ""
        self._open = asyncio.Event()
        self._open.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._accept, self.host, 0)
        port = self._server.sockets[0].getsockname()[1]
        self.addr = f"{self.host}:{port}"
        return self

    def blackhole(self) -> None:
        self._open.clear()

    def heal(self) -> None:
        self._open.set()

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> TcpProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._open.wait()
            host, port = self.target.rsplit(":", 1)
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
            self._writers.add(up_writer)
            await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            self._tasks.discard(task)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self._open.wait()
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()
