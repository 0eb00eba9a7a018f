"""A network of Linux network namespaces for partition tests: real processes, real TCP,
links cut and healed while they run.

    with NetRig(hosts=("ns", "master", "slave")) as rig:
        srv = rig["master"].spawn([sys.executable, "-m", "rmq.cli", "broker", ...])
        rig.isolate(rig["master"])          # nobody reaches it, it reaches nobody
        rig.heal(rig["master"])
        rig.cut(rig["master"], rig["slave"])  # exactly this pair, both ways
        rig.uncut(rig["master"], rig["slave"])
        print(rig.timeline())

Layout: a Linux bridge in the root namespace holds ``10.<a>.<b>.1/24`` (``rig.root_ip``);
every host is a namespace joined to the bridge by a veth pair, with ``10.<a>.<b>.<n>/24``
on its end (``eth0``), ``lo`` up and a default route via the bridge address. A process in
the root namespace that the hosts must reach listens on ``rig.root_ip`` (or 0.0.0.0): in a
namespace 127.0.0.1 is that namespace's own loopback. ``rig.root`` is a Host for the root
namespace, so ``cut`` and ``spawn`` treat it like any other host.

Partitions use iproute2 only (iptables may be absent):

* ``isolate(h)`` sets the root-side veth down. Everything to and from ``h`` is dropped
  silently (connects and reads time out, as on a real partition); processes inside ``h``
  still reach each other, its own address and its loopback.
* ``cut(a, b)`` routes the other side's /32 in each of the two namespaces into a sink: a
  veth whose peer stays down, with ARP off, so a packet is dropped at transmit without a
  local error (mode "drop", the default: again timeouts, like an iptables DROP). Mode
  "reject" uses ``prohibit`` routes instead: connect and send fail at once with EACCES.
  A prohibit or blackhole route makes the *sender's* kernel refuse the packet, which is
  not what a broker sees on a real partition, hence the sink as the default. A new route
  invalidates the routes cached in sockets, so established connections stop delivering
  too; after ``uncut`` (or ``heal``) they resume with TCP's next retransmission.
  With ``b`` the root namespace, ``a``'s default route is cut as well (``a`` would still
  reach the root namespace's other addresses through it) and the root namespace gets one
  /32 route for ``a``'s address, inside the rig's own subnet.

Every partition call is logged with its time.monotonic() offset from the rig's start
(``rig.events``, ``rig.timeline()``, printed as it happens), so a test can show how
long each phase took. ``rig.log(what)`` adds the test's own marks to the same timeline.

Cleanup (``close``, run by ``with``/the fixture, by ``start`` when it fails halfway, and at
interpreter exit for a rig that was never closed): every process spawned through the rig
gets SIGTERM to its process group, SIGKILL after a short grace; any other process still
in one of the rig's namespaces (e.g. started with ``host.exec_prefix``) is SIGKILLed;
then the namespaces, the veths, the sinks and the bridge are deleted, and routes in the
rig's subnet left in the root namespace's main table. It removes by name prefix, so it
also finds objects of a command that failed halfway, but only the rig's own: the prefix
(``rq`` + pid + random, checked unused when the rig starts) names every interface and
namespace the rig creates and nothing else. A rig whose process was SIGKILLed leaves its
objects behind (nothing runs then); they carry its prefix (``rq<pid base36>..``).

Requirements: root (CAP_NET_ADMIN and CAP_SYS_ADMIN for ``ip netns``), iproute2's ``ip``,
veth and bridge support. ``NetRig.start`` raises NetRigUnavailable (the command and its
error) when these are missing; the ``netrig`` fixture turns that into a skip, or a
failure when RMQ_REQUIRE_NETNS is set (CI runs as root: a skip there would hide a broken
rig). Hosts talk across the bridge, so with br_netfilter loaded and
``net.bridge.bridge-nf-call-iptables=1`` an iptables FORWARD policy of DROP (Docker sets
one) blocks host-to-host traffic; the root namespace to a host is unaffected.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import ipaddress
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, NoReturn

import pytest

__all__ = ["Event", "Host", "NetRig", "NetRigError", "NetRigUnavailable", "netrig_fixture", "skip_unavailable"]

CutMode = Literal["drop", "reject"]
# What subprocess accepts for stdin/stdout/stderr.
_File = int | IO[Any] | None

IP_TIMEOUT = 10.0  # one `ip` command; it takes milliseconds, a hang means something is badly wrong
TERM_GRACE = 1.0  # SIGTERM -> SIGKILL at cleanup: tests do not need a clean shutdown of their processes
_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,40}")
_B36 = "0123456789abcdefghijklmnopqrstuvwxyz"
# Interface names of a host namespace: the rig's end of the bridge link and the sink pair.
# They live only inside the namespace, so they need no prefix.
NS_DEV = "eth0"
NS_SINK = ("sink0", "sink1")


class NetRigError(RuntimeError):
    """A command of the rig failed (``cmd``, ``returncode``, ``stderr``)."""

    def __init__(self, msg: str, cmd: Sequence[str] = (), returncode: int | None = None, stderr: str = "") -> None:
        super().__init__(msg)
        self.cmd = list(cmd)
        self.returncode = returncode
        self.stderr = stderr


class NetRigUnavailable(NetRigError):
    """Network namespaces cannot be made here (not root, no ``ip``, no veth/bridge)."""


@dataclass(frozen=True)
class Event:
    t: float  # time.monotonic()
    what: str


def _b36(n: int, width: int) -> str:
    s = ""
    while n:
        n, r = divmod(n, 36)
        s = _B36[r] + s
    return s.rjust(width, "0")[-width:]


class Host:
    """One namespace of a rig (or the root namespace: ``ns`` is None)."""

    def __init__(self, rig: NetRig, name: str, ns: str | None, ip: str, veth: str | None) -> None:
        self.rig = rig
        self.name = name
        self.ns = ns
        self.ip = ip
        self.veth = veth  # root-side end of the host's link; None for the root namespace
        self.has_sink = False

    def __repr__(self) -> str:
        return f"Host({self.name!r}, ns={self.ns!r}, ip={self.ip!r})"

    @property
    def is_root(self) -> bool:
        return self.ns is None

    @property
    def exec_prefix(self) -> list[str]:
        """Put before an argv to run it in this host, e.g. as ``RmqProcess.prefix`` of
        tests/harness.py. Such processes are not tracked by the rig, but close() kills
        whatever still runs in its namespaces."""
        return [] if self.ns is None else [self.rig.ip_cmd, "netns", "exec", self.ns]

    def addr(self, port: int) -> str:
        return f"{self.ip}:{port}"

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        stdin: _File = subprocess.DEVNULL,
        stdout: _File = None,
        stderr: _File = None,
        text: bool = False,
    ) -> subprocess.Popen[Any]:
        """Start ``argv`` in this host, as the leader of a new session (so the rig, or the
        test with os.killpg, reaches exactly it and its children). ``env`` is added to the
        current environment. The rig kills it at cleanup."""
        assert not self.rig._closed, "rig closed"
        full_env = {**os.environ, **env} if env is not None else None
        proc = subprocess.Popen(
            [*self.exec_prefix, *argv],
            env=full_env,
            cwd=cwd,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            text=text,
            start_new_session=True,
        )
        self.rig._procs.append(proc)
        return proc

    def run(
        self, argv: Sequence[str], *, timeout: float = 10.0, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a one-shot command here; stdout and stderr captured as text."""
        cmd = [*self.exec_prefix, *argv]
        r = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise NetRigError(f"{cmd} exited {r.returncode}: {r.stderr.strip()}", cmd, r.returncode, r.stderr)
        return r

    def free_port(self) -> int:
        """A TCP port free on this host's address now (ports are per namespace: in a fresh
        namespace any fixed port is free too)."""
        if self.ns is None:
            with socket.socket() as s:
                s.bind((self.ip, 0))
                return int(s.getsockname()[1])
        code = f"import socket; s = socket.socket(); s.bind(({self.ip!r}, 0)); print(s.getsockname()[1])"
        return int(self.run([sys.executable, "-c", code]).stdout)


class NetRig:
    """Namespaces on a private bridge, partitions between them, and their cleanup.

    ``NetRig(hosts=(...))`` has no side effects; ``start()`` (or ``with``) builds the
    bridge and the named hosts, ``host(name)`` adds more later, ``close()`` removes it all.
    """

    def __init__(self, hosts: Iterable[str] = (), *, echo: bool = True) -> None:
        self.initial_hosts = list(hosts)
        self.echo = echo  # print each event as it happens (pytest shows it for a failed test)
        # Fixed length (2 + 5 + 2), so no rig's prefix is a prefix of another's; the longest
        # interface name is prefix + "v" + 3 digits = 13 < IFNAMSIZ (15 usable).
        self.prefix = "rq" + _b36(os.getpid(), 5) + _b36(random.randrange(36**2), 2)
        self.bridge = self.prefix + "b"
        self.sink = (self.prefix + "k0", self.prefix + "k1")
        self.subnet: ipaddress.IPv4Network | None = None
        self.ip_cmd = "ip"
        self.hosts: dict[str, Host] = {}
        self.events: list[Event] = []
        self.t0 = time.monotonic()
        self._procs: list[subprocess.Popen[Any]] = []
        self._isolated: set[Host] = set()
        self._cuts: dict[frozenset[Host], CutMode] = {}
        self._root: Host | None = None
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> NetRig:
        # `with NetRig(...)` starts it; `with rig` on a started one (the fixture) just owns it
        return self if self.subnet is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> NetRig:
        """Build the bridge and the initial hosts. Raises NetRigUnavailable when namespaces
        cannot be made here; whatever it raises, it has removed what it made."""
        assert self.subnet is None and not self._closed, "a rig starts once"
        _LIVE_RIGS.add(self)  # before the first command: atexit must see a half-built rig
        try:
            self._start()
        except BaseException as e:
            try:
                self.close()
            except Exception as ce:  # the setup error stays the one raised; this rides along
                e.add_note(f"and the cleanup after it failed: {ce}")
            raise
        return self

    def _start(self) -> None:
        ip = shutil.which("ip")
        if ip is None:
            raise NetRigUnavailable(f"`ip` (iproute2) not found on PATH={os.environ.get('PATH', '')!r}")
        self.ip_cmd = ip
        self.t0 = time.monotonic()
        # Two rigs starting at once (parallel test runs) must not pick the same prefix or
        # subnet: each checks what exists and creates its bridge (whose connected route
        # the next one's check sees) under one host-wide lock.
        with _rig_lock():
            while self._names_in_use():
                self.prefix = self.prefix[:-2] + _b36(random.randrange(36**2), 2)
                self.bridge, self.sink = self.prefix + "b", (self.prefix + "k0", self.prefix + "k1")
            self.subnet = self._pick_subnet()
            self._probe()
        self._root = Host(self, "root", None, self.root_ip, None)
        self.log(f"rig {self.prefix}: bridge {self.bridge} {self.root_ip}/24")
        for name in self.initial_hosts:
            self.host(name)

    def _probe(self) -> None:
        """Create the bridge and try a namespace with a veth in it: the first commands that
        need privileges or kernel support, so their failure means "unavailable", not a bug."""
        assert self.subnet is not None
        probe_ns, probe_veth = self.prefix + "-probe", self.prefix + "p"
        steps: list[list[str]] = [
            ["link", "add", self.bridge, "type", "bridge", "stp_state", "0", "forward_delay", "0"],
            ["netns", "add", probe_ns],
            ["link", "add", probe_veth, "type", "veth", "peer", "name", NS_DEV, "netns", probe_ns],
        ]
        for args in steps:
            try:
                self._ip(*args)
            except NetRigError as e:
                raise NetRigUnavailable(
                    f"network namespaces unavailable: `{' '.join(e.cmd)}` failed: {e.stderr.strip() or e}",
                    e.cmd,
                    e.returncode,
                    e.stderr,
                ) from e
        self._ip("link", "del", probe_veth)
        self._ip("netns", "del", probe_ns)
        self._no_ipv6(self.bridge)
        self._ip("addr", "add", f"{self.root_ip}/{self.subnet.prefixlen}", "dev", self.bridge)
        self._ip("link", "set", self.bridge, "up")

    def close(self) -> None:
        """Kill the processes, delete everything with the rig's prefix. Idempotent. Raises
        NetRigError if something of the rig is still there afterwards."""
        if self._closed:
            return
        self._closed = True
        errors: list[str] = []
        self._kill_processes(errors)
        self._sweep(errors)
        _LIVE_RIGS.discard(self)
        left = self.leftovers()
        self.log("rig closed" + (f"; LEFT BEHIND: {left}" if left else ""))
        if left:
            raise NetRigError(f"rig {self.prefix} left {left} behind; errors: {errors}")

    def _kill_processes(self, errors: list[str]) -> None:
        live = [p for p in self._procs if p.poll() is None]
        for p in live:
            _killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + TERM_GRACE
        for p in live:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(max(0.0, deadline - time.monotonic()))
        for p in self._procs:
            # The whole group of each one signalled above, even if its leader has exited:
            # its children may not have. (A group with a member left keeps its id reserved.)
            if p in live or p.poll() is None:
                _killpg(p.pid, signal.SIGKILL)
            try:
                p.wait(5.0)
            except subprocess.TimeoutExpired:
                errors.append(f"pid {p.pid} survived SIGKILL")
            # Its pipes stay open: they are the caller's, and a reader thread of the caller
            # may still be draining one (it sees EOF now; closing under it would raise there).
        # Anything else still in a namespace of ours (started with exec_prefix, or a child
        # that made its own session): a namespace outlives `ip netns del` while it runs.
        for ns in self._own_namespaces():
            r = self._ip("netns", "pids", ns, check=False)
            for pid in r.stdout.split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)

    def _sweep(self, errors: list[str]) -> None:
        for ns in self._own_namespaces():
            r = self._ip("netns", "del", ns, check=False)
            if r.returncode:
                errors.append(r.stderr.strip())
        # Deleting one end of a veth deletes its peer; the bridge goes last (not needed,
        # but then no port is ever left on a deleted bridge in between).
        for dev in sorted(self._own_links(), key=lambda d: d == self.bridge):
            r = self._ip("link", "del", dev, check=False)
            if r.returncode and dev in self._own_links():  # a peer deleted with its end is fine
                errors.append(r.stderr.strip())
        for dst in self._own_routes():
            r = self._ip("route", "del", dst, check=False)
            if r.returncode:
                errors.append(r.stderr.strip())

    def leftovers(self) -> list[str]:
        """What of this rig exists now: namespaces, interfaces, root routes in its subnet."""
        return [*self._own_namespaces(), *self._own_links(), *(f"route {d}" for d in self._own_routes())]

    def _own_namespaces(self) -> list[str]:
        r = self._ip("-j", "netns", "list", check=False)
        names = [n["name"] for n in json.loads(r.stdout or "[]")] if r.returncode == 0 else []
        return [n for n in names if n.startswith(self.prefix)]

    def _own_links(self) -> list[str]:
        r = self._ip("-j", "link", "show", check=False)
        names = [n["ifname"] for n in json.loads(r.stdout or "[]")] if r.returncode == 0 else []
        return [n for n in names if n.startswith(self.prefix)]

    def _own_routes(self) -> list[str]:
        """Routes of the root namespace's main table inside the rig's subnet. The subnet was
        free when the rig started, so they are the rig's (cut with the root namespace)."""
        if self.subnet is None:
            return []
        r = self._ip("-j", "-4", "route", "show", "table", "main", check=False)
        out = []
        for route in json.loads(r.stdout or "[]") if r.returncode == 0 else []:
            dst = route.get("dst", "")
            net = _as_net(dst)
            if net is not None and net.subnet_of(self.subnet) and route.get("dev") != self.bridge:
                out.append(dst)
        return out

    # -- building --------------------------------------------------------------------------

    @property
    def root_ip(self) -> str:
        assert self.subnet is not None, "rig not started"
        return str(self.subnet.network_address + 1)

    @property
    def root(self) -> Host:
        """The root namespace as a host: the bridge address, processes spawned unchanged."""
        assert self._root is not None, "rig not started"
        return self._root

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def host(self, name: str) -> Host:
        """A new namespace ``<prefix>-<name>`` on the bridge with the next address."""
        assert self.subnet is not None and not self._closed, "rig not started, or closed"
        if not _NAME_RE.fullmatch(name) or name == "root" or name in self.hosts:
            raise ValueError(f"bad or duplicate host name {name!r}")
        n = len(self.hosts) + 2  # .1 is the bridge
        if n > 254:
            raise ValueError("a rig has at most 253 hosts")
        ns, veth, ip = f"{self.prefix}-{name}", f"{self.prefix}v{n}", str(self.subnet.network_address + n)
        self._ip("netns", "add", ns)
        # The namespace end is created inside the namespace, so its name (eth0) never
        # exists in the root namespace and cannot collide with anything there.
        self._ip("link", "add", veth, "type", "veth", "peer", "name", NS_DEV, "netns", ns)
        self._no_ipv6(veth)
        self._ip("link", "set", veth, "master", self.bridge, "up")
        self._ip("addr", "add", f"{ip}/{self.subnet.prefixlen}", "dev", NS_DEV, ns=ns)
        self._ip("link", "set", "lo", "up", ns=ns)
        self._ip("link", "set", NS_DEV, "up", ns=ns)
        self._ip("route", "add", "default", "via", self.root_ip, "dev", NS_DEV, ns=ns)
        h = self.hosts[name] = Host(self, name, ns, ip, veth)
        self.log(f"host {name}: ns {ns}, {ip}, veth {veth}")
        return h

    def _ensure_sink(self, h: Host) -> str:
        """The sink device of ``h``: a veth with ARP off whose peer stays down, so what is
        routed into it is counted as a tx drop and vanishes, with no error to the sender."""
        out, peer = NS_SINK if h.ns is not None else self.sink
        if not h.has_sink:
            self._ip("link", "add", out, "type", "veth", "peer", "name", peer, ns=h.ns)
            if h.ns is None:
                self._no_ipv6(out)
            self._ip("link", "set", out, "arp", "off", "up", ns=h.ns)
            h.has_sink = True
        return out

    def _pick_subnet(self) -> ipaddress.IPv4Network:
        """10.<a>.<b>.0/24 that no route of the root namespace (any table) overlaps, other
        than the default route."""
        r = self._ip("-j", "-4", "route", "show", "table", "all", check=False)
        taken = [_as_net(x.get("dst", "")) for x in (json.loads(r.stdout or "[]") if r.returncode == 0 else [])]
        nets = [t for t in taken if t is not None and t.prefixlen > 0]
        rng = random.Random(os.getpid() ^ int.from_bytes(os.urandom(4), "big"))
        for _ in range(200):
            # 10.0/16 and 10.1/16 are the most common private choices; stay above them.
            cand = ipaddress.IPv4Network(f"10.{rng.randrange(16, 255)}.{rng.randrange(256)}.0/24")
            if not any(cand.overlaps(t) for t in nets):
                return cand
        raise NetRigUnavailable(f"no 10.x.y.0/24 free of the root namespace's routes {sorted(map(str, nets))}")

    def _names_in_use(self) -> bool:
        return bool(self._own_namespaces() or self._own_links())

    def _no_ipv6(self, dev: str) -> None:
        """No IPv6 link-local address on a root-namespace interface of the rig: the root
        namespace gets the bridge's IPv4 address and nothing else. Absent file: no IPv6."""
        p = Path(f"/proc/sys/net/ipv6/conf/{dev}/disable_ipv6")
        if p.exists():
            p.write_text("1\n")

    # -- partitions --------------------------------------------------------------------------

    def isolate(self, h: Host) -> None:
        """Cut ``h`` from everyone (root-side veth down); inside ``h`` all still works."""
        t = time.monotonic()
        self._set_link(h, up=False)
        self.log(f"isolate {h.name} ({h.ip}): {h.veth} down [{_ms(t)}]")

    def heal(self, h: Host) -> None:
        """Undo ``isolate(h)`` (cuts made with ``cut`` stay)."""
        t = time.monotonic()
        self._set_link(h, up=True)
        self.log(f"heal {h.name} ({h.ip}): {h.veth} up [{_ms(t)}]")

    def _set_link(self, h: Host, *, up: bool) -> None:
        self._own_host(h, allow_root=False)
        assert h.veth is not None
        self._ip("link", "set", h.veth, "up" if up else "down")
        if up:
            self._isolated.discard(h)
        else:
            self._isolated.add(h)

    def cut(self, a: Host, b: Host, *, mode: CutMode = "drop") -> None:
        """Drop all traffic between ``a`` and ``b``, both ways; each keeps its other links.
        ``b`` (or ``a``) may be ``rig.root``. See the module docstring for the modes."""
        t = time.monotonic()
        self._cut(a, b, mode)
        self.log(f"cut {a.name} <-> {b.name} ({mode}) [{_ms(t)}]")

    def uncut(self, a: Host, b: Host) -> None:
        t = time.monotonic()
        self._uncut(a, b)
        self.log(f"uncut {a.name} <-> {b.name} [{_ms(t)}]")

    def partition(self, side: Iterable[Host], other: Iterable[Host], *, mode: CutMode = "drop") -> None:
        """Cut every host of ``side`` from every host of ``other`` (each keeps its links
        within its side, and to hosts in neither)."""
        t = time.monotonic()
        xs, ys = list(side), list(other)
        for x in xs:
            for y in ys:
                self._cut(x, y, mode)
        self.log(f"partition {[h.name for h in xs]} | {[h.name for h in ys]} ({mode}) [{_ms(t)}]")

    def heal_all(self) -> None:
        """Undo every isolate and cut."""
        t = time.monotonic()
        for pair in list(self._cuts):
            self._uncut(*pair)
        for h in list(self._isolated):
            self._set_link(h, up=True)
        self.log(f"heal all [{_ms(t)}]")

    def _cut(self, a: Host, b: Host, mode: CutMode) -> None:
        self._own_host(a, allow_root=True)
        self._own_host(b, allow_root=True)
        if a is b or (a.is_root and b.is_root):
            raise ValueError(f"cannot cut {a.name} from {b.name}")
        if mode not in ("drop", "reject"):
            raise ValueError(f"mode {mode!r}")
        # `replace`: cutting a cut pair again (e.g. in the other mode) just swaps the routes.
        for src, dst in ((a, b), (b, a)):
            self._route_away(src, dst.ip, mode)
            if dst.is_root:
                self._route_away(src, "default", mode)
        self._cuts[frozenset((a, b))] = mode

    def _route_away(self, src: Host, dst: str, mode: CutMode) -> None:
        dst_net = dst if dst == "default" else f"{dst}/32"
        if mode == "reject":
            self._ip("route", "replace", "prohibit", dst_net, ns=src.ns)
        else:
            self._ip("route", "replace", dst_net, "dev", self._ensure_sink(src), ns=src.ns)

    def _uncut(self, a: Host, b: Host) -> None:
        if self._cuts.pop(frozenset((a, b)), None) is None:
            return
        for src, dst in ((a, b), (b, a)):
            self._ip("route", "del", f"{dst.ip}/32", ns=src.ns)
            if dst.is_root:
                self._ip("route", "replace", "default", "via", self.root_ip, "dev", NS_DEV, ns=src.ns)

    def _own_host(self, h: Host, *, allow_root: bool) -> None:
        if h.rig is not self or self._closed:
            raise ValueError(f"{h} is not a host of open rig {self.prefix}")
        if h.is_root and not allow_root:
            raise ValueError("the root namespace cannot be isolated: cut it from hosts instead")

    # -- log ---------------------------------------------------------------------------------

    def log(self, what: str) -> Event:
        """Add ``what`` to the rig's timeline (printed when ``echo``)."""
        ev = Event(time.monotonic(), what)
        self.events.append(ev)
        if self.echo:
            print(f"[netrig +{ev.t - self.t0:7.3f}s] {what}", flush=True)
        return ev

    def timeline(self) -> str:
        """The events so far, one per line, as offsets from the rig's start."""
        return "\n".join(f"+{e.t - self.t0:7.3f}s  {e.what}" for e in self.events)

    # -- commands ----------------------------------------------------------------------------

    def _ip(self, *args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [self.ip_cmd, *(("-n", ns) if ns is not None else ()), *args]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=IP_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired) as e:
            if not check:
                return subprocess.CompletedProcess(cmd, -1, "", str(e))
            raise NetRigError(f"`{' '.join(cmd)}`: {e}", cmd) from e
        if check and r.returncode != 0:
            raise NetRigError(
                f"`{' '.join(cmd)}` exited {r.returncode}: {r.stderr.strip()}", cmd, r.returncode, r.stderr
            )
        return r


def _as_net(dst: str) -> ipaddress.IPv4Network | None:
    """A route's ``dst`` from ``ip -j route`` ("10.1.2.0/24", "10.1.2.3", "default", ...)."""
    if dst == "default":
        return ipaddress.IPv4Network("0.0.0.0/0")
    try:
        return ipaddress.IPv4Network(dst, strict=False)
    except ValueError:
        return None


def _ms(t: float) -> str:
    return f"{(time.monotonic() - t) * 1000:.1f} ms"


def _killpg(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


@contextlib.contextmanager
def _rig_lock() -> Iterator[None]:
    path = Path(tempfile.gettempdir()) / "rmq-netrig.lock"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
    except PermissionError:
        # fs.protected_regular refuses O_CREAT on another user's file in /tmp; a read-only
        # open is all flock needs (a non-root user then fails on the bridge, not here).
        fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


# Rigs started and not yet closed. Module state on purpose: it is what the atexit hook
# needs to remove a rig whose owner never reached close() (the interpreter exiting through
# sys.exit or a second Ctrl-C in a test, a script that forgot `with`), which would otherwise
# leave namespaces and interfaces in the root namespace for good.
_LIVE_RIGS: set[NetRig] = set()


def _close_live_rigs() -> None:
    for rig in list(_LIVE_RIGS):
        try:
            rig.close()
        except Exception as e:  # at exit there is no one left to raise to
            print(f"netrig: cleanup of {rig.prefix} at exit: {e}", file=sys.stderr)


atexit.register(_close_live_rigs)


def netrig_fixture(scope: Literal["function", "module"] = "function", hosts: Iterable[str] = ()) -> Any:
    """A pytest fixture yielding a started NetRig (with ``hosts``), closed afterwards; it
    skips the test with the failing command and its error where namespaces cannot be
    made, or fails it if RMQ_REQUIRE_NETNS is set. In a test module:

        netrig = netrig_fixture()
    """
    names = list(hosts)

    @pytest.fixture(scope=scope)
    def fixture() -> Iterator[NetRig]:
        rig = NetRig(names)
        try:
            rig.start()
        except NetRigUnavailable as e:
            skip_unavailable(e)
        with rig:
            yield rig

    return fixture


def skip_unavailable(e: NetRigUnavailable) -> NoReturn:
    """Skip the test for ``e`` (it names the command that failed and its error); fail it
    instead when RMQ_REQUIRE_NETNS is set."""
    if os.environ.get("RMQ_REQUIRE_NETNS"):
        pytest.fail(f"RMQ_REQUIRE_NETNS is set but {e}")
    pytest.skip(str(e))
