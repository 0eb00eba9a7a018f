"""Retention and disk watermarks with a real broker on a real, small filesystem.

Each broker runs in its own mount namespace (``unshare --mount``) with its store on a
size-limited tmpfs mounted there, so the tmpfs lives exactly as long as the broker
process: nothing is left mounted when a test fails or is killed. The test reaches the
files through ``/proc/<pid>/root`` and fills the tmpfs to the 75 / 85 / 90 % marks with a
preallocated filler file.

* expired CommitLog files go at deleteWhen only (until the disk passes 75 %), never the
  current file; ConsumeQueue and index files below the new minimum go too; a push
  consumer whose offsets fell below the minimum gets PULL_OFFSET_MOVED and receives
  exactly the surviving messages;
* above 85 % files go whether expired or not, at most deleteFileBatchMax a run; above
  90 % sends are refused with SERVICE_NOT_AVAILABLE and a disk-full remark, and
  accepted again once space returns.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import struct
import time
from pathlib import Path

import pytest

from rmq.client import ConsumeFromWhere, ConsumeResult, Message, MQBrokerError, MQClientAPI, Producer, PushConsumer
from rmq.protocol.bodies import TopicConfig
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.message import decode_message_id
from rmq.remoting.client import RemotingClient
from tests.harness import BrokerProcess, broker_process, start_namesrv
from tests.integration.broker_util import wait_until

pytestmark = pytest.mark.timeout(240)

CL_FILE = 64 * 1024
CQ_UNITS = 40  # units per ConsumeQueue file
BODY = 900  # ~1 KiB records: ~60 a CommitLog file


def this_hour() -> str:
    h = time.localtime().tm_hour
    return f"{h:02d};{(h + 1) % 24:02d}"  # still matches if the test crosses the hour


def other_hour() -> str:
    return "%02d" % ((time.localtime().tm_hour + 12) % 24)


def namespace_prefix(mnt: Path, size: str) -> list[str]:
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.fail("util-linux `unshare` is required for the retention tests")
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    script = f'mount -t tmpfs -o size={size} rmq-retention "{mnt}" && exec "$@"'
    return [unshare, *user, "--mount", "--propagation", "private", "sh", "-c", script, "sh"]


class TmpfsBroker:
    """A broker whose store is on a tmpfs of its own, and a view of that tmpfs."""

    def __init__(self, workdir: Path, ns_addr: str, name: str, size: str, **conf: object) -> None:
        self.mnt = workdir / name / "mnt"
        self.mnt.mkdir(parents=True)
        props = {
            "storePathRootDir": str(self.mnt / "store"),
            "mappedFileSizeCommitLog": CL_FILE,
            "mappedFileSizeConsumeQueue": 20 * CQ_UNITS,
            "maxHashSlotNum": 64,
            "maxIndexNum": 200,
            "cleanResourceInterval": 200,
            "deleteCommitLogFilesInterval": 0,
            **conf,
        }
        self.proc: BrokerProcess = broker_process(workdir, ns_addr, name, props)
        self.proc.prefix = namespace_prefix(self.mnt, size)

    def __enter__(self) -> TmpfsBroker:
        self.proc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.stop()

    @property
    def addr(self) -> str:
        return self.proc.addr

    @property
    def root(self) -> Path:
        """The tmpfs as the broker sees it."""
        return Path(f"/proc/{self.proc.pid}/root") / self.mnt.relative_to("/")

    def store(self, *parts: str) -> Path:
        return self.root.joinpath("store", *parts)

    def ls(self, *parts: str) -> list[str]:
        d = self.store(*parts)
        return sorted(os.listdir(d)) if d.is_dir() else []

    def usage(self) -> tuple[int, int]:
        st = os.statvfs(self.root)
        return st.f_blocks * st.f_frsize, (st.f_blocks - st.f_bfree) * st.f_frsize

    def fill_to(self, ratio: float) -> float:
        """Resize the filler file so that the tmpfs is ratio used; returns the usage."""
        filler = self.root / "filler"
        have = filler.stat().st_size if filler.exists() else 0
        total, used = self.usage()
        want = max(int(ratio * total) - (used - have), 0)
        fd = os.open(filler, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, min(want, have))
            if want:
                os.posix_fallocate(fd, 0, want)
        finally:
            os.close(fd)
        total, used = self.usage()
        return used / total

    def drop_filler(self) -> None:
        (self.root / "filler").unlink(missing_ok=True)

    def log(self) -> str:
        return self.proc.log_text()


async def runtime(api: MQClientAPI, br: TmpfsBroker) -> dict[str, str]:
    return await api.get_broker_runtime_info(br.addr)


async def commitlog_files(api: MQClientAPI, br: TmpfsBroker) -> list[str]:
    """CommitLog files on disk up to the current one (not the preallocated next)."""
    kv = await runtime(api, br)
    current = int(kv["commitLogMaxOffset"]) // CL_FILE * CL_FILE
    return [n for n in br.ls("commitlog") if int(n) <= current]


async def create_topic(api: MQClientAPI, ns: str, br: TmpfsBroker, topic: str, queues: int) -> None:
    await api.create_topic(br.addr, TopicConfig(topic, queues, queues, 6))

    async def routed() -> bool:
        return await api.get_topic_route_info(topic) is not None

    await wait_until(routed, 10, f"route of {topic}")


async def produce(ns: str, topic: str, n: int, start: int = 0) -> list[tuple[int, int, int, bytes]]:
    """n messages; (queue id, queue offset, CommitLog offset, body) of each."""
    sent = []
    async with Producer(f"pg-{topic}", ns) as p:
        for i in range(start, start + n):
            body = (b"%06d" % i) * (BODY // 6)
            r = await p.send(Message(topic, body, keys=f"k{i}"))
            assert r.ok, r
            sent.append((r.message_queue.queue_id, r.queue_offset, decode_message_id(r.offset_msg_id)[2], body))
    return sent


def index_end_phy_offsets(br: TmpfsBroker) -> list[int]:
    out = []
    for name in br.ls("index"):
        with open(br.store("index", name), "rb") as f:
            out.append(struct.unpack(">q", f.read(32)[24:32])[0])  # endPhyOffset
    return out


@pytest.fixture
def workdir(tmp_path):
    return tmp_path


async def test_expired_files_go_at_delete_when_and_consumers_move_to_the_new_minimum(workdir):
    topic, group = "Retention", "RetentionGroup"
    with (
        start_namesrv(workdir) as ns,
        TmpfsBroker(workdir, ns.addr, "broker-ret", "8m", fileReservedTime=0.0003, deleteWhen=other_hour()) as br,
    ):
        async with RemotingClient() as rc:
            api = MQClientAPI(rc, [ns.addr])
            await create_topic(api, ns.addr, br, topic, 2)
            sent = await produce(ns.addr, topic, 300)
            for qid in (0, 1):  # a group far behind: it consumed nothing yet
                await api.update_consumer_offset(br.addr, group, topic, qid, 0)
            files = await commitlog_files(api, br)
            assert len(files) >= 5
            index_before = br.ls("index")
            assert len(index_before) >= 3

            # 0.0003 h = 1.08 s: every file expires, but it is not the hour and the disk
            # is nearly empty, so nothing goes
            time.sleep(1.3)
            await asyncio.sleep(1.0)  # five cleanup runs
            assert await commitlog_files(api, br) == files
            assert "deleting" not in br.log()

            # deleteWhen covering this hour: every file but the current one goes
            r = await api.raw(br.addr, RequestCode.UPDATE_BROKER_CONFIG, None, f"deleteWhen={this_hour()}\n".encode())
            assert r.code == ResponseCode.SUCCESS, r.remark

            async def deleted() -> bool:
                return len(await commitlog_files(api, br)) == 1

            await wait_until(deleted, 15, "expired CommitLog files deleted")
            assert (await commitlog_files(api, br)) == files[-1:]
            cl_min = int(files[-1])
            assert int((await runtime(api, br))["commitLogMinOffset"]) == cl_min
            for name in files[:-1]:
                start = int(name)
                assert re.search(
                    rf"deleted CommitLog file {name}: offsets \[{start}, "
                    rf"{start + CL_FILE}\)",
                    br.log(),
                ), name
            assert f"deleteWhen {this_hour()}" in br.log()

            # consume queues: min offset = first message still in the CommitLog; their
            # files that point only below it are gone; index files likewise
            survivors = [s for s in sent if s[2] >= cl_min]
            assert 0 < len(survivors) < len(sent)

            async def corrected() -> bool:
                for qid in (0, 1):
                    first = min(s[1] for s in survivors if s[0] == qid)
                    if await api.get_min_offset(br.addr, topic, qid) != first:
                        return False
                return True

            await wait_until(corrected, 5, "consume queue min offsets corrected")
            for qid in (0, 1):
                first = min(s[1] for s in survivors if s[0] == qid)
                cq = br.ls("consumequeue", topic, str(qid))
                assert cq[0] == "%020d" % (first // CQ_UNITS * CQ_UNITS * 20), (qid, first, cq)
            index_after = br.ls("index")
            assert 1 <= len(index_after) < len(index_before)
            assert all(end >= cl_min for end in index_end_phy_offsets(br)[:-1])

            # the group's offsets (0) are below the minimum: PULL_OFFSET_MOVED, then it
            # continues from the minimum and gets exactly the surviving messages
            got: list = []

            def listener(msgs, ctx) -> ConsumeResult:
                got.extend(msgs)
                return ConsumeResult.SUCCESS

            c = PushConsumer(
                group, ns.addr, listener=listener, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
            )
            c.subscribe(topic)
            await c.start()
            try:
                await wait_until(lambda: len(got) >= len(survivors), 30, "surviving messages")
                await asyncio.sleep(0.5)
            finally:
                await c.shutdown()
            assert sorted(m.body for m in got) == sorted(s[3] for s in survivors)
            assert len(got) == len(survivors)
            assert re.search(
                rf"PULL_OFFSET_MOVED: correction offset\. topic={topic} queue=\d "
                rf"group={group} requestOffset=0 newOffset=[1-9]",
                br.log(),
            )
            for qid in (0, 1):
                assert await api.query_consumer_offset(br.addr, group, topic, qid) == await api.get_max_offset(
                    br.addr, topic, qid
                )

            # above diskMaxUsedSpaceRatio expired files go at once, whatever the hour
            r = await api.raw(br.addr, RequestCode.UPDATE_BROKER_CONFIG, None, f"deleteWhen={other_hour()}\n".encode())
            assert r.code == ResponseCode.SUCCESS, r.remark
            await produce(ns.addr, topic, 250, start=300)
            files = await commitlog_files(api, br)
            assert len(files) >= 4
            time.sleep(1.3)
            await asyncio.sleep(1.0)
            assert await commitlog_files(api, br) == files
            assert 0.78 <= br.fill_to(0.80) < 0.84
            await wait_until(deleted, 15, "expired files deleted above 75 %")
            assert (await commitlog_files(api, br)) == files[-1:]
            assert "> diskMaxUsedSpaceRatio 75%" in br.log()
            br.drop_filler()


async def test_forced_deletion_above_85_and_disk_full_above_90(workdir):
    topic = "DiskMarks"
    with (
        start_namesrv(workdir) as ns,
        TmpfsBroker(
            workdir,
            ns.addr,
            "broker-full",
            "4m",
            fileReservedTime=72,
            deleteWhen=other_hour(),
            deleteFileBatchMax=2,
            cleanResourceInterval=300,
        ) as br,
    ):
        async with RemotingClient() as rc:
            api = MQClientAPI(rc, [ns.addr])
            await create_topic(api, ns.addr, br, topic, 1)
            await produce(ns.addr, topic, 380)
            files = await commitlog_files(api, br)
            assert len(files) >= 6

            # 75-85 %: nothing has expired (72 h), so nothing goes
            assert 0.79 <= br.fill_to(0.80) < 0.83
            await asyncio.sleep(1.5)
            assert await commitlog_files(api, br) == files
            assert "mark disk full" not in br.log()

            # just above 85 %: unexpired files go, oldest first, 2 a run, until the disk
            # is below the mark again (two 64 KiB files are 3 % of 4 MiB)
            assert 0.86 <= br.fill_to(0.865) < 0.875

            async def gone(n: int) -> bool:
                return len(await commitlog_files(api, br)) == len(files) - n

            await wait_until(lambda: gone(2), 10, "forced deletion")
            await asyncio.sleep(1.5)
            assert await commitlog_files(api, br) == files[2:]
            assert "forced: disk" in br.log()
            assert all(int(n) <= 2 for n in re.findall(r"deleting (\d+) CommitLog file", br.log()))

            # above 90 %: the store marks itself full and refuses sends; forced deletion
            # meanwhile takes every file but the current one, 2 a run (the filler grows
            # back to 93 % as they go)
            assert br.fill_to(0.93) >= 0.92
            await wait_until(lambda: "mark disk full" in br.log(), 10, "disk full mark")

            async def all_but_current_gone() -> bool:
                br.fill_to(0.93)
                return await gone(len(files) - 1)

            await wait_until(all_but_current_gone, 20, "all old files deleted")
            assert all(int(n) <= 2 for n in re.findall(r"deleting (\d+) CommitLog file", br.log()))
            assert br.fill_to(0.93) >= 0.92
            await asyncio.sleep(0.7)  # a run or two at 93 %
            async with Producer("pg-full", ns.addr, retry_times_when_send_failed=0) as p:
                with pytest.raises(MQBrokerError) as ei:
                    await p.send(Message(topic, b"refused"))
                assert ei.value.code == ResponseCode.SERVICE_NOT_AVAILABLE
                assert "the disk is full" in ei.value.remark
                assert "above diskSpaceWarningLevelRatio 90%" in ei.value.remark

                # space returns: writes are accepted again at the next run
                br.drop_filler()
                deadline = time.monotonic() + 10
                while True:
                    try:
                        r = await p.send(Message(topic, b"accepted again"))
                        break
                    except MQBrokerError as e:
                        assert e.code == ResponseCode.SERVICE_NOT_AVAILABLE
                        assert time.monotonic() < deadline, "writes not accepted again"
                        await asyncio.sleep(0.1)
                assert r.ok
            assert "so mark disk ok; writes are accepted again" in br.log()
