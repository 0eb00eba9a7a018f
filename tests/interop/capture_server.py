#!/usr/bin/env python3
"""Protocol capture server for RocketMQ clients: logs every frame a client sends.

Run it with the project venv (it decodes with rmq's own FrameDecoder)::

    .venv/bin/python tests/interop/capture_server.py --port 9876 --out cap.jsonl

and point a client at ``127.0.0.1:9876`` as its NameServer. Each line of output
is one JSON object (``event`` = listening / connect / request / response /
decode_error / disconnect / summary).

Two modes:

* default (``namesrv``): a NameServer that knows no topic. GET_ROUTEINFO_BY_TOPIC
  is answered TOPIC_NOT_EXIST (17, "No topic route info in name server for the
  topic: X"), every other request SYSTEM_ERROR (1); oneway requests get nothing.
  This is what a client sees at start-up before any broker registered.
* ``--fake-broker``: the same port also plays a one-broker cluster with an
  in-memory store, so a client goes on past start-up and the capture shows its
  HEART_BEAT body, SEND_MESSAGE headers, PULL_MESSAGE headers, offset calls,
  and so on. It is a capture aid and a smoke test for the interop drivers, NOT
  a reference broker: no persistence, no delay levels, no transactions, no
  tag-code index, and only what the 4.x clients need to get through a send and
  a consume. Every topic exists (``--queues`` queues; ``%RETRY%`` topics 1).

Frames that rmq's FrameDecoder rejects are logged as ``decode_error`` with the
exact bytes of the offending frame (hex) — that is a bug in rmq or a client
quirk rmq must learn, and the connection is closed as Netty would.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import signal
import struct
import sys
import time
from collections import Counter, defaultdict
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(_HERE))
if _ROOT not in sys.path:  # run from anywhere inside the repo without installing
    sys.path.insert(0, _ROOT)

from rmq.common import mixall  # noqa: E402
from rmq.common.clock import now_ms  # noqa: E402
from rmq.protocol import message as M  # noqa: E402
from rmq.protocol.codes import LanguageCode, RequestCode, ResponseCode, SerializeType  # noqa: E402
from rmq.protocol.errors import ProtocolError  # noqa: E402
from rmq.protocol.frame import FrameDecoder, RemotingCommand, encode  # noqa: E402
from rmq.protocol.headers import _V2_NAMES  # noqa: E402  (SEND_MESSAGE_V2 key -> V1 name, spec 2.4)

RC = RequestCode
RS = ResponseCode

BROKER_NAME = "capture-broker"
CLUSTER_NAME = "CaptureCluster"

_MAX_BODY_TEXT = 2048  # bodies up to this size are logged (JSON parsed or as text)
_MAX_ERROR_HEX = 8192  # bytes of a bad frame written to the log


# --------------------------------------------------------------------------- raw views
def _raw_binary_ext(header: bytes) -> list[list[Any]] | None:
    """Ext fields of a ROCKETMQ binary header, empty keys/values INCLUDED.

    rmq's decoder (like Java's) turns zero-length strings into null and drops
    them; for a capture we want to see that the client sent them.
    """
    try:
        rlen = struct.unpack_from(">i", header, 13)[0]
        p = 17 + max(rlen, 0)
        elen = struct.unpack_from(">i", header, p)[0]
        p += 4
        out = []
        end = p + elen
        while p < end:
            klen = struct.unpack_from(">h", header, p)[0]
            p += 2
            k = header[p : p + klen].decode("utf-8", "replace")
            p += klen
            vlen = struct.unpack_from(">i", header, p)[0]
            p += 4
            v = header[p : p + vlen].decode("utf-8", "replace")
            p += vlen
            out.append([k, v])
        return out
    except (struct.error, ValueError):
        return None


def _raw_json_ext(header: bytes) -> tuple[dict | None, dict]:
    """(raw extFields object, {key: JSON type} for values that are not strings)."""
    try:
        obj = json.loads(header.decode("utf-8"), strict=False)
    except (ValueError, UnicodeDecodeError):
        return None, {}
    ext = obj.get("extFields") if isinstance(obj, dict) else None
    if not isinstance(ext, dict):
        return None, {}
    types = {}
    for k, v in ext.items():
        if not isinstance(v, str):
            types[k] = (
                "null"
                if v is None
                else "boolean"
                if isinstance(v, bool)
                else "number"
                if isinstance(v, (int, float))
                else type(v).__name__
            )
    return ext, types


def _body_view(body: bytes | None) -> dict:
    if not body:
        return {"body_len": 0}
    out: dict[str, Any] = {"body_len": len(body)}
    if len(body) <= _MAX_BODY_TEXT:
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            out["body_b64"] = base64.b64encode(body).decode()
            return out
        try:
            out["body_json"] = json.loads(text)
        except ValueError:
            out["body_text"] = text
    return out


def _split_frames(raw: bytearray, n: int) -> list[bytes]:
    """Pop the first n complete frames (length-prefixed) off raw."""
    out = []
    for _ in range(n):
        (length,) = struct.unpack_from(">i", raw, 0)
        out.append(bytes(raw[: 4 + length]))
        del raw[: 4 + length]
    return out


def _int(ext: dict, key: str, default: int = 0) -> int:
    try:
        return int(ext.get(key, default))
    except (TypeError, ValueError):
        return default


# --------------------------------------------------------------------------- fake broker
class FakeBroker:
    """Just enough of a broker for 4.x clients to send and consume (in memory)."""

    def __init__(self, host: str, port: int, queues: int, pull_hold_ms: int) -> None:
        self.addr = f"{host}:{port}"
        self.store_host = M.pack_host(host, port)
        self.queues = queues
        self.pull_hold_ms = pull_hold_ms
        self.phys = 0
        self.records: dict[tuple[str, int], list[bytes]] = defaultdict(list)
        self.by_phys: dict[int, bytes] = {}
        self.offsets: dict[tuple[str, str, int], int] = {}
        self.consumers: dict[str, dict[str, float]] = defaultdict(dict)  # group -> clientID
        self.new_data = asyncio.Condition()

    def queue_count(self, topic: str) -> int:
        return 1 if mixall.is_retry_topic(topic) or mixall.is_dlq_topic(topic) else self.queues

    def route(self, topic: str, standard_json: bool) -> bytes:
        n = self.queue_count(topic)
        addrs = f'{{"0":"{self.addr}"}}' if standard_json else f'{{0:"{self.addr}"}}'
        # fastjson field order; legacy form has bare integer map keys (spec 2.15).
        text = (
            f'{{"brokerDatas":[{{"brokerAddrs":{addrs},"brokerName":"{BROKER_NAME}",'
            f'"cluster":"{CLUSTER_NAME}"}}],"filterServerTable":{{}},"queueDatas":'
            f'[{{"brokerName":"{BROKER_NAME}","perm":6,"readQueueNums":{n},'
            f'"topicSysFlag":0,"writeQueueNums":{n}}}]}}'
        )
        return text.encode()

    def _append(
        self,
        topic: str,
        qid: int,
        body: bytes,
        props: dict[str, str],
        flag: int,
        sys_flag: int,
        born_ts: int,
        born_host: bytes,
        reconsume: int,
    ) -> tuple[str, int]:
        lst = self.records[(topic, qid)]
        qoff = len(lst)
        if M.MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX not in props:
            props[M.MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = M.UniqueIdGenerator().next_id()
        sys_flag |= M.host_sysflag(born_host, self.store_host)
        rec = M.encode_record(
            topic=topic.encode(),
            body=body,
            properties=M.properties_to_string(props).encode(),
            queue_id=qid,
            flag=flag,
            queue_offset=qoff,
            physical_offset=self.phys,
            sys_flag=sys_flag,
            born_timestamp=born_ts,
            born_host=born_host,
            store_timestamp=now_ms(),
            store_host=self.store_host,
            reconsume_times=reconsume,
        )
        msg_id = M.create_message_id(self.store_host, self.phys)
        lst.append(rec)
        self.by_phys[self.phys] = rec
        self.phys += len(rec)
        return msg_id, qoff

    async def _notify(self) -> None:
        async with self.new_data:
            self.new_data.notify_all()

    async def handle(self, cmd: RemotingCommand, peer: tuple[str, int]) -> RemotingCommand | None:
        ext = dict(cmd.ext_fields or {})
        code = cmd.code
        ok = RS.SUCCESS
        if code == RC.GET_ROUTEINFO_BY_TOPIC:
            std = cmd.version >= 401 or ext.get("acceptStandardJsonOnly") == "true"
            return cmd.create_response(ok, body=self.route(ext.get("topic", ""), std))
        if code in (RC.SEND_MESSAGE, RC.SEND_MESSAGE_V2, RC.SEND_BATCH_MESSAGE):
            if code != RC.SEND_MESSAGE:
                ext = {_V2_NAMES.get(k, k): v for k, v in ext.items()}
            topic = ext.get("topic", "")
            qid = _int(ext, "queueId", 0)
            if qid < 0 or qid >= self.queue_count(topic):
                qid = 0
            born_host = M.pack_host(peer[0], peer[1])
            base_props = M.string_to_properties(ext.get("properties"))
            if code == RC.SEND_BATCH_MESSAGE or ext.get("batch") == "true":
                items = M.decode_batch(cmd.body or b"")
            else:
                items = [M.BatchItem(_int(ext, "flag"), cmd.body or b"", "")]
            ids, first = [], None
            for it in items:
                props = dict(base_props)
                props.update(M.string_to_properties(it.properties))
                mid, qoff = self._append(
                    topic,
                    qid,
                    it.body,
                    props,
                    it.flag,
                    _int(ext, "sysFlag"),
                    _int(ext, "bornTimestamp"),
                    born_host,
                    _int(ext, "reconsumeTimes"),
                )
                ids.append(mid)
                first = qoff if first is None else first
            await self._notify()
            hdr = {
                "msgId": ",".join(ids),
                "queueId": str(qid),
                "queueOffset": str(first or 0),
                "MSG_REGION": "DefaultRegion",
                "TRACE_ON": "true",
            }
            uniq = base_props.get(M.MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
            if uniq:
                hdr["transactionId"] = uniq
            return cmd.create_response(ok, ext_fields=hdr)
        if code == RC.PULL_MESSAGE:
            return await self._pull(cmd, ext)
        if code == RC.HEART_BEAT:
            try:
                hb = json.loads(cmd.body or b"{}")
                cid = hb.get("clientID")
                for cd in hb.get("consumerDataSet") or []:
                    self.consumers[cd.get("groupName")][cid] = time.time()
            except (ValueError, AttributeError):
                pass
            return cmd.create_response(ok)
        if code == RC.UNREGISTER_CLIENT:
            g = ext.get("consumerGroup")
            if g in self.consumers:
                self.consumers[g].pop(ext.get("clientID", ""), None)
            return cmd.create_response(ok)
        if code == RC.GET_CONSUMER_LIST_BY_GROUP:
            ids = sorted(self.consumers.get(ext.get("consumerGroup", ""), {}))
            if not ids:
                return cmd.create_response(RS.SYSTEM_ERROR, f"no consumer for this group, {ext.get('consumerGroup')}")
            return cmd.create_response(ok, body=json.dumps({"consumerIdList": ids}).encode())
        if code == RC.QUERY_CONSUMER_OFFSET:
            key = (ext.get("consumerGroup", ""), ext.get("topic", ""), _int(ext, "queueId"))
            if key in self.offsets:
                return cmd.create_response(ok, ext_fields={"offset": str(self.offsets[key])})
            if self.records.get((key[1], key[2])):
                return cmd.create_response(ok, ext_fields={"offset": "0"})
            return cmd.create_response(
                RS.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"
            )
        if code == RC.UPDATE_CONSUMER_OFFSET:
            key = (ext.get("consumerGroup", ""), ext.get("topic", ""), _int(ext, "queueId"))
            self.offsets[key] = _int(ext, "commitOffset")
            return cmd.create_response(ok)
        if code in (RC.GET_MAX_OFFSET, RC.GET_MIN_OFFSET, RC.SEARCH_OFFSET_BY_TIMESTAMP):
            n = len(self.records.get((ext.get("topic", ""), _int(ext, "queueId")), ()))
            return cmd.create_response(ok, ext_fields={"offset": str(n if code == RC.GET_MAX_OFFSET else 0)})
        if code == RC.GET_EARLIEST_MSG_STORETIME:
            return cmd.create_response(ok, ext_fields={"timestamp": "0"})
        if code == RC.LOCK_BATCH_MQ:
            req = json.loads(cmd.body or b"{}")
            return cmd.create_response(ok, body=json.dumps({"lockOKMQSet": req.get("mqSet", [])}).encode())
        if code == RC.UNLOCK_BATCH_MQ:
            return cmd.create_response(ok)
        if code == RC.CONSUMER_SEND_MSG_BACK:
            return await self._send_back(cmd, ext, peer)
        return None  # caller answers SYSTEM_ERROR

    async def _pull(self, cmd: RemotingCommand, ext: dict) -> RemotingCommand:
        topic = ext.get("topic", "")
        qid = _int(ext, "queueId")
        off = _int(ext, "queueOffset")
        max_n = max(1, _int(ext, "maxMsgNums", 32))
        sys_flag = _int(ext, "sysFlag")
        if sys_flag & 0x1:  # COMMIT_OFFSET
            self.offsets[(ext.get("consumerGroup", ""), topic, qid)] = _int(ext, "commitOffset")
        sub = ext.get("subscription") or "*"
        tags = None if sub.strip() in ("", "*") else {t.strip() for t in sub.split("||") if t.strip()}
        hold = min(_int(ext, "suspendTimeoutMillis", 15000), self.pull_hold_ms) / 1000.0
        deadline = time.monotonic() + (hold if sys_flag & 0x2 else 0)
        while True:
            lst = self.records.get((topic, qid), [])
            n = len(lst)
            hdr = {"suggestWhichBrokerId": "0", "minOffset": "0", "maxOffset": str(n)}
            if off > n:
                hdr["nextBeginOffset"] = str(n)
                return cmd.create_response(RS.PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY", hdr)
            if off < n:
                chunk = lst[off : off + max_n]
                if tags is not None:
                    chunk = [r for r in chunk if M.decode_record(r).properties.get("TAGS") in tags]
                hdr["nextBeginOffset"] = str(min(n, off + max_n))
                if not chunk:
                    return cmd.create_response(RS.PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE", hdr)
                return cmd.create_response(RS.SUCCESS, "FOUND", hdr, b"".join(chunk))
            left = deadline - time.monotonic()
            if left <= 0:
                hdr["nextBeginOffset"] = str(off)
                return cmd.create_response(RS.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE", hdr)
            async with self.new_data:
                try:
                    await asyncio.wait_for(self.new_data.wait(), left)
                except TimeoutError:
                    pass

    async def _send_back(self, cmd: RemotingCommand, ext: dict, peer) -> RemotingCommand:
        rec = self.by_phys.get(_int(ext, "offset", -1))
        group = ext.get("group", "")
        if rec is None:
            return cmd.create_response(RS.SYSTEM_ERROR, f"look message by offset failed, {ext.get('offset')}")
        m = M.decode_record(rec)
        props = dict(m.properties)
        props.setdefault(M.MessageConst.RETRY_TOPIC, m.topic)
        props.setdefault(M.MessageConst.ORIGIN_MESSAGE_ID, ext.get("originMsgId") or m.msg_id)
        self._append(
            mixall.retry_topic(group),
            0,
            m.body,
            props,
            m.flag,
            m.sys_flag & 0x3,
            m.born_timestamp,
            M.pack_host(peer[0], peer[1]),
            m.reconsume_times + 1,
        )
        await self._notify()
        return cmd.create_response(RS.SUCCESS)


# --------------------------------------------------------------------------- server
class CaptureServer:
    def __init__(self, out, fake: FakeBroker | None) -> None:
        self.out = out
        self.fake = fake
        self.t0 = time.monotonic()
        self.conn_seq = 0
        self.codes: Counter[str] = Counter()
        self.first: dict[str, dict] = {}
        self.decode_errors = 0
        self.connections = 0

    def log(self, **rec: Any) -> None:
        rec = {"t": round(time.monotonic() - self.t0, 3), **rec}
        self.out.write(json.dumps(rec, ensure_ascii=False, sort_keys=False) + "\n")
        self.out.flush()

    def describe(self, cmd: RemotingCommand, frame: bytes) -> dict:
        hlen = struct.unpack_from(">I", frame, 4)[0] & 0xFFFFFF
        header = frame[8 : 8 + hlen]
        d: dict[str, Any] = {
            "code": cmd.code,
            "code_name": (RC.name_of(cmd.code) if not cmd.is_response else RS.name_of(cmd.code)),
            "language": cmd.language,
            "language_name": LanguageCode.name_of(cmd.language),
            "version": cmd.version,
            "opaque": cmd.opaque,
            "flag": cmd.flag,
            "oneway": cmd.is_oneway,
            "serialize_type": cmd.serialize_type,
            "serialize_name": SerializeType.name_of(cmd.serialize_type),
            "header_len": hlen,
        }
        if cmd.remark is not None:
            d["remark"] = cmd.remark
        d["ext"] = cmd.ext_fields  # as rmq decoded it
        if cmd.serialize_type == SerializeType.ROCKETMQ:
            raw = _raw_binary_ext(header)
            d["ext_raw_pairs"] = raw
            empties = [k for k, v in (raw or []) if v == ""]
            d["header_hex"] = header.hex()
        else:
            raw_ext, types = _raw_json_ext(header)
            if types:
                d["ext_non_string"] = types
            empties = [k for k, v in (raw_ext or {}).items() if v == ""]
            d["header_text"] = header.decode("utf-8", "replace")
        if empties:
            d["ext_empty"] = empties
        d.update(_body_view(cmd.body))
        return d

    async def answer(self, cmd: RemotingCommand, peer) -> RemotingCommand | None:
        if cmd.is_oneway:
            if self.fake is not None:
                await self.fake.handle(cmd, peer)  # side effects only (offset commits)
            return None
        if self.fake is not None:
            resp = await self.fake.handle(cmd, peer)
            if resp is not None:
                return resp
        elif cmd.code == RC.GET_ROUTEINFO_BY_TOPIC:
            topic = (cmd.ext_fields or {}).get("topic", "")
            return cmd.create_response(RS.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {topic}")
        return cmd.create_response(
            RS.SYSTEM_ERROR, f"rmq capture server: request code {cmd.code} ({RC.name_of(cmd.code)}) not handled"
        )

    async def on_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.conn_seq += 1
        self.connections += 1
        cid = self.conn_seq
        peer = writer.get_extra_info("peername")[:2]
        self.log(event="connect", conn=cid, peer=f"{peer[0]}:{peer[1]}")
        dec = FrameDecoder()
        raw = bytearray()
        tasks: set[asyncio.Task] = set()
        wlock = asyncio.Lock()
        nframes = 0

        async def respond(cmd: RemotingCommand, rec: dict) -> None:
            try:
                resp = await self.answer(cmd, peer)
            except Exception as e:  # a capture aid must not die on one odd request
                resp = cmd.create_response(RS.SYSTEM_ERROR, f"capture server error: {e!r}")
            if resp is None:
                return
            data = encode(resp)
            async with wlock:
                writer.write(data)
                await writer.drain()
            self.log(
                event="reply",
                conn=cid,
                opaque=cmd.opaque,
                to_code=cmd.code,
                code=resp.code,
                code_name=RS.name_of(resp.code),
                remark=resp.remark,
                ext=resp.ext_fields,
                body_len=len(resp.body or b""),
            )

        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                raw += data
                try:
                    cmds = dec.feed(data)
                except ProtocolError as e:
                    self.decode_errors += 1
                    bad = bytes(raw[:_MAX_ERROR_HEX])
                    length = struct.unpack_from(">i", raw, 0)[0] if len(raw) >= 4 else None
                    self.log(
                        event="decode_error",
                        conn=cid,
                        error=str(e),
                        frame_index=nframes,
                        declared_length=length,
                        buffered=len(raw),
                        bytes_hex=bad.hex(),
                    )
                    break
                frames = _split_frames(raw, len(cmds))
                for cmd, frame in zip(cmds, frames, strict=True):
                    nframes += 1
                    rec = self.describe(cmd, frame)
                    kind = "response" if cmd.is_response else "request"
                    self.log(event=kind, conn=cid, seq=nframes, **rec)
                    if cmd.is_response:
                        continue
                    self.codes[rec["code_name"]] += 1
                    self.first.setdefault(
                        rec["code_name"],
                        {
                            k: rec[k]
                            for k in ("language_name", "version", "serialize_name", "opaque", "ext")
                            if k in rec
                        },
                    )
                    t = asyncio.ensure_future(respond(cmd, rec))
                    tasks.add(t)
                    t.add_done_callback(tasks.discard)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            for t in tasks:
                t.cancel()
            self.log(event="disconnect", conn=cid, frames=nframes)
            writer.close()

    def summary(self) -> dict:
        return {
            "event": "summary",
            "connections": self.connections,
            "requests": dict(self.codes),
            "decode_errors": self.decode_errors,
            "first_of_each": self.first,
        }


async def main_async(args) -> int:
    out = open(args.out, "w", encoding="utf-8") if args.out else sys.stdout
    fake = None
    srv = CaptureServer(out, None)
    server = await asyncio.start_server(srv.on_conn, args.host, args.port)
    port = server.sockets[0].getsockname()[1]
    if args.fake_broker:
        fake = FakeBroker(args.advertise or args.host, port, args.queues, args.pull_hold_ms)
        srv.fake = fake
    srv.log(event="listening", host=args.host, port=port, mode="fake-broker" if fake else "namesrv", pid=os.getpid())
    if args.port_file:
        with open(args.port_file + ".tmp", "w") as f:
            f.write(str(port))
        os.replace(args.port_file + ".tmp", args.port_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        if args.duration:
            try:
                await asyncio.wait_for(stop.wait(), args.duration)
            except TimeoutError:
                pass
        else:
            await stop.wait()
    finally:
        server.close()
        srv.log(**srv.summary())
        if out is not sys.stdout:
            out.close()
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9876, help="0 = any free port (see --port-file)")
    p.add_argument("--port-file", help="write the bound port here once listening")
    p.add_argument("--out", help="JSON lines file (default stdout)")
    p.add_argument("--duration", type=float, default=0, help="stop after N seconds (0 = on SIGTERM/SIGINT)")
    p.add_argument(
        "--fake-broker", action="store_true", help="also act as a one-broker cluster with an in-memory store"
    )
    p.add_argument("--advertise", help="broker address host to put in routes (default --host)")
    p.add_argument("--queues", type=int, default=4, help="queues per topic in --fake-broker mode")
    p.add_argument(
        "--pull-hold-ms", type=int, default=3000, help="longest a suspended pull is held in --fake-broker mode"
    )
    args = p.parse_args(argv)
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
