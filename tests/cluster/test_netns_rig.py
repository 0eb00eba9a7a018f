"""The partition rig (tests/cluster/netns.py) on plain TCP: echo servers and clients as
real processes in namespaces, links isolated, cut and healed under them, and nothing of
a rig left behind afterwards, whether it ends normally, by an exception, halfway through
its setup, or at interpreter exit.

Reachability is checked with one-shot probes (connect, send a line, read the echo, with a
0.5 s timeout, all at once) and with long-lived connections opened before the partition,
which must stop delivering while it lasts and deliver again after it heals. Every test
prints the rig's timeline (partition steps and the test's marks, with their offsets).
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.cluster.netns import Host, NetRig, NetRigError, NetRigUnavailable, netrig_fixture, skip_unavailable
from tests.harness import wait_for

netrig = netrig_fixture()

REPO = Path(__file__).resolve().parents[2]
PROBE_TIMEOUT = 0.5

# argv: port addr...; binds every addr on one port (0: the first bind picks it), echoes lines.
ECHO_SERVER = r"""
import socket, sys, threading
port = int(sys.argv[1])
def echo(c):
    with c:
        while data := c.recv(4096):
            c.sendall(data)
def serve(s):
    while True:
        threading.Thread(target=echo, args=(s.accept()[0],), daemon=True).start()
for addr in sys.argv[2:]:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(64)
    port = s.getsockname()[1]
    threading.Thread(target=serve, args=(s,), daemon=True).start()
print("ready", port, flush=True)
threading.Event().wait()
"""

# argv: addr port timeout; prints "ok <seconds>" or "<exception class> <seconds>".
PROBE = r"""
import socket, sys, time
t = time.monotonic()
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])) as c:
        c.sendall(b"probe\n")
        r = "ok" if c.recv(16) == b"probe\n" else "bad-echo"
except OSError as e:
    r = type(e).__name__
print(r, round(time.monotonic() - t, 3))
"""

# argv: addr port; one connection: stdin lines go out, "got <line>" for each line back.
CLIENT = r"""
import socket, sys, threading
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
c.settimeout(None)
print("connected", flush=True)
def pump():
    for line in c.makefile("r"):
        print("got", line.strip(), flush=True)
threading.Thread(target=pump, daemon=True).start()
for line in sys.stdin:
    c.sendall(line.encode())
"""


def echo_server(h: Host, *addrs: str) -> int:
    """An echo server in ``h`` on its address (and ``addrs``); returns its port."""
    p = h.spawn([sys.executable, "-c", ECHO_SERVER, "0", h.ip, *addrs], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    line = p.stdout.readline().split()
    p.stdout.close()  # it prints nothing more
    assert line[:1] == ["ready"], f"echo server in {h.name} did not start: {line}"
    return int(line[1])


class Client:
    """A long-lived connection from ``h`` to ``addr``: ``send`` a line, ``got`` the echoes."""

    def __init__(self, h: Host, addr: tuple[str, int]) -> None:
        self.name = h.name
        self.proc = h.spawn(
            [sys.executable, "-c", CLIENT, addr[0], str(addr[1])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "connected", f"client in {h.name} did not connect"
        self.got: list[str] = []
        # Ends at EOF, when the rig kills the process.
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None and self.proc.stdin is not None
        with self.proc.stdout, self.proc.stdin:  # the process is gone at EOF: its pipes too
            for line in self.proc.stdout:
                self.got.append(line.split(" ", 1)[1].strip())

    def send(self, msg: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(msg + "\n")
        self.proc.stdin.flush()


def probe(src: Host, dst: tuple[str, int], timeout: float = PROBE_TIMEOUT) -> tuple[str, float]:
    """Connect from ``src`` and get one echo: ("ok" or the exception's class, seconds taken)."""
    out = src.run([sys.executable, "-c", PROBE, dst[0], str(dst[1]), str(timeout)], timeout=timeout + 10).stdout
    result, secs = out.split()
    return result, float(secs)


def reach(pairs: dict[str, tuple[Host, tuple[str, int]]]) -> dict[str, str]:
    """Every probe of ``pairs`` (label: (client host, server address)) at once."""
    with ThreadPoolExecutor(len(pairs)) as pool:
        futs = {k: pool.submit(probe, src, dst) for k, (src, dst) in pairs.items()}
        return {k: f.result()[0] for k, f in futs.items()}


def all_got(clients: Iterable[Client], msg: str, timeout: float = 5.0) -> float:
    return wait_for(lambda: all(msg in c.got for c in clients), timeout)


def objects_of(prefix: str, subnet: ipaddress.IPv4Network | None) -> list[str]:
    """The rig's namespaces, interfaces and routes as plain `ip` shows them now: independent
    of the rig's own bookkeeping, which is what is under test."""
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    routes = subprocess.run(["ip", "-4", "route", "show", "table", "all"], capture_output=True, text=True).stdout
    found = [line.split()[0] for line in netns.splitlines() if line.startswith(prefix)]
    found += [n for line in links.splitlines() if (n := line.split(":")[1].strip().split("@")[0]).startswith(prefix)]
    if subnet is not None:
        net = str(subnet.network_address).rsplit(".", 1)[0] + "."
        found += [f"route {line}" for line in routes.splitlines() if net in line]
    return found


def dead(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def root_routes(rig: NetRig) -> list[tuple[str, str]]:
    """(dst, dev or type) of the root namespace's main-table routes in the rig's subnet."""
    assert rig.subnet is not None
    r = subprocess.run(["ip", "-j", "-4", "route", "show", "table", "main"], capture_output=True, text=True)
    return [
        (x["dst"], x.get("dev") or x.get("type", ""))
        for x in json.loads(r.stdout)
        if x["dst"] != "default" and ipaddress.IPv4Network(x["dst"]).subnet_of(rig.subnet)
    ]


def other_root_address(rig: NetRig) -> str | None:
    """An IPv4 address of the root namespace outside the rig (e.g. eth0's), if any."""
    r = subprocess.run(["ip", "-j", "-4", "addr", "show", "scope", "global"], capture_output=True, text=True)
    for link in json.loads(r.stdout or "[]"):
        for a in link.get("addr_info", []):
            if rig.subnet is not None and ipaddress.IPv4Address(a["local"]) not in rig.subnet:
                return str(a["local"])
    return None


def test_isolate_and_heal(netrig: NetRig) -> None:
    rig = netrig
    a, b = rig.host("a"), rig.host("b")
    port = echo_server(a, "127.0.0.1")  # a's address and its own loopback
    srv = (a.ip, port)
    probes = {"b->a": (b, srv), "root->a": (rig.root, srv), "a->a": (a, srv), "a->lo": (a, ("127.0.0.1", port))}
    assert reach(probes) == dict.fromkeys(probes, "ok")
    clients = [Client(b, srv), Client(rig.root, srv)]
    for c in clients:
        c.send("m1")
    all_got(clients, "m1")

    rig.isolate(a)
    cut_off = reach(probes)
    assert cut_off == {"b->a": "TimeoutError", "root->a": "TimeoutError", "a->a": "ok", "a->lo": "ok"}
    for c in clients:
        c.send("m2")
    time.sleep(1.0)
    assert [c.got for c in clients] == [["m1"], ["m1"]], "an established connection delivered across the partition"
    rig.log("isolated: new connections time out, established ones deliver nothing for 1s, a reaches itself")

    rig.heal(a)
    took = all_got(clients, "m2", timeout=10.0)
    rig.log(f"healed: established connections delivered the held line {took:.2f}s after heal")
    assert reach(probes) == dict.fromkeys(probes, "ok")
    print(rig.timeline())


def test_cut_between_two_hosts(netrig: NetRig) -> None:
    rig = netrig
    a, b = rig.host("a"), rig.host("b")
    sa, sb, sr = (a.ip, echo_server(a)), (b.ip, echo_server(b)), (rig.root_ip, echo_server(rig.root))
    probes = {
        "a->b": (a, sb),
        "b->a": (b, sa),
        "a->root": (a, sr),
        "root->a": (rig.root, sa),
        "b->root": (b, sr),
        "root->b": (rig.root, sb),
    }
    assert reach(probes) == dict.fromkeys(probes, "ok")
    ba, ra = Client(b, sa), Client(rig.root, sa)
    ba.send("m1")
    ra.send("m1")
    all_got([ba, ra], "m1")

    rig.cut(a, b)
    cut_off = reach(probes)
    assert cut_off == {**dict.fromkeys(probes, "ok"), "a->b": "TimeoutError", "b->a": "TimeoutError"}
    ba.send("m2")
    ra.send("m2")
    all_got([ra], "m2")  # the root's connection to a is not part of the cut
    time.sleep(1.0)
    assert ba.got == ["m1"], "the established b->a connection delivered across the cut"
    rig.log("cut a<->b (drop): a-b times out both ways, a and b still reach the root and back")

    rig.uncut(a, b)
    took = all_got([ba], "m2", timeout=10.0)
    rig.log(f"uncut: the established b->a connection delivered the held line {took:.2f}s after")
    assert reach(probes) == dict.fromkeys(probes, "ok")

    # reject: the sender's kernel refuses at once instead of a silent drop
    rig.cut(b, a, mode="reject")
    results = {k: probe(*v) for k, v in (("a->b", probes["a->b"]), ("b->a", probes["b->a"]))}
    assert {k: r for k, (r, _) in results.items()} == {"a->b": "PermissionError", "b->a": "PermissionError"}
    assert max(s for _, s in results.values()) < PROBE_TIMEOUT / 2, results
    assert reach({k: probes[k] for k in ("a->root", "root->a", "b->root")}) == dict.fromkeys(
        ("a->root", "root->a", "b->root"), "ok"
    )
    rig.uncut(a, b)
    assert reach(probes) == dict.fromkeys(probes, "ok")
    print(rig.timeline())


def test_cut_from_root_and_heal_all(netrig: NetRig) -> None:
    rig = netrig
    a, b, c = rig.host("a"), rig.host("b"), rig.host("c")
    other = other_root_address(rig)
    sr_port = echo_server(rig.root, *([other] if other else []))
    sa, sb, sr = (a.ip, echo_server(a)), (b.ip, echo_server(b)), (rig.root_ip, sr_port)
    probes = {
        "a->root": (a, sr),
        "root->a": (rig.root, sa),
        "a->b": (a, sb),
        "b->a": (b, sa),
        "b->root": (b, sr),
        "c->a": (c, sa),
    }
    if other:
        # a reaches the root namespace's other addresses through its default route
        probes["a->root-other"] = (a, (other, sr_port))
    assert reach(probes) == dict.fromkeys(probes, "ok")
    ra = Client(rig.root, sa)
    ra.send("m1")
    all_got([ra], "m1")

    rig.cut(a, rig.root)
    assert root_routes(rig) == [(str(rig.subnet), rig.bridge), (a.ip, rig.sink[0])]
    expect_cut = {**dict.fromkeys(probes, "ok"), "a->root": "TimeoutError", "root->a": "TimeoutError"}
    if other:
        expect_cut["a->root-other"] = "TimeoutError"
    assert reach(probes) == expect_cut
    ra.send("m2")
    time.sleep(1.0)
    assert ra.got == ["m1"], "the established root->a connection delivered across the cut"
    rig.log("cut a<->root (drop): a-root times out both ways (all root addresses), a-b and b-root work")
    rig.uncut(rig.root, a)
    took = all_got([ra], "m2", timeout=10.0)
    rig.log(f"uncut: the established root->a connection delivered the held line {took:.2f}s after")
    assert reach(probes) == dict.fromkeys(probes, "ok")
    assert root_routes(rig) == [(str(rig.subnet), rig.bridge)]

    # a partition of {a} from {b, root} plus c isolated, then everything healed in one call
    rig.partition([a], [b, rig.root], mode="reject")
    rig.isolate(c)
    expect = {**dict.fromkeys(probes, "PermissionError"), "b->root": "ok", "c->a": "TimeoutError"}
    assert reach(probes) == expect
    rig.heal_all()
    assert reach(probes) == dict.fromkeys(probes, "ok")
    assert root_routes(rig) == [(str(rig.subnet), rig.bridge)]
    print(rig.timeline())


class _Boom(Exception):
    pass


DEAF_TO_SIGTERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(600)"
)


def test_rig_leaves_nothing_behind() -> None:
    """A rig ended by an exception in the middle of partitions, with processes that ignore
    SIGTERM, left their group, or were started around the rig's back: all gone after."""
    rig = NetRig(hosts=("a", "b"))
    try:
        rig.start()
    except NetRigUnavailable as e:
        skip_unavailable(e)
    pids: list[int] = []
    untracked = None
    with pytest.raises(_Boom), rig:
        a, b = rig["a"], rig["b"]
        stubborn = a.spawn([sys.executable, "-c", DEAF_TO_SIGTERM], stdout=subprocess.PIPE)
        assert stubborn.stdout is not None and stubborn.stdout.readline()  # its handler is set
        stubborn.stdout.close()
        detached = a.run(["sh", "-c", "setsid sleep 600 >/dev/null 2>&1 & echo $!"]).stdout
        untracked = subprocess.Popen([*b.exec_prefix, "sleep", "600"], start_new_session=True)
        pids += [stubborn.pid, int(detached), untracked.pid, rig.root.spawn(["sleep", "600"]).pid]
        rig.isolate(a)
        rig.cut(a, rig.root, mode="reject")  # a prohibit route in the root namespace
        rig.cut(b, rig.root)  # a sink pair in the root namespace, a route into it
        rig.cut(a, b)
        assert len(objects_of(rig.prefix, rig.subnet)) > 8
        raise _Boom
    assert objects_of(rig.prefix, rig.subnet) == []
    assert untracked is not None and untracked.wait(5) == -9
    wait_for(lambda: all(dead(p) for p in pids), 5.0)
    print(rig.timeline())


def test_setup_failing_halfway_leaves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The third host's veth fails to appear after its namespace was made: start() raises
    and has removed the bridge, the first two hosts and the third namespace."""
    real_ip = NetRig._ip

    def failing_ip(
        self: NetRig, *args: str, ns: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        if args[:3] == ("link", "add", self.prefix + "v4"):
            raise NetRigError("injected failure", [self.ip_cmd, *args])
        return real_ip(self, *args, ns=ns, check=check)

    monkeypatch.setattr(NetRig, "_ip", failing_ip)
    rig = NetRig(hosts=("a", "b", "c"))
    try:
        rig.start()
    except NetRigUnavailable as e:
        skip_unavailable(e)
    except NetRigError as e:
        assert "injected failure" in str(e)
    else:
        pytest.fail("start() did not raise")
    assert [ev.what.split(":")[0] for ev in rig.events] == [f"rig {rig.prefix}", "host a", "host b", "rig closed"]
    assert objects_of(rig.prefix, rig.subnet) == []
    print(rig.timeline())


def test_rig_never_closed_is_removed_at_exit() -> None:
    """A process that exits (sys.exit) with a started rig: the atexit hook removes it."""
    code = (
        "import sys\n"
        "from tests.cluster.netns import NetRig, NetRigUnavailable\n"
        "try:\n"
        "    rig = NetRig(hosts=('a',), echo=False).start()\n"
        "except NetRigUnavailable as e:\n"
        "    print('unavailable', e); sys.exit(0)\n"
        "p = rig['a'].spawn(['sleep', '600'])\n"
        "print(rig.prefix, rig.subnet, p.pid, flush=True)\n"
        "sys.exit(3)\n"
    )
    t = time.monotonic()
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    if r.stdout.startswith("unavailable "):
        pytest.skip(r.stdout.split(" ", 1)[1].strip())
    assert r.returncode == 3, r.stderr
    prefix, subnet, pid = r.stdout.split()
    print(f"child with an unclosed rig {prefix} exited after {time.monotonic() - t:.2f}s")
    assert objects_of(prefix, ipaddress.IPv4Network(subnet)) == []
    assert dead(int(pid))


def test_unavailable_names_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without `ip`, or without privileges, start() raises NetRigUnavailable saying which
    command failed and how (the fixture's skip reason), and leaves nothing."""
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(NetRigUnavailable, match=r"`ip` \(iproute2\) not found"):
        NetRig().start()
    monkeypatch.undo()

    # Not privileged: a user namespace of its own (root inside, uid 0 mapped so the
    # checkout stays readable) has no say over this network namespace.
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("`unshare` (util-linux) not found: cannot run the rig without privileges")
    code = (
        "from tests.cluster.netns import NetRig, NetRigUnavailable\n"
        "rig = NetRig(echo=False)\n"
        "try:\n"
        "    rig.start()\n"
        "except NetRigUnavailable as e:\n"
        "    print(rig.prefix, e)\n"
    )
    cmd = [unshare, "--user", "--map-root-user", sys.executable, "-c", code]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
    if r.returncode != 0 and not r.stdout:
        pytest.skip(f"`{' '.join(cmd[:3])}` failed: {r.stderr.strip()[-300:]}")
    prefix, msg = r.stdout.split(" ", 1)
    print(msg.strip())
    assert "network namespaces unavailable: `" in msg and f"link add {prefix}b type bridge" in msg, msg
    assert "Operation not permitted" in msg, msg
    assert objects_of(prefix, None) == []
