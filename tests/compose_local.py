"""docker-compose.yml -> local processes: the compose deployment without a Docker engine.

``ComposeDeployment`` reads the compose file and, for every service whose command is
``rmq ...``, runs that same command as a local process (``tests.harness``) with the
service's environment and mounted files; a service whose command is an etcd binary (the
official image's ``/usr/local/bin/etcd ...``) runs the local ``etcd`` (Debian etcd-server,
tests/cluster/etcd_util.py) with the same flags. ``start(stack)`` runs them all: the etcd
members first, until they agree on a leader, then the rmq services in ``depends_on`` order.
Nothing is copied by hand from the compose file; what a container would have differently
is translated:

* every container port a service declares (``ports:`` container side, ``expose:``)
  gets a free port on 127.0.0.1 (below the kernel's ephemeral range: see
  ``local_ports``); a command argument equal to such a port, and a ``*Port`` key of a
  mounted config file with that value, take the local port;
* ``service:port`` anywhere (NAMESRV_ADDR, config values, Prometheus targets, etcd's
  peer and client URLs) becomes ``127.0.0.1:<local port>``; a service name as the value of
  an address key (``brokerIP2=broker-a``) becomes 127.0.0.1; a listen address on every
  interface with one of the service's own ports (``http://0.0.0.0:2379``) becomes
  ``127.0.0.1:<local port>``; a host address with a port the service publishes on the host
  (``proxyAdvertiseAddress=${RMQ_BROKER_IP}:8081`` for ``ports: ["8081:8081"]``) keeps the
  host and takes that port's local port;
* a named volume becomes a directory under the work dir; container paths below a
  mount point (storePathRootDir, --kv-path) point there; a bind-mounted config file is
  copied with its values translated, and the command gets the copy;
* ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}`` and ``$$`` are interpolated as
  compose does, from the environment given (not the test's own);
* override files (``docker compose -f base.yml -f override.yml``) are merged into the
  base as compose merges them (``merge_compose``);
* a service's ``configs`` are mounted files too: an inline ``content`` (interpolated) is
  written under the work dir, a ``file`` is bind-mounted; a container directory that holds
  mounts but is no mount itself (``rocketmqHome=/home/rmq/acl`` above a config mounted
  at ``/home/rmq/acl/conf/plain_acl.yml``) becomes a directory of links to them.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import shutil
import socket
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from rmq.child_process import ChildProcess
from tests.cluster.etcd_util import etcd_binary
from tests.harness import BrokerProcess, NameServerProcess, RmqProcess
from tests.metrics_util import free_ports
from tests.proxy.harness import READY as PROXY_READY
from tests.proxy.harness import ProxyProcess

_INTERP = re.compile(r"\$(?:\$|\{(?P<braced>[^}]*)\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))")
# keys whose value is a host (brokerIP2=broker-a); brokerName=broker-a is not one
_ADDRESS_KEY = re.compile(r"(IP\d*|Host|Addr)$")
_WILDCARD_HOSTS = ("0.0.0.0", "[::]")
# [ip:][host port:]container port[/proto]; an IPv4 address has dots (else "8081:8081" reads as ip:ctr)
_PORT_SPEC = re.compile(r"^(?:(?:\d+\.[\d.]+|\[[0-9a-f:]+\]):)?(?:(?P<host>[\d-]+):)?(?P<ctr>\d+)(?:/\w+)?$")


def load_yaml(path: Path) -> Any:
    return YAML(typ="safe").load(path.read_text())


def interpolate(value: str, env: dict[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        expr = m.group("braced") if m.group("braced") is not None else m.group("bare")
        for op in (":-", "-", ":?", "?"):
            name, sep, default = expr.partition(op)
            if sep:
                have = env.get(name)
                if op.startswith(":") and not have:
                    have = None
                if have is not None:
                    return have
                if "?" in op:
                    raise ValueError(f"compose: required variable {name} is not set: {default}")
                return default
        return env.get(expr, "")

    return _INTERP.sub(sub, value)


def _interp_all(obj: Any, env: dict[str, str]) -> Any:
    if isinstance(obj, str):
        return interpolate(obj, env)
    if isinstance(obj, list):
        return [_interp_all(x, env) for x in obj]
    if isinstance(obj, dict):
        return {k: _interp_all(v, env) for k, v in obj.items()}
    return obj


# service keys whose list items are merged by their container path, as compose does
_MERGE_BY_TARGET = {"volumes", "configs", "secrets"}


def _target(item: Any) -> str:
    if isinstance(item, dict):
        return str(item.get("target") or "/" + str(item.get("source", "")))
    parts = str(item).split(":")
    return parts[1] if len(parts) > 1 else "/" + parts[0]


def merge_compose(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` applied to ``base`` as compose applies a second ``-f`` file: mappings
    merge key by key, ``command`` / ``entrypoint`` / scalars are replaced, volumes and
    configs are merged by container path, other lists are appended (without repeats)."""
    out = dict(base)
    for key, value in override.items():
        have = out.get(key)
        if isinstance(have, dict) and isinstance(value, dict):
            out[key] = merge_compose(have, value)
        elif isinstance(have, list) and isinstance(value, list) and key not in ("command", "entrypoint"):
            if key in _MERGE_BY_TARGET:
                merged = {_target(i): i for i in have}
                merged.update({_target(i): i for i in value})
                out[key] = list(merged.values())
            else:
                out[key] = have + [v for v in value if v not in have]
        else:
            out[key] = value
    return out


def _published(svc: dict[str, Any]) -> list[tuple[int | None, int]]:
    """(host port or None, container port) of each ``ports:`` entry."""
    out: list[tuple[int | None, int]] = []
    for p in svc.get("ports") or []:
        if isinstance(p, dict):
            out.append((int(p["published"]) if p.get("published") else None, int(p["target"])))
            continue
        m = _PORT_SPEC.match(str(p))
        if m is None or "-" in (m.group("host") or ""):
            raise ValueError(f"compose: port spec {p!r} is not supported here")
        out.append((int(m.group("host")) if m.group("host") else None, int(m.group("ctr"))))
    return out


def _container_ports(svc: dict[str, Any]) -> list[int]:
    ports = [ctr for _, ctr in _published(svc)]
    for e in svc.get("expose") or []:
        ports.append(int(str(e).split("/")[0]))
    return ports


def local_ports(n: int) -> list[int]:
    """n distinct ports nobody listens on now, below the kernel's ephemeral port range.

    The ports are chosen when the file is read and bound only as each process starts, seconds
    later; a port of the ephemeral range may meanwhile become the local end of some outgoing
    connection (etcd's members and clients, the brokers' make many), and the process that
    wanted it runs without it. The kernel never hands out ports below that range. Falls back
    to ``free_ports`` where the range leaves no room below it."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 0
    if low - 10000 < 50 * n:
        return free_ports(n)
    chosen: list[int] = []
    with contextlib.ExitStack() as held:  # held while choosing: distinct ports
        for port in random.sample(range(10000, low), k=min(low - 10000, 50 * n)):
            s = held.enter_context(socket.socket())
            try:
                s.bind(("0.0.0.0", port))  # what the rmq servers bind (every address)
            except OSError:
                continue
            chosen.append(port)
            if len(chosen) == n:
                return chosen
    return free_ports(n)


@dataclass
class Mount:
    target: str  # path in the container
    source: Path  # path here
    named: bool  # a named volume (a directory we create) or a bind mount


class EtcdProcess(ChildProcess):
    """One etcd member of the compose file, run by the local ``etcd``. Ready is judged over
    HTTP (``healthy``): a member of 3 serves only once a quorum runs, so starting one does
    not wait."""

    def __init__(self, name: str, argv: list[str], workdir: Path, env: dict[str, str], volumes: list[Path]) -> None:
        super().__init__(name, argv, workdir, ready="", env=env)
        url = argv[argv.index("--advertise-client-urls") + 1].split(",")[0]
        self.addr = url.split("://", 1)[-1].rstrip("/")
        self.volumes = volumes  # its named volumes here: the member's data

    def healthy(self) -> bool:
        """etcd's /health: this member answers and its cluster has a leader."""
        try:
            with urllib.request.urlopen(f"http://{self.addr}/health", timeout=1) as r:
                return bool(json.loads(r.read()).get("health") == "true")
        except (OSError, ValueError):
            return False


@dataclass
class LocalService:
    name: str
    command: list[str]
    env: dict[str, str]
    ports: dict[int, int]  # container port -> local port
    mounts: list[Mount] = field(default_factory=list)


class ComposeDeployment:
    def __init__(
        self, compose_file: Path, workdir: Path, env: dict[str, str] | None = None, overrides: list[Path] = ()
    ) -> None:
        self.file = compose_file
        self.root = compose_file.parent
        self.workdir = workdir
        doc = load_yaml(compose_file)
        for o in overrides:
            doc = merge_compose(doc, load_yaml(o))
        self.doc = _interp_all(doc, env or {})
        self.services: dict[str, dict[str, Any]] = self.doc["services"]
        names = list(self.services)
        declared = [(n, p) for n in names for p in _container_ports(self.services[n])]
        self.port_map: dict[str, dict[int, int]] = {n: {} for n in names}
        for (n, p), local in zip(declared, local_ports(len(declared)), strict=True):
            self.port_map[n][p] = local
        # host port -> container port, per service
        self.host_ports: dict[str, dict[int, int]] = {
            n: {h: c for h, c in _published(self.services[n]) if h is not None} for n in names
        }
        self.local: dict[str, LocalService] = {}
        for n in names:
            self._local_service(n)

    # ------------------------------------------------------------------ reading
    def rmq_services(self) -> list[str]:
        """Services running ``rmq ...``, in depends_on order."""
        return self._in_order([n for n, s in self.services.items() if (s.get("command") or [None])[0] == "rmq"])

    def etcd_services(self) -> list[str]:
        """Services running etcd (the image's binary), in depends_on order."""
        return self._in_order([n for n, s in self.services.items() if _is_etcd(s.get("command") or [""])])

    def _in_order(self, wanted: list[str]) -> list[str]:
        """``wanted`` sorted so that each comes after the services it depends on."""
        done: list[str] = []

        def visit(n: str, path: tuple[str, ...] = ()) -> None:
            if n in done:
                return
            if n in path:
                raise ValueError(f"compose: depends_on cycle {path + (n,)}")
            for d in self._depends_on(n):
                visit(d, path + (n,))
            if n in wanted:
                done.append(n)

        for n in wanted:
            visit(n)
        return done

    def _depends_on(self, name: str) -> list[str]:
        dep = self.services[name].get("depends_on") or []
        return list(dep) if isinstance(dep, (list, dict)) else []

    def _mounts(self, name: str) -> list[Mount]:
        out = []
        for v in self.services[name].get("volumes") or []:
            if isinstance(v, dict):
                src, dst, kind = v.get("source", ""), v["target"], v.get("type", "volume")
                named = kind == "volume"
            else:
                src, _, rest = str(v).partition(":")
                dst = rest.split(":")[0]
                named = not src.startswith((".", "/", "~"))
            if named:
                path = self.workdir / name / "volumes" / (src or dst.strip("/").replace("/", "_"))
                path.mkdir(parents=True, exist_ok=True)
            else:
                path = (self.root / src).resolve()
            out.append(Mount(dst.rstrip("/") or "/", path, named))
        for c in self.services[name].get("configs") or []:
            out.append(self._config_mount(name, c))
        # longest target first: the most specific mount wins
        return sorted(out, key=lambda m: len(m.target), reverse=True)

    def _config_mount(self, name: str, ref: Any) -> Mount:
        source = ref["source"] if isinstance(ref, dict) else str(ref)
        target = _target(ref) if isinstance(ref, dict) else "/" + source
        config = (self.doc.get("configs") or {})[source]
        if "content" in config:
            path = self.workdir / name / "configs" / source
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(config["content"])
        else:
            path = (self.root / config["file"]).resolve()
        return Mount(target, path, False)

    def _mount_parent(self, name: str, value: str) -> str | None:
        """A local directory standing for container directory ``value`` when mounts lie
        below it but none is it: links to those mounts, at their places."""
        below = [m for m in self.local[name].mounts if m.target.startswith(value.rstrip("/") + "/")]
        if not value.startswith("/") or not below:
            return None
        root = self.workdir / name / "fs"
        for m in below:
            link = root / m.target.lstrip("/")
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.is_symlink():
                link.symlink_to(m.source)
        return str(root / value.lstrip("/"))

    # ------------------------------------------------------------------ translation
    def translate(self, name: str, value: str, key: str = "") -> str:
        """A value as the service would read it here (see the module docstring)."""
        for m in self.local[name].mounts:
            if value == m.target or value.startswith(m.target + "/"):
                return str(m.source) + value[len(m.target) :]
        parent = self._mount_parent(name, value)
        if parent is not None:
            return parent
        if value in self.services and _ADDRESS_KEY.search(key):
            return "127.0.0.1"
        if value.isdigit() and (not key or key.endswith("Port")) and int(value) in self.port_map[name]:
            return str(self.port_map[name][int(value)])

        def ref(m: re.Match[str]) -> str:
            svc, port = m.group(1), int(m.group(2))
            if svc in _WILDCARD_HOSTS:
                local = self.port_map[name].get(port)
            elif svc in self.services:
                local = self.port_map[svc].get(port)
            else:  # an address of the host: this service's port published there, the host kept
                ctr = self.host_ports[name].get(port)
                return f"{svc}:{self.port_map[name][ctr]}" if ctr is not None else m.group(0)
            return f"127.0.0.1:{local}" if local is not None else m.group(0)

        return re.sub(r"(?<![\w.-])([A-Za-z0-9][\w.-]*|\[::\]):(\d+)\b", ref, value)

    def _translate_arg(self, name: str, arg: str, files: dict[str, Path]) -> str:
        if arg in files:
            return str(files[arg])
        k, sep, v = arg.partition("=")
        if sep and re.fullmatch(r"[A-Za-z][\w.]*", k):  # -D key=value
            return f"{k}={self.translate(name, v, k)}"
        return self.translate(name, arg)

    def _copy_config(self, name: str, mount: Mount) -> Path:
        """A bind-mounted properties file, copied with its values translated."""
        lines = []
        for line in mount.source.read_text().splitlines():
            k, sep, v = line.partition("=")
            if sep and not line.lstrip().startswith("#"):
                line = f"{k}={self.translate(name, v.strip(), k.strip())}"
            lines.append(line)
        out = self.workdir / name / Path(mount.target).name
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("\n".join(lines) + "\n")
        return out

    def _local_service(self, name: str) -> LocalService:
        svc = self.services[name]
        mounts = self._mounts(name)
        ls = LocalService(name, [], {}, self.port_map[name], mounts)
        self.local[name] = ls  # translate() below sees the mounts
        command = [str(c) for c in (svc.get("command") or [])]
        files = {
            m.target: self._copy_config(name, m)
            for m in mounts
            if not m.named and m.source.is_file() and m.target in command
        }
        ls.command = [self._translate_arg(name, c, files) for c in command]
        env = svc.get("environment") or {}
        if isinstance(env, list):
            env = dict(e.split("=", 1) if "=" in e else (e, "") for e in env)
        ls.env = {k: self.translate(name, str(v)) for k, v in env.items() if v is not None}
        return ls

    # ------------------------------------------------------------------ running
    def start(
        self, stack: contextlib.ExitStack, broker_args: Sequence[str] = (), etcd_timeout: float = 30.0
    ) -> dict[str, ChildProcess]:
        """Start every etcd and rmq service (``broker_args`` appended to each broker's
        command); ``stack`` stops them, and removes the etcd members' data (about 120 MB
        of preallocated WAL each), however the test ends."""
        procs: dict[str, ChildProcess] = {}
        members = [self.etcd_process(n) for n in self.etcd_services()]
        for m in members:
            stack.callback(self._drop_etcd, m)
            procs[m.name] = m.start()
        deadline = time.monotonic() + etcd_timeout
        while not all(m.healthy() for m in members):
            dead = [m for m in members if not m.alive()]
            if dead or time.monotonic() > deadline:
                why = f"{dead[0].name} exited" if dead else f"not healthy within {etcd_timeout}s"
                raise RuntimeError(f"etcd: {why}:\n" + "\n".join(f"--- {m.name}:\n{m.tail(15)}" for m in members))
            time.sleep(0.1)
        for n in self.rmq_services():
            p = self.process(n, broker_args if self.local[n].command[1] == "broker" else ())
            stack.callback(p.stop)
            procs[n] = p.start()
        return procs

    @staticmethod
    def _drop_etcd(m: EtcdProcess) -> None:
        m.stop()
        for v in m.volumes:
            shutil.rmtree(v, ignore_errors=True)

    def etcd_process(self, name: str) -> EtcdProcess:
        """An etcd service as a local ``etcd`` process (not started)."""
        ls = self.local[name]
        if not _is_etcd(ls.command):
            raise ValueError(f"{name}: not an etcd service: {ls.command}")
        volumes = [m.source for m in ls.mounts if m.named]
        return EtcdProcess(name, [etcd_binary(), *ls.command[1:]], self.workdir / name, ls.env, volumes)

    def process(self, name: str, extra_args: list[str] | tuple[str, ...] = ()) -> RmqProcess:
        """The service as a harness process (not started); extra_args are appended to
        its command (a test's own additions, e.g. small store files)."""
        ls = self.local[name]
        if ls.command[:1] != ["rmq"] or len(ls.command) < 2:
            raise ValueError(f"{name}: not an rmq service: {ls.command}")
        role, args = ls.command[1], [*ls.command[2:], *extra_args]
        wd = self.workdir / name
        if role == "namesrv":
            return NameServerProcess(name, ["namesrv", *args], wd, r"NameServer listening on [\d.]+:(\d+)", env=ls.env)
        if role == "broker":
            conf = Path(args[args.index("-c") + 1])
            return BrokerProcess(
                name,
                ["broker", *args],
                wd,
                r"The broker\[[^,]+, ([\d.]+:\d+)\] boot success",
                env=ls.env,
                store_dir=wd,
                conf_path=conf,
            )
        if role == "proxy":
            return ProxyProcess(name, ["proxy", *args], wd, PROXY_READY, env=ls.env)
        raise ValueError(f"{name}: rmq {role} is not a server role")

    def mounted_file(self, name: str, target: str) -> Path:
        for m in self.local[name].mounts:
            if m.target == target:
                return m.source
        raise KeyError(f"{name}: nothing mounted at {target}")

    def prometheus_config(self, name: str = "prometheus", scrape_interval: str = "1s") -> str:
        """The Prometheus service's scrape config with its targets pointed here (JSON,
        which Prometheus reads as YAML)."""
        args = [str(a) for a in self.services[name].get("command") or []]
        path = next(a.split("=", 1)[1] for a in args if a.startswith("--config.file="))
        cfg = load_yaml(self.mounted_file(name, path))
        cfg.setdefault("global", {})
        cfg["global"]["scrape_interval"] = scrape_interval
        cfg["global"]["evaluation_interval"] = scrape_interval
        for job in cfg.get("scrape_configs", []):
            job["scrape_timeout"] = scrape_interval
            for sc in job.get("static_configs", []):
                sc["targets"] = [self.translate(name, t) for t in sc["targets"]]
        return json.dumps(cfg, indent=2)


def _is_etcd(command: Sequence[Any]) -> bool:
    return bool(command) and Path(str(command[0])).name == "etcd"
