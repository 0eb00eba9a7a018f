"""Helpers for the broker integration tests (tests/integration/test_broker*.py).

Everything talks to real `rmq namesrv` / `rmq broker` processes (tests/harness.py) over
the real transport (`rmq.remoting.client.RemotingClient`) with raw requests: exact
request codes, ext fields and bodies, so that the tests can assert exact response
codes, remarks and headers (spec sections 1 and 2). Nothing here uses `rmq.client`.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import struct
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rmq.common.context import ClosingContext
from rmq.protocol.bodies import (
    ClusterInfo,
    ConsumerData,
    HeartbeatData,
    KVTable,
    ProducerData,
    SubscriptionData,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)
from rmq.protocol.codes import PullSysFlag, RequestCode, ResponseCode, SerializeType
from rmq.protocol.frame import RemotingCommand, decode_frame, encode
from rmq.protocol.headers import (
    CreateTopicRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    GetRouteInfoRequestHeader,
    PullMessageRequestHeader,
    QueryConsumerOffsetRequestHeader,
    SendMessageRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from rmq.protocol.message import BatchItem, encode_batch, properties_to_string
from rmq.remoting.client import RemotingClient
from tests.harness import BrokerProcess, broker_process

TIMEOUT = 5.0
_uniq = itertools.count(1)


def unique(prefix: str) -> str:
    """A topic/group name no other test of the session uses (shared brokers)."""
    return f"{prefix}{os.getpid() % 10000}x{next(_uniq)}"


def props(
    tags: str | None = None, keys: str | None = None, uniq: str | None = None, wait: str | None = None, **extra: str
) -> str:
    """A properties string (spec 3.4) as a Java producer writes it."""
    d: dict[str, str] = {}
    if keys is not None:
        d["KEYS"] = keys
    if tags is not None:
        d["TAGS"] = tags
    if wait is not None:
        d["WAIT"] = wait
    if uniq is not None:
        d["UNIQ_KEY"] = uniq
    d.update(extra)
    return properties_to_string(d)


def uniq_key() -> str:
    """A 32-hex-digit UNIQ_KEY (spec 3.6 shape)."""
    return (os.urandom(8).hex() + f"{time.time_ns() & 0xFFFFFFFFFFFFFFFF:016x}").upper()[:32]


# --------------------------------------------------------------------------- broker API
class BrokerApi(ClosingContext):
    """Raw requests to one broker over one RemotingClient connection."""

    def __init__(
        self, addr: str, serialize_type: int = SerializeType.JSON, client: RemotingClient | None = None
    ) -> None:
        self.addr = addr
        self.client = client or RemotingClient(serialize_type=serialize_type)

    async def close(self) -> None:
        await self.client.close()

    async def call(
        self, code: int, ext: dict[str, str] | None = None, body: bytes | None = None, timeout: float = TIMEOUT
    ) -> RemotingCommand:
        return await self.client.invoke(self.addr, RemotingCommand(code, ext_fields=ext, body=body), timeout)

    async def oneway(self, code: int, ext: dict[str, str] | None = None, body: bytes | None = None) -> None:
        await self.client.invoke_oneway(self.addr, RemotingCommand(code, ext_fields=ext, body=body))

    # --- send (2.4) ---
    @staticmethod
    def send_header(
        topic: str,
        *,
        queue_id: int = 0,
        properties: str | None = None,
        group: str = "PG_TEST",
        default_topic: str = "TBW102",
        default_queue_nums: int = 4,
        sys_flag: int = 0,
        flag: int = 0,
        batch: bool | None = None,
    ) -> SendMessageRequestHeader:
        return SendMessageRequestHeader(
            group,
            topic,
            default_topic,
            default_queue_nums,
            queue_id,
            sys_flag,
            int(time.time() * 1000),
            flag,
            properties,
            0,
            False,
            bool(batch),
            None,
        )

    async def send(
        self,
        topic: str,
        body: bytes,
        *,
        code: int = RequestCode.SEND_MESSAGE_V2,
        queue_id: int = 0,
        properties: str | None = None,
        timeout: float = TIMEOUT,
        **kw: Any,
    ) -> RemotingCommand:
        if properties is None:
            properties = props(uniq=uniq_key(), wait="true")
        h = self.send_header(topic, queue_id=queue_id, properties=properties, **kw)
        ext = h.to_ext_fields() if code == RequestCode.SEND_MESSAGE else h.to_v2_ext_fields()
        return await self.call(code, ext, body, timeout)

    async def send_ok(self, topic: str, body: bytes, **kw: Any) -> RemotingCommand:
        r = await self.send(topic, body, **kw)
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        return r

    async def send_batch(
        self, topic: str, items: list[tuple[bytes, str]], *, queue_id: int = 0, **kw: Any
    ) -> RemotingCommand:
        body = encode_batch([BatchItem(0, b, p) for b, p in items])
        h = self.send_header(topic, queue_id=queue_id, properties=props(wait="true"), batch=True, **kw)
        return await self.call(RequestCode.SEND_BATCH_MESSAGE, h.to_v2_ext_fields(), body)

    # --- pull (2.5) ---
    @staticmethod
    def pull_header(
        topic: str,
        queue_id: int,
        offset: int,
        *,
        group: str = "CG_TEST",
        max_nums: int = 32,
        sys_flag: int = PullSysFlag.SUBSCRIPTION,
        subscription: str | None = "*",
        suspend_ms: int = 0,
        commit_offset: int = 0,
        sub_version: int = 0,
    ) -> PullMessageRequestHeader:
        return PullMessageRequestHeader(
            group,
            topic,
            queue_id,
            offset,
            max_nums,
            sys_flag,
            commit_offset,
            suspend_ms,
            sub_version,
            subscription,
            "TAG" if subscription is not None else None,
        )

    async def pull(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        code: int = RequestCode.PULL_MESSAGE,
        timeout: float = TIMEOUT,
        **kw: Any,
    ) -> RemotingCommand:
        h = self.pull_header(topic, queue_id, offset, **kw)
        return await self.call(code, h.to_ext_fields(), timeout=timeout)

    async def pull_all(
        self, topic: str, queue_id: int, *, group: str = "CG_TEST", start: int = 0, max_nums: int = 32
    ) -> tuple[bytes, int]:
        """Every record of the queue from start: (concatenated bodies, next offset)."""
        out = []
        offset = start
        while True:
            r = await self.pull(topic, queue_id, offset, group=group, max_nums=max_nums)
            if r.code != ResponseCode.SUCCESS:
                assert r.code == ResponseCode.PULL_NOT_FOUND, (r.code, r.remark, r.ext_fields)
                return b"".join(out), offset
            out.append(r.body or b"")
            offset = int(r.ext_fields["nextBeginOffset"])

    # --- offsets (2.6) ---
    async def query_offset(self, group: str, topic: str, queue_id: int) -> RemotingCommand:
        h = QueryConsumerOffsetRequestHeader(group, topic, queue_id)
        return await self.call(RequestCode.QUERY_CONSUMER_OFFSET, h.to_ext_fields())

    async def update_offset(
        self, group: str, topic: str, queue_id: int, offset: int, oneway: bool = False
    ) -> RemotingCommand | None:
        ext = UpdateConsumerOffsetRequestHeader(group, topic, queue_id, offset).to_ext_fields()
        if oneway:
            await self.oneway(RequestCode.UPDATE_CONSUMER_OFFSET, ext)
            return None
        return await self.call(RequestCode.UPDATE_CONSUMER_OFFSET, ext)

    async def max_offset(self, topic: str, queue_id: int) -> int:
        r = await self.call(RequestCode.GET_MAX_OFFSET, GetMaxOffsetRequestHeader(topic, queue_id).to_ext_fields())
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        return int(r.ext_fields["offset"])

    async def min_offset(self, topic: str, queue_id: int) -> int:
        r = await self.call(RequestCode.GET_MIN_OFFSET, GetMinOffsetRequestHeader(topic, queue_id).to_ext_fields())
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        return int(r.ext_fields["offset"])

    async def wait_max_offset(self, topic: str, queue_id: int, n: int, timeout: float = 5.0) -> None:
        """Dispatch is asynchronous (as in RocketMQ): wait until the queue holds n units."""
        await wait_until(
            lambda: self._max_at_least(topic, queue_id, n), timeout, f"{topic}-{queue_id} never reached max offset {n}"
        )

    async def _max_at_least(self, topic: str, queue_id: int, n: int) -> bool:
        return await self.max_offset(topic, queue_id) >= n

    # --- clients (2.7) ---
    async def heartbeat(
        self,
        client_id: str,
        consumers: list[tuple[str, list[tuple[str, str]]]] = (),
        producers: list[str] = (),
        message_model: str = "CLUSTERING",
        sub_version: int = 0,
    ) -> RemotingCommand:
        """consumers: [(group, [(topic, expression), ...])]."""
        hb = HeartbeatData(
            client_id,
            [ProducerData(g) for g in producers],
            [
                ConsumerData(
                    g,
                    "CONSUME_PASSIVELY",
                    message_model,
                    "CONSUME_FROM_LAST_OFFSET",
                    [SubscriptionData.build(t, e, sub_version=sub_version or int(time.time() * 1000)) for t, e in subs],
                )
                for g, subs in consumers
            ],
        )
        return await self.call(RequestCode.HEART_BEAT, body=hb.to_json())

    # --- admin ---
    async def topics(self) -> dict[str, TopicConfig]:
        r = await self.call(RequestCode.GET_ALL_TOPIC_CONFIG)
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        return TopicConfigSerializeWrapper.from_json(r.body).topic_config_table

    async def create_topic(self, topic: str, queues: int = 4, perm: int = 6, **kw: Any) -> RemotingCommand:
        h = CreateTopicRequestHeader(topic, "TBW102", queues, queues, perm, **kw)
        return await self.call(RequestCode.UPDATE_AND_CREATE_TOPIC, h.to_ext_fields())

    async def runtime_info(self) -> dict[str, str]:
        r = await self.call(RequestCode.GET_BROKER_RUNTIME_INFO)
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        return KVTable.from_json(r.body).table


# --------------------------------------------------------------------------- NameServer
async def route(client: RemotingClient, ns_addr: str, topic: str) -> tuple[int, TopicRouteData | None]:
    r = await client.invoke(
        ns_addr,
        RemotingCommand(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields=GetRouteInfoRequestHeader(topic).to_ext_fields()
        ),
        TIMEOUT,
    )
    if r.code != ResponseCode.SUCCESS:
        return r.code, None
    return r.code, TopicRouteData.from_json(r.body)


async def cluster_info(client: RemotingClient, ns_addr: str) -> ClusterInfo:
    r = await client.invoke(ns_addr, RemotingCommand(RequestCode.GET_BROKER_CLUSTER_INFO), TIMEOUT)
    assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
    return ClusterInfo.from_json(r.body)


async def broker_in_route(client: RemotingClient, ns_addr: str, topic: str, broker_addr: str) -> TopicRouteData | None:
    code, rd = await route(client, ns_addr, topic)
    if rd is None:
        return None
    if any(bd.broker_addrs.get(0) == broker_addr for bd in rd.broker_datas):
        return rd
    return None


# --------------------------------------------------------------------------- waiting
async def wait_until(
    pred: Callable[[], Awaitable[bool] | bool], timeout: float, what: str, interval: float = 0.02
) -> float:
    """Poll pred until true; returns the seconds it took; fails with `what` on timeout."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while True:
        r = pred()
        if asyncio.iscoroutine(r):
            r = await r
        if r:
            return loop.time() - start
        if loop.time() - start > timeout:
            raise AssertionError(f"{what} (waited {timeout}s)")
        await asyncio.sleep(interval)


# --------------------------------------------------------------------------- processes
def restart_broker(
    workdir: Path, ns_addr: str | None, old: BrokerProcess, conf: dict[str, object] | None = None
) -> BrokerProcess:
    """Start the broker again on the same store (same name => same directory)."""
    assert not old.alive()
    return broker_process(workdir, ns_addr, old.name, conf).start()


def commitlog_slice(store_dir: Path, phy_offset: int, size: int, file_size: int) -> bytes:
    """size bytes of the CommitLog at phy_offset, read from the files on disk."""
    base = phy_offset - phy_offset % file_size
    path = Path(store_dir) / "commitlog" / f"{base:020d}"
    with open(path, "rb") as f:
        f.seek(phy_offset - base)
        return f.read(size)


# --------------------------------------------------------------------------- raw sockets
class RawConn:
    """A bare TCP connection for hand-made frames (bad input, oneway, serialize types)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.local_port = writer.get_extra_info("sockname")[1]

    @classmethod
    async def open(cls, addr: str) -> RawConn:
        host, port = addr.rsplit(":", 1)
        r, w = await asyncio.open_connection(host, int(port))
        return cls(r, w)

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def send(self, cmd: RemotingCommand) -> None:
        await self.write(encode(cmd))

    async def read_frame_raw(self, timeout: float = TIMEOUT) -> bytes:
        head = await asyncio.wait_for(self.reader.readexactly(4), timeout)
        (length,) = struct.unpack(">i", head)
        rest = await asyncio.wait_for(self.reader.readexactly(length), timeout)
        return head + rest

    async def read_frame(self, timeout: float = TIMEOUT) -> RemotingCommand:
        return decode_frame(await self.read_frame_raw(timeout))

    async def closed_by_peer(self, timeout: float = 3.0) -> bool:
        """True if the peer closes (EOF or reset) within timeout, without sending anything."""
        try:
            data = await asyncio.wait_for(self.reader.read(65536), timeout)
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
        return data == b""

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass


async def produce_and_consume(
    namesrv: str,
    topic: str,
    n: int,
    access_key: str | None = None,
    secret_key: str | None = None,
    *,
    prefix: str = "m",
    use_tls: bool = False,
    poll_ms: int = 200,
    timeout: float = 30,
) -> list[bytes]:
    """Send ``<prefix>0``..``<prefix><n-1>`` through rmq.client and pull them back from the
    first offset with a LitePullConsumer (PULL_MESSAGE, which every broker knows), signing
    with the credentials when given, over TLS with ``use_tls``; the bodies, sorted. Messages
    of the topic without the prefix (another call's) are passed over."""
    from rmq.client import ConsumeFromWhere, LitePullConsumer, Message, Producer

    client = {"access_key": access_key, "secret_key": secret_key, "use_tls": use_tls}
    async with Producer(unique("pg"), namesrv, **client) as p:
        for i in range(n):
            await p.send(Message(topic, f"{prefix}{i}".encode()))
    c = LitePullConsumer(unique("cg"), namesrv, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, **client)
    c.subscribe(topic, "*")
    await c.start()
    try:
        got: list[bytes] = []

        async def enough() -> bool:
            got.extend(m.body for m in await c.poll(poll_ms) if m.body.startswith(prefix.encode()))
            return len(got) >= n

        await wait_until(enough, timeout, f"{n} {prefix}* messages consumed")
    finally:
        await c.shutdown()
    return sorted(got)


def signing_client(creds: tuple[str, str] | None) -> RemotingClient:
    """A RemotingClient signing with (AccessKey, SecretKey) as the Java client's
    AclClientRPCHook does; unsigned with None."""
    from rmq.client.acl import AclClientRPCHook

    return RemotingClient(request_hook=AclClientRPCHook(*creds) if creds else None)


def acl_account(ak: str, sk: str, admin: bool = False, **fields: object) -> dict[str, object]:
    """One plain_acl.yml account; a normal one may publish and subscribe everything."""
    if not admin:
        fields = {"defaultTopicPerm": "PUB|SUB", "defaultGroupPerm": "PUB|SUB", **fields}
    return {"accessKey": ak, "secretKey": sk, "admin": admin, **fields}


def acl_yml(*accounts: dict[str, object], global_white: list[str] | None = None) -> str:
    """A plain_acl.yml text with these accounts (and globalWhiteRemoteAddresses)."""
    import yaml

    return yaml.safe_dump({"globalWhiteRemoteAddresses": global_white or [], "accounts": list(accounts)})
