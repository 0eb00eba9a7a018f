"""Interop test support: real rmq processes, third-party client drivers, broker-side truth.

* ``cluster`` (one per test module): a real ``rmq namesrv`` + ``rmq broker``
  (tests/harness.py) plus an admin ``RemotingClient`` running on a background event
  loop. It creates topics (UPDATE_AND_CREATE_TOPIC, then waits for the NameServer
  route), and reads the broker's truth with raw requests: PULL_MESSAGE,
  QUERY_MESSAGE, VIEW_MESSAGE_BY_ID. It is also "rmq's side" of the cross-client
  matrix when ``rmq.client`` is not usable (raw SEND_MESSAGE_V2 / PULL_MESSAGE).
* ``clients`` (per test): starts the driver programs of tests/interop/drivers and
  tests/interop/node (see tests/interop/README.md) as subprocesses, collects their
  JSON lines on a reader thread, and SIGKILLs + reaps every one of them at teardown.

A missing interop environment is a failure (never a skip) that names
scripts/install_test_deps.sh.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rmq.common import mixall
from rmq.common.clock import now_ms
from rmq.protocol.bodies import TopicRouteData
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import (
    CreateTopicRequestHeader,
    GetRouteInfoRequestHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryMessageRequestHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    ViewMessageRequestHeader,
)
from rmq.protocol.message import (
    MessageConst,
    MessageExt,
    UniqueIdGenerator,
    decode_message_id,
    decode_record,
    decode_records,
    properties_to_string,
)
from rmq.remoting.client import RemotingClient
from tests.harness import BrokerProcess, NameServerProcess, broker_process, namesrv_process

REPO = Path(__file__).resolve().parents[2]
INTEROP = REPO / "tests" / "interop"
DRIVERS = INTEROP / "drivers"
NODE_DIR = INTEROP / "node"
INSTALL_SCRIPT = "scripts/install_test_deps.sh"

CPP_VENVS = {
    "cpp2": (REPO / ".venv-interop-cpp2", "rocketmq-python-cvs==2.1.0.3"),
    "cpp1": (REPO / ".venv-interop-cpp1", "rocketmq==0.4.4"),
}
ALI_ONS_VERSION = "3.12.0"
CLIENTS = ("cpp2", "cpp1", "node")

REQUEST_TIMEOUT = 5.0
DEFAULT_QUEUES = 4


# =============================================================================== environment
def _missing(client: str) -> str | None:
    """What is missing for ``client`` (None when its environment is complete)."""
    if client in CPP_VENVS:
        venv, spec = CPP_VENVS[client]
        py = venv / "bin" / "python"
        if not py.exists():
            return f"{venv.relative_to(REPO)}/ (PyPI {spec}) does not exist"
        stamp = venv / ".rmq-interop-stamp"
        if not stamp.exists() or stamp.read_text().strip() != spec:
            return f"{venv.relative_to(REPO)}/ is not a finished install of {spec} (no stamp)"
        return None
    if client == "node":
        if shutil.which("node") is None:
            return "no `node` on PATH (ali-ons needs node >= 10)"
        pkg = NODE_DIR / "node_modules" / "ali-ons" / "package.json"
        if not pkg.exists():
            return f"{pkg.parent.relative_to(REPO)} is missing (npm ali-ons@{ALI_ONS_VERSION})"
        version = json.loads(pkg.read_text()).get("version")
        if version != ALI_ONS_VERSION:
            return f"ali-ons {version} installed, {ALI_ONS_VERSION} expected"
        return None
    raise ValueError(client)


def require_client(client: str) -> None:
    """Fail (not skip) the test when the client's environment is missing."""
    what = _missing(client)
    if what:
        pytest.fail(
            f"interop environment for {client} is missing: {what}.\n"
            f"Build it with {INSTALL_SCRIPT} (`make test` runs it first; "
            f"it is idempotent).",
            pytrace=False,
        )


# =============================================================================== names
_seq = itertools.count(1)


def unique_name(prefix: str) -> str:
    """A topic / group name no other test uses: [A-Za-z0-9_-] only, < 64 chars."""
    prefix = re.sub(r"[^A-Za-z0-9_-]+", "_", prefix).strip("_")[:36]
    return f"{prefix}-{next(_seq)}-{uuid.uuid4().hex[:6]}"


# =============================================================================== event loop
class _LoopThread:
    """One asyncio loop on a daemon thread; sync tests submit coroutines to it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="interop-loop", daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 60.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        if not self.thread.is_alive():
            self.loop.close()


# =============================================================================== cluster
_LIVE_CLUSTERS: list[Cluster] = []


def broker_problems(limit: int = 12) -> str:
    """The last WARNING/ERROR lines of every running test broker (for failure messages)."""
    out = []
    for c in list(_LIVE_CLUSTERS):
        lines = [
            ln for ln in c.broker.log_text().splitlines() if " WARNING " in ln or " ERROR " in ln or "Traceback" in ln
        ]
        if lines:
            out.append(
                f"--- broker {c.broker_addr} warnings/errors ({c.broker.log_path}):\n" + "\n".join(lines[-limit:])
            )
    return "\n".join(out)


class Cluster:
    """NameServer(s) + one broker, and a raw admin/test client for them."""

    def __init__(self, workdir: Path, namesrvs: list[NameServerProcess], broker: BrokerProcess) -> None:
        self.workdir = workdir
        self.namesrvs = namesrvs
        self.broker = broker
        self._loop = _LoopThread()
        self._client: RemotingClient | None = None
        self._uniq = UniqueIdGenerator()
        _LIVE_CLUSTERS.append(self)

    # ------------------------------------------------------------------ addresses
    @property
    def namesrv_addr(self) -> str:
        """The NameServer list (host:port;host:port) as clients are configured."""
        return ";".join(ns.addr for ns in self.namesrvs)

    @property
    def broker_addr(self) -> str:
        return self.broker.addr

    @property
    def broker_name(self) -> str:
        return "broker-a"

    def close(self) -> None:
        if self in _LIVE_CLUSTERS:
            _LIVE_CLUSTERS.remove(self)
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._loop.run(self._client.close(), 10)
        self._loop.close()

    # ------------------------------------------------------------------ raw requests
    def invoke(
        self,
        addr: str,
        code: int,
        ext: dict[str, str] | None = None,
        body: bytes | None = None,
        timeout: float = REQUEST_TIMEOUT,
    ) -> RemotingCommand:
        async def go() -> RemotingCommand:
            if self._client is None:
                self._client = RemotingClient(name="interop-admin")
            return await self._client.invoke(addr, RemotingCommand(code, ext_fields=ext, body=body), timeout)

        return self._loop.run(go(), timeout + 10)

    def create_topic(
        self, topic: str, queues: int = DEFAULT_QUEUES, order: bool = False, timeout: float = 20.0
    ) -> None:
        """UPDATE_AND_CREATE_TOPIC on the broker, then wait until every (live) NameServer
        routes it with ``queues`` read/write queues."""
        h = CreateTopicRequestHeader(
            topic=topic,
            default_topic=mixall.AUTO_CREATE_TOPIC_KEY_TOPIC,
            read_queue_nums=queues,
            write_queue_nums=queues,
            perm=6,
            order=order,
        )
        resp = self.invoke(self.broker_addr, RequestCode.UPDATE_AND_CREATE_TOPIC, h.to_ext_fields())
        assert resp.code == ResponseCode.SUCCESS, f"UPDATE_AND_CREATE_TOPIC {topic}: {resp.code} {resp.remark}"
        for ns in self.namesrvs:
            if ns.alive():
                self.wait_route(topic, ns.addr, queues, timeout)

    def route(self, topic: str, ns_addr: str) -> TopicRouteData | None:
        resp = self.invoke(
            ns_addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic=topic).to_ext_fields()
        )
        if resp.code != ResponseCode.SUCCESS or not resp.body:
            return None
        return TopicRouteData.from_json(resp.body)

    def wait_route(self, topic: str, ns_addr: str, queues: int, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = self.route(topic, ns_addr)
            if last is not None and any(
                q.broker_name == self.broker_name and q.write_queue_nums == queues and q.read_queue_nums == queues
                for q in last.queue_datas
            ):
                return
            time.sleep(0.1)
        raise AssertionError(
            f"NameServer {ns_addr} has no route for {topic} with {queues} queues after {timeout}s (last: {last})"
        )

    # ------------------------------------------------------------------ broker truth
    def pull_queue(
        self, topic: str, group: str, queue_id: int, offset: int = 0, max_nums: int = 32
    ) -> tuple[int, list[MessageExt], PullMessageResponseHeader | None]:
        h = PullMessageRequestHeader(
            consumer_group=group,
            topic=topic,
            queue_id=queue_id,
            queue_offset=offset,
            max_msg_nums=max_nums,
            sys_flag=0x4,  # FLAG_SUBSCRIPTION, no suspend, no commit
            commit_offset=0,
            suspend_timeout_millis=0,
            sub_version=0,
            subscription="*",
            expression_type="TAG",
        )
        resp = self.invoke(self.broker_addr, RequestCode.PULL_MESSAGE, h.to_ext_fields())
        rh = PullMessageResponseHeader.from_ext_fields(resp.ext_fields) if resp.ext_fields else None
        msgs = decode_records(resp.body) if resp.code == ResponseCode.SUCCESS and resp.body else []
        return resp.code, msgs, rh

    def pull_all(self, topic: str, group: str | None = None, queues: int = DEFAULT_QUEUES) -> list[MessageExt]:
        """Every message of the topic, queue by queue from offset 0 (raw PULL_MESSAGE)."""
        group = group or unique_name("truth")
        out: list[MessageExt] = []
        for q in range(queues):
            offset = 0
            while True:
                code, msgs, rh = self.pull_queue(topic, group, q, offset)
                if code == ResponseCode.SUCCESS and msgs:
                    out.extend(msgs)
                    offset = rh.next_begin_offset if rh else msgs[-1].queue_offset + 1
                    continue
                if code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_OFFSET_MOVED) and (
                    rh is None or offset >= rh.max_offset
                ):
                    break
                if code == ResponseCode.PULL_RETRY_IMMEDIATELY and rh is not None:
                    offset = rh.next_begin_offset
                    continue
                raise AssertionError(f"PULL_MESSAGE {topic}/{q}@{offset}: code {code} (header {rh})")
        return out

    def wait_truth(
        self, topic: str, expected: int, queues: int = DEFAULT_QUEUES, timeout: float = 10.0
    ) -> dict[str, MessageExt]:
        """body -> stored record, once ``expected`` messages are pullable."""
        deadline = time.monotonic() + timeout
        while True:
            msgs = self.pull_all(topic, queues=queues)
            if len(msgs) >= expected or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert len(msgs) == expected, (
            f"broker holds {len(msgs)} messages in {topic}, expected {expected}; "
            f"broker log tail ({self.broker.log_path}):\n{self.broker.tail(15)}"
        )
        truth = {m.body.decode(): m for m in msgs}
        assert len(truth) == expected, f"duplicate bodies stored in {topic}"
        return truth

    def query_by_key(self, topic: str, key: str, uniq: bool = False, timeout: float = 10.0) -> list[MessageExt]:
        """QUERY_MESSAGE by KEYS (or by UNIQ_KEY with ``_UNIQUE_KEY_QUERY=true``);
        retried while the index has not caught up."""
        h = QueryMessageRequestHeader(topic=topic, key=key, max_num=32, begin_timestamp=0, end_timestamp=2**62)
        ext = h.to_ext_fields()
        if uniq:
            ext["_UNIQUE_KEY_QUERY"] = "true"
        deadline = time.monotonic() + timeout
        while True:
            resp = self.invoke(self.broker_addr, RequestCode.QUERY_MESSAGE, ext)
            if resp.code == ResponseCode.SUCCESS and resp.body:
                return decode_records(resp.body)
            if time.monotonic() > deadline:
                raise AssertionError(f"QUERY_MESSAGE topic={topic} key={key} uniq={uniq}: {resp.code} {resp.remark}")
            time.sleep(0.2)

    def view_message(self, msg_id: str) -> MessageExt:
        """VIEW_MESSAGE_BY_ID for an offset msgId (the broker address must be ours)."""
        ip, port, offset = decode_message_id(msg_id)
        assert f"{ip}:{port}" == self.broker_addr, (
            f"offset msgId {msg_id} names {ip}:{port}, the broker is {self.broker_addr}"
        )
        resp = self.invoke(
            self.broker_addr, RequestCode.VIEW_MESSAGE_BY_ID, ViewMessageRequestHeader(offset=offset).to_ext_fields()
        )
        assert resp.code == ResponseCode.SUCCESS and resp.body, (
            f"VIEW_MESSAGE_BY_ID {msg_id} (offset {offset}): {resp.code} {resp.remark}"
        )
        return decode_record(resp.body, decompress=True)

    # ------------------------------------------------------------------ rmq as a raw client
    def raw_send(
        self,
        topic: str,
        group: str,
        n: int,
        *,
        props: dict[str, str] | None = None,
        queues: int = DEFAULT_QUEUES,
        **batch: Any,
    ) -> list[dict[str, Any]]:
        """SEND_MESSAGE_V2 x n, round robin over the queues, messages built as the drivers
        build them (``batch_messages``, props, a UNIQ_KEY). Returns ``sent`` lines in the
        drivers' shape."""
        out = []
        for i, body, tag, keys in batch_messages(n, **batch):
            uniq = self._uniq.next_id()
            p: dict[str, str] = {}
            if keys:
                p[MessageConst.KEYS] = keys
            if tag:
                p[MessageConst.TAGS] = tag
            p[MessageConst.WAIT_STORE_MSG_OK] = "true"
            p.update(props or {})
            p[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq
            h = SendMessageRequestHeader(
                producer_group=group,
                topic=topic,
                default_topic=mixall.AUTO_CREATE_TOPIC_KEY_TOPIC,
                default_topic_queue_nums=4,
                queue_id=i % queues,
                sys_flag=0,
                born_timestamp=now_ms(),
                flag=0,
                properties=properties_to_string(p),
                reconsume_times=0,
            )
            resp = self.invoke(self.broker_addr, RequestCode.SEND_MESSAGE_V2, h.to_v2_ext_fields(), body.encode())
            assert resp.code == ResponseCode.SUCCESS, f"raw SEND_MESSAGE_V2 {topic} #{i}: {resp.code} {resp.remark}"
            rh = SendMessageResponseHeader.from_ext_fields(resp.ext_fields)
            out.append(sent_line(i, body, tag, keys, "SEND_OK", uniq, rh.msg_id, rh.queue_id, rh.queue_offset))
        return out

    def raw_consume(
        self, topic: str, group: str, expected: int, queues: int = DEFAULT_QUEUES, timeout: float = 15.0
    ) -> list[MessageExt]:
        """rmq as a consumer: raw PULL_MESSAGE on every queue until ``expected`` arrived."""
        deadline = time.monotonic() + timeout
        offsets = dict.fromkeys(range(queues), 0)
        out: list[MessageExt] = []
        while len(out) < expected and time.monotonic() < deadline:
            progressed = False
            for q in range(queues):
                code, msgs, rh = self.pull_queue(topic, group, q, offsets[q])
                if code == ResponseCode.SUCCESS and msgs:
                    out.extend(msgs)
                    offsets[q] = rh.next_begin_offset if rh else msgs[-1].queue_offset + 1
                    progressed = True
            if not progressed:
                time.sleep(0.1)
        return out


def batch_messages(
    n: int,
    *,
    tags: list[str] | None = None,
    keys_prefix: str | None = None,
    body_prefix: str = "body-",
    start_index: int = 0,
) -> Iterator[tuple[int, str, str | None, str | None]]:
    """The ``n`` messages rmq's side sends, as the drivers build theirs: index i from
    ``start_index``, body B+i, tag tags[i % len], keys P+i."""
    for i in range(start_index, start_index + n):
        tag = tags[i % len(tags)] if tags else None
        keys = f"{keys_prefix}{i}" if keys_prefix is not None else None
        yield i, f"{body_prefix}{i}", tag, keys


def sent_line(
    i: int,
    body: str,
    tags: str | None,
    keys: str | None,
    status: str,
    msg_id: str,
    offset_msg_id: str,
    queue_id: int,
    queue_offset: int,
) -> dict[str, Any]:
    """One send result of rmq's side in the drivers' ``sent`` line shape."""
    return {
        "event": "sent",
        "i": i,
        "body": body,
        "tags": tags,
        "keys": keys,
        "status": status,
        "msg_id": msg_id,
        "offset_msg_id": offset_msg_id,
        "queue_id": queue_id,
        "queue_offset": queue_offset,
    }


class RmqSide:
    """rmq's own side of the interop matrix: a producer and a consumer.

    ``mode`` "raw": SEND_MESSAGE_V2 / PULL_MESSAGE straight to the broker through
    ``RemotingClient`` (no NameServer involved)."""

    mode = "raw"

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def produce(self, topic: str, group: str, n: int, **kw: Any) -> list[dict[str, Any]]:
        return self.cluster.raw_send(topic, group, n, **kw)

    def consume(self, topic: str, group: str, bodies: Iterable[str], timeout: float = 30.0) -> list[dict[str, Any]]:
        want = set(bodies)
        got = self.cluster.raw_consume(topic, group, len(want), timeout=timeout)
        return [message_record(m) for m in got]


class ClientRmqSide(RmqSide):
    """rmq's side through its own client: ``rmq.client.Producer`` (send, sync) and
    ``rmq.client.PushConsumer`` (concurrent listener), via the NameServer(s)."""

    mode = "rmq.client"

    def __init__(self, cluster: Cluster, namesrv: str | None = None) -> None:
        super().__init__(cluster)
        self.namesrv = namesrv or cluster.namesrv_addr

    def produce(
        self, topic: str, group: str, n: int, *, props: dict[str, str] | None = None, **batch: Any
    ) -> list[dict[str, Any]]:
        from rmq.client.message import Message
        from rmq.client.producer import Producer

        async def go() -> list[dict[str, Any]]:
            p = Producer(group, self.namesrv)
            await p.start()
            out = []
            try:
                for i, body, tag, keys in batch_messages(n, **batch):
                    r = await p.send(Message(topic, body.encode(), tags=tag, keys=keys, properties=dict(props or {})))
                    out.append(
                        sent_line(
                            i,
                            body,
                            tag,
                            keys,
                            r.status.value,
                            r.msg_id,
                            r.offset_msg_id,
                            r.message_queue.queue_id,
                            r.queue_offset,
                        )
                    )
            finally:
                await p.shutdown()
            return out

        return self.cluster._loop.run(go(), 60)

    def consume(self, topic: str, group: str, bodies: Iterable[str], timeout: float = 30.0) -> list[dict[str, Any]]:
        """PushConsumer until every one of ``bodies`` arrived (or ``timeout``); a consumer
        that does not start, does not get everything or does not shut down raises
        AssertionError with the rmq.client log."""
        from rmq.client.push_consumer import ConsumeResult, PushConsumer

        want = set(bodies)
        got: list[dict[str, Any]] = []
        phase = ["create"]

        async def go() -> None:
            done = asyncio.Event()

            async def listener(msgs, ctx):
                for m in msgs:
                    got.append(message_record(m))
                if want <= {g["body"] for g in got}:
                    done.set()
                return ConsumeResult.SUCCESS

            c = PushConsumer(group, self.namesrv, listener=listener)
            c.subscribe(topic, "*")
            phase[0] = "start()"
            await asyncio.wait_for(c.start(), 20)
            try:
                phase[0] = "consuming"
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(done.wait(), timeout)
            finally:
                phase[0] = "shutdown()"
                await asyncio.wait_for(c.shutdown(), 20)
                phase[0] = "done"

        with capture_log("rmq.client") as log:
            try:
                self.cluster._loop.run(go(), timeout + 60)
                error = None
            except BaseException as e:
                error = f"{type(e).__name__}: {e}"
        missing = want - {g["body"] for g in got}
        if error or missing:
            raise ConsumeIncomplete(
                list(got),
                f"rmq.client PushConsumer ({group} on {topic}): {error or 'incomplete'} in "
                f"phase {phase[0]}; got {len(got)} messages, missing {len(missing)}\n"
                f"rmq.client log (last 40 lines):\n" + "\n".join(log[-40:]) + "\n" + broker_problems(),
            )
        return got


class ConsumeIncomplete(AssertionError):
    """rmq's consumer did not get everything; ``got`` holds what it did get."""

    def __init__(self, got: list[dict[str, Any]], message: str) -> None:
        super().__init__(message)
        self.got = got


@contextlib.contextmanager
def capture_log(name: str, level: int = logging.DEBUG) -> Iterator[list[str]]:
    """Records of logger ``name`` (and its children) as formatted lines."""
    lines: list[str] = []

    class _H(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            with contextlib.suppress(Exception):
                lines.append(self.format(record))

    h = _H(level)
    h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    lg = logging.getLogger(name)
    old = lg.level
    lg.addHandler(h)
    lg.setLevel(level)
    try:
        yield lines
    finally:
        lg.removeHandler(h)
        lg.setLevel(old)


def rmq_side(cluster: Cluster, namesrv: str | None = None) -> RmqSide:
    """rmq's own client when it exists (``rmq.client.producer`` / ``push_consumer``),
    else raw requests. A client that exists but fails to import is an error."""
    try:
        import rmq.client.producer
        import rmq.client.push_consumer  # noqa: F401
    except ModuleNotFoundError as e:
        if e.name not in ("rmq.client.producer", "rmq.client.push_consumer"):
            raise
        return RmqSide(cluster)
    return ClientRmqSide(cluster, namesrv)


def _start_cluster(
    workdir: Path, namesrv_count: int = 1, broker_conf: dict[str, object] | None = None
) -> Iterator[Cluster]:
    procs: list[Any] = []
    cluster = None
    try:
        namesrvs: list[NameServerProcess] = []
        for k in range(namesrv_count):
            ns = namesrv_process(workdir, name=f"namesrv{k + 1}" if namesrv_count > 1 else "namesrv")
            procs.append(ns)
            ns.start()
            namesrvs.append(ns)
        br = broker_process(workdir, ";".join(ns.addr for ns in namesrvs), name="broker-a", conf=broker_conf)
        procs.append(br)
        br.start()
        cluster = Cluster(workdir, namesrvs, br)
        yield cluster
    finally:
        if cluster is not None:
            cluster.close()
        for p in reversed(procs):
            p.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One NameServer + broker for the whole test module."""
    yield from _start_cluster(tmp_path_factory.mktemp("cluster"))


@pytest.fixture
def start_cluster(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    """Factory for a private cluster (e.g. two NameServers); torn down after the test."""
    stack = contextlib.ExitStack()
    numbers = itertools.count()  # distinct dirs per call

    def factory(namesrv_count: int = 1, broker_conf: dict[str, object] | None = None) -> Cluster:
        gen = _start_cluster(tmp_path / f"cluster{next(numbers)}", namesrv_count, broker_conf)
        c = next(gen)
        stack.callback(lambda: next(gen, None))
        return c

    with stack:
        yield factory


# =============================================================================== drivers
class Driver:
    """One driver subprocess: JSON lines from stdout collected by a reader thread."""

    def __init__(self, name: str, argv: list[str], workdir: Path, env: dict[str, str], cwd: Path) -> None:
        self.name = name
        self.argv = argv
        workdir.mkdir(parents=True, exist_ok=True)
        self.stderr_path = workdir / f"{name}.stderr"
        self.log_dir = workdir / f"{name}-logs"
        self.events: list[dict[str, Any]] = []
        self.raw_lines: list[str] = []
        self._cond = threading.Condition()
        self._eof = False
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=str(cwd),
                start_new_session=True,
            )
        self._reader = threading.Thread(target=self._read, name=f"read-{name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if not line:
                continue
            try:
                ev = json.loads(line)
            except ValueError:
                ev = {"event": "_not_json", "line": line}
            with self._cond:
                if isinstance(ev, dict):
                    self.events.append(ev)
                else:
                    self.raw_lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    # ------------------------------------------------------------------ queries
    def of(self, event: str) -> list[dict[str, Any]]:
        with self._cond:
            return [e for e in self.events if e.get("event") == event]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.of("message")

    @property
    def sent(self) -> list[dict[str, Any]]:
        return self.of("sent")

    def stderr_tail(self, n: int = 30) -> str:
        try:
            lines = self.stderr_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return ""
        return "\n".join(lines[-n:])

    def describe(self) -> str:
        with self._cond:
            evs = list(self.events)
        brief = [e for e in evs if e.get("event") != "message"][-8:]
        return (
            f"--- driver {self.name} (pid {self.proc.pid}, rc {self.proc.poll()})\n"
            f"argv: {' '.join(self.argv)}\n"
            f"{len(evs)} events, {sum(1 for e in evs if e.get('event') == 'message')} "
            f"messages; last non-message events: {brief}\n"
            f"stderr tail ({self.stderr_path}):\n{self.stderr_tail()}\n"
            f"{broker_problems()}"
        ).rstrip()

    # ------------------------------------------------------------------ waiting
    def wait_for(self, pred: Callable[[list[dict[str, Any]]], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not pred(self.events):
                if self._eof:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.5))
            ok = pred(self.events)
        if not ok:
            raise AssertionError(f"{self.name}: {what} not seen within {timeout}s\n" + self.describe())

    def wait_started(self, timeout: float = 30.0) -> dict[str, Any]:
        self.wait_for(lambda evs: any(e.get("event") in ("started", "fatal") for e in evs), timeout, "a started line")
        fatal = self.of("fatal")
        assert not fatal, f"{self.name} could not start: {fatal}\n{self.describe()}"
        return self.of("started")[0]

    def wait_bodies(self, bodies: Iterable[str], timeout: float = 45.0) -> None:
        want = set(bodies)

        def done(evs):
            got = {
                e.get("body")
                for e in evs
                if e.get("event") == "message" and e.get("action", "CONSUME_SUCCESS") == "CONSUME_SUCCESS"
            }
            return want <= got

        try:
            self.wait_for(done, timeout, f"{len(want)} messages")
        except AssertionError as e:
            got = {m.get("body") for m in self.messages}
            missing = sorted(want - got)
            raise AssertionError(f"{e}\nmissing {len(missing)} of {len(want)}: {missing[:20]}") from None

    def wait_exit(self, timeout: float) -> int:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.name} did not exit within {timeout}s\n" + self.describe()) from None
        self._reader.join(5)
        return rc

    # ------------------------------------------------------------------ ending
    def terminate(self, timeout: float = 10.0) -> int | None:
        """SIGTERM (the driver prints its summary), SIGKILL if it does not exit."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._reader.join(5)
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL the driver's process group and reap it."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        if self.proc.stdout is not None:
            self._reader.join(5)
            with contextlib.suppress(Exception):
                self.proc.stdout.close()


def _csv(v: Iterable[str] | str) -> str:
    return v if isinstance(v, str) else ",".join(v)


class Clients:
    """Starts driver programs; every one is killed and reaped at teardown."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.drivers: list[Driver] = []
        self._n = itertools.count(1)

    def _argv(self, client: str, role: str) -> tuple[list[str], Path]:
        require_client(client)
        if client in CPP_VENVS:
            py = CPP_VENVS[client][0] / "bin" / "python"
            return [str(py), str(DRIVERS / f"{client}_{role}.py")], REPO
        script = {"producer": "producer.js", "push_consumer": "consumer.js"}.get(role)
        if script is None:
            raise ValueError(f"node has no {role} driver")
        return ["node", str(NODE_DIR / script)], NODE_DIR

    def _start(self, client: str, role: str, namesrv: str, topic: str, group: str, opts: list[str]) -> Driver:
        """A ``role`` driver of ``client`` for ``topic`` and ``group`` through ``namesrv``;
        ``opts``: its role's options."""
        argv, cwd = self._argv(client, role)
        name = f"{next(self._n):02d}-{client}-{role}"
        env = dict(os.environ)
        env.pop("RMQ_INTEROP_LOG_DIR", None)
        opts = ["--namesrv", namesrv, "--topic", topic, "--group", group, *opts]
        if client in CPP_VENVS:
            opts = [*opts, "--log-dir", str(self.workdir / f"{name}-logs")]
        d = Driver(name, argv + opts, self.workdir, env, cwd)
        self.drivers.append(d)
        return d

    def producer(
        self,
        client: str,
        namesrv: str,
        topic: str,
        group: str,
        n: int,
        *,
        tags: Iterable[str] | str | None = None,
        keys_prefix: str | None = None,
        props: dict[str, str] | None = None,
        body_prefix: str | None = None,
        orderly: bool = False,
        sharding_key_mod: int | None = None,
        start_index: int = 0,
        timeout_ms: int = 5000,
    ) -> Driver:
        o = ["-n", str(n), "--start-index", str(start_index), "--timeout-ms", str(timeout_ms)]
        if tags is not None:
            o += ["--tags", _csv(tags)]
        if keys_prefix is not None:
            o += ["--keys-prefix", keys_prefix]
        if props:
            o += ["--props", ",".join(f"{k}={v}" for k, v in props.items())]
        if body_prefix is not None:
            o += ["--body-prefix", body_prefix]
        if orderly:
            o += ["--orderly"]
        if sharding_key_mod is not None:
            o += ["--sharding-key-mod", str(sharding_key_mod)]
        return self._start(client, "producer", namesrv, topic, group, o)

    def produce(
        self, client: str, namesrv: str, topic: str, group: str, n: int, timeout: float = 60.0, **kw: Any
    ) -> list[dict[str, Any]]:
        """Run a producer to completion; every send must succeed. Returns the sent lines."""
        d = self.producer(client, namesrv, topic, group, n, **kw)
        rc = d.wait_exit(timeout)
        sent = d.sent
        assert rc == 0 and len(sent) == n, f"{client} producer: exit {rc}, {len(sent)}/{n} sent\n{d.describe()}"
        summary = d.of("summary")
        assert summary and summary[-1]["sent"] == n and summary[-1]["failed"] == 0, d.describe()
        return sent

    def consumer(
        self,
        client: str,
        namesrv: str,
        topic: str,
        group: str,
        *,
        expression: str = "*",
        orderly: bool = False,
        property_keys: Iterable[str] | None = None,
        from_first: bool = False,
        max_messages: int | None = None,
        idle_exit: float | None = None,
        reconsume_until: int | None = None,
        wait_started: bool = True,
    ) -> Driver:
        o = ["--expression", expression]
        if orderly:
            o += ["--orderly"]
        if property_keys and client in CPP_VENVS:
            o += ["--property-keys", _csv(property_keys)]
        if from_first:
            if client != "node":
                raise ValueError("only ali-ons can choose CONSUME_FROM_FIRST_OFFSET")
            o += ["--from-first"]
        if max_messages is not None:
            o += ["--max-messages", str(max_messages)]
        if idle_exit is not None:
            o += ["--idle-exit", str(idle_exit)]
        if reconsume_until is not None:
            o += ["--reconsume-until", str(reconsume_until)]
        d = self._start(client, "push_consumer", namesrv, topic, group, o)
        if wait_started:
            d.wait_started()
        return d

    def puller(
        self,
        client: str,
        namesrv: str,
        topic: str,
        group: str,
        *,
        expression: str = "*",
        property_keys: Iterable[str] | None = None,
        max_messages: int | None = None,
        timeout: float = 45.0,
    ) -> Driver:
        """The C++ pull consumer driver (DefaultMQPullConsumer, every queue from 0)."""
        if client not in CPP_VENVS:
            raise ValueError(f"{client} has no pull consumer driver")
        o = ["--expression", expression, "--timeout", str(timeout)]
        if property_keys:
            o += ["--property-keys", _csv(property_keys)]
        if max_messages is not None:
            o += ["--max-messages", str(max_messages)]
        return self._start(client, "pull_consumer", namesrv, topic, group, o)

    def close(self) -> None:
        for d in self.drivers:
            d.kill()


@pytest.fixture
def clients(tmp_path: Path) -> Iterator[Clients]:
    c = Clients(tmp_path / "drivers")
    try:
        yield c
    finally:
        c.close()


# =============================================================================== assertions
def check_stored(
    truth: dict[str, MessageExt], body: str, *, topic: str, tags: str | None, keys: str | None, props: dict[str, str]
) -> MessageExt:
    """The broker's record of one message carries what the producer put on it."""
    assert body in truth, f"{body!r} is not stored in {topic}"
    m = truth[body]
    assert m.topic == topic
    assert m.tags == tags, f"{body}: stored TAGS {m.tags!r}, sent {tags!r}"
    assert m.keys == keys, f"{body}: stored KEYS {m.keys!r}, sent {keys!r}"
    for k, v in props.items():
        assert m.properties.get(k) == v, f"{body}: stored property {k}={m.properties.get(k)!r}, sent {v!r}"
    return m


def check_delivered(
    consumer: Driver, truth: dict[str, MessageExt], bodies: Iterable[str], *, topic: str, props: dict[str, str]
) -> None:
    """Every message ``consumer`` consumed matches the broker's record (see
    ``check_messages``), all of ``bodies`` arrived, and nothing else."""
    check_messages(consumer.name, consumer.messages, truth, bodies, topic=topic, props=props)


def check_messages(
    name: str,
    messages: list[dict[str, Any]],
    truth: dict[str, MessageExt],
    bodies: Iterable[str],
    *,
    topic: str,
    props: dict[str, str],
) -> None:
    """Delivered ``messages`` (driver ``message`` lines) against the stored records: body,
    topic, tags, keys, user properties, UNIQ_KEY, queue id, queue offset, commit-log
    offset and msgId; every one of ``bodies`` arrived and nothing else did."""
    bodies = set(bodies)
    delivered = [m for m in messages if m.get("action", "CONSUME_SUCCESS") == "CONSUME_SUCCESS"]
    stray = sorted({m["body"] for m in delivered} - bodies)
    assert not stray, f"{name} got messages nobody sent to it: {stray[:10]}"
    seen = set()
    for m in delivered:
        body = m["body"]
        seen.add(body)
        t = truth[body]
        where = f"{name} message {body[:60]!r}"
        assert m["topic"] == topic, f"{where}: topic {m['topic']!r}"
        assert m["tags"] == t.tags, f"{where}: tags {m['tags']!r}, stored {t.tags!r}"
        assert m["keys"] == t.keys, f"{where}: keys {m['keys']!r}, stored {t.keys!r}"
        assert m["queue_id"] == t.queue_id, f"{where}: queue_id {m['queue_id']}, stored in queue {t.queue_id}"
        assert int(m["queue_offset"]) == t.queue_offset, (
            f"{where}: queue_offset {m['queue_offset']}, stored at {t.queue_offset}"
        )
        assert int(m["commit_log_offset"]) == t.commit_log_offset, (
            f"{where}: commit_log_offset {m['commit_log_offset']}, stored at {t.commit_log_offset}"
        )
        assert m["reconsume_times"] == 0, f"{where}: reconsume_times {m['reconsume_times']}"
        got_props = m.get("properties") or {}
        for k, v in props.items():
            assert got_props.get(k) == v, f"{where}: property {k}={got_props.get(k)!r}, sent {v!r}"
        uniq = t.uniq_key
        if uniq is not None:
            assert got_props.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) == uniq, (
                f"{where}: UNIQ_KEY {got_props.get('UNIQ_KEY')!r}, stored {uniq!r}"
            )
        # A client's msgId is the UNIQ_KEY when the message has one, else the offset msgId.
        # C++ 1.x quirk: it computes the offset msgId itself with the IPv4 bytes
        # little-endian (0100007F... for 127.0.0.1), as it does for its UNIQ_KEYs.
        accepted = {uniq, t.msg_id} - {None}
        if "cpp1" in name and len(t.msg_id) == 32:
            accepted.add(bytes.fromhex(t.msg_id[:8])[::-1].hex().upper() + t.msg_id[8:])
        assert m["msg_id"] in accepted, f"{where}: msg_id {m['msg_id']!r}, UNIQ_KEY {uniq!r}, offset msgId {t.msg_id}"
    missing = sorted(bodies - seen)
    assert not missing, f"{name} did not get {len(missing)} of {len(bodies)}: {missing[:20]}"


def message_record(m: MessageExt) -> dict[str, Any]:
    """A stored/pulled record in the drivers' ``message`` line shape."""
    return {
        "event": "message",
        "action": "CONSUME_SUCCESS",
        "topic": m.topic,
        "tags": m.tags,
        "keys": m.keys,
        "body": m.body.decode("utf-8", "replace"),
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "msg_id": m.uniq_key or m.msg_id,
        "reconsume_times": m.reconsume_times,
        "commit_log_offset": m.commit_log_offset,
        "properties": dict(m.properties),
    }


SEND_OK = {"cpp2": "OK", "cpp1": "OK", "node": "SEND_OK", "rmq": "SEND_OK"}


def check_sent(
    client: str, sent: list[dict[str, Any]], truth: dict[str, MessageExt], *, topic: str, props: dict[str, str]
) -> None:
    """A driver's send results agree with what the broker stored: status, what the
    message carries, queue offset (and queue id where the client reports it), and the
    msgId (C++: the UNIQ_KEY it set; ali-ons: the broker's offset msgId)."""
    for s in sent:
        where = f"{client} sent #{s['i']} ({s['body']!r})"
        assert s["status"] == SEND_OK[client], f"{where}: status {s['status']}"
        m = check_stored(truth, s["body"], topic=topic, tags=s["tags"], keys=s["keys"], props=props)
        assert int(s["queue_offset"]) == m.queue_offset, (
            f"{where}: send result queue offset {s['queue_offset']}, stored at {m.queue_offset}"
        )
        if client in ("node", "rmq"):
            assert s["queue_id"] == m.queue_id, f"{where}: send result queue {s['queue_id']}, stored in {m.queue_id}"
            assert s["offset_msg_id"] == m.msg_id, (
                f"{where}: offsetMsgId {s['offset_msg_id']}, stored record's is {m.msg_id}"
            )
        if client == "node":
            assert m.uniq_key is None, f"{where}: ali-ons sets no UNIQ_KEY, stored {m.uniq_key}"
        else:
            assert m.uniq_key and s["msg_id"] == m.uniq_key, (
                f"{where}: msgId {s['msg_id']}, stored UNIQ_KEY {m.uniq_key}"
            )
