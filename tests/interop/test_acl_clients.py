"""The C++ client 2.1 (``set_session_credentials``) and ali-ons 3.12 (``accessKey`` /
``secretKey``) against an rmq broker with ``aclEnable=true`` (issue 12 item 8).

Both sign with ``OnsChannel=ALIYUN`` in the signed ext fields; the C++ client also sends
empty strings and JSON numbers, ali-ons numbers and booleans (spec 1.4, 1.5). With the right
credentials each produces and consumes; with a wrong secret its sends are refused and its
consumer gets nothing, and the broker holds nothing of theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration import test_acl
from tests.integration.test_acl import USER, VALIDATE, create_topic, max_offsets, remark
from tests.interop.conftest import Clients, Driver, unique_name
from tests.metrics_util import scrape

pytestmark = pytest.mark.timeout(180)

# One rmq NameServer + broker for this module: aclEnable, test_acl.PLAIN_ACL.
cluster = test_acl.cluster

WRONG = (USER[0], "wrong-secret-2")
ACL_CLIENTS = ["cpp2", "node"]
REFUSED = remark(f"Check signature failed for accessKey={WRONG[0]}", VALIDATE.format(684))


class SignedClients(Clients):
    """Drivers started with ``--access-key`` / ``--secret-key`` = ``self.creds``."""

    creds: tuple[str, str] = USER

    def _start(self, client: str, role: str, namesrv: str, topic: str, group: str, opts: list[str]) -> Driver:
        opts = [*opts, "--access-key", self.creds[0], "--secret-key", self.creds[1]]
        return super()._start(client, role, namesrv, topic, group, opts)


@pytest.fixture
def signed(tmp_path: Path) -> Iterator[SignedClients]:
    with contextlib.closing(SignedClients(tmp_path / "drivers")) as c:  # drivers killed and reaped
        yield c


async def new_topic(cluster, client: str, what: str) -> tuple[str, str, str]:
    topic = unique_name(f"acl-{client}-{what}")
    await create_topic(cluster, topic)  # as the admin account; ali-ons never creates topics
    return topic, unique_name(f"pg-{client}"), unique_name(f"cg-{client}")


def consumer(signed: SignedClients, client: str, cluster, topic: str, group: str, **kw) -> Driver:
    # ali-ons starts a new group at the queue's end unless told; C++ asks the broker, which
    # answers 0 while the queue's first message is in memory (tests/interop/README.md)
    return signed.consumer(client, cluster.namesrv, topic, group, from_first=client == "node", **kw)


@pytest.mark.parametrize("client", ACL_CLIENTS)
async def test_right_credentials_produce_and_consume(cluster, signed, client):
    topic, pgroup, cgroup = await new_topic(cluster, client, "ok")
    signed.creds = USER
    sent = await _to_thread(signed.produce, client, cluster.namesrv, topic, pgroup, 6)
    assert sorted(s["body"] for s in sent) == [f"body-{i}" for i in range(6)]
    assert sum(await max_offsets(cluster, topic)) == 6
    c = consumer(signed, client, cluster, topic, cgroup)
    await _to_thread(c.wait_bodies, [s["body"] for s in sent], 60)
    assert c.terminate() == 0, c.describe()


@pytest.mark.parametrize("client", ACL_CLIENTS)
async def test_wrong_secret_refused_and_nothing_stored(cluster, signed, client):
    topic, pgroup, cgroup = await new_topic(cluster, client, "bad")
    signed.creds = USER
    await _to_thread(signed.produce, client, cluster.namesrv, topic, pgroup, 2)  # something to consume
    signed.creds = WRONG
    before = signature_failures(cluster)
    p = signed.producer(client, cluster.namesrv, topic, pgroup, 2)
    assert await _to_thread(p.wait_exit, 60) == 1, p.describe()
    assert p.sent == [] and p.of("send_error"), p.describe()
    # The send error says "Send [4] times, still failed" (ali-ons, which logs nothing more) or,
    # misleadingly, "No route info of this topic" (C++ 2.1, whose log has the broker's answer).
    assert signature_failures(cluster) > before
    if client == "cpp2":
        assert REFUSED in everything_said(p), p.describe()
    c = consumer(signed, client, cluster, topic, cgroup, idle_exit=6, wait_started=False)
    rc = await _to_thread(c.wait_exit, 60)
    assert c.messages == [] and REFUSED in everything_said(c), c.describe()
    if client == "node":  # ali-ons's start fails on the refused GET_CONSUMER_LIST_BY_GROUP
        assert rc == 2 and REFUSED in c.of("fatal")[0]["error"], c.describe()
    else:  # the C++ consumer starts, logs the refusals and gets nothing
        assert rc == 0 and c.of("summary")[-1]["received"] == 0, c.describe()
    assert sum(await max_offsets(cluster, topic)) == 2  # only the two signed rightly


def signature_failures(cluster) -> float:
    return scrape(cluster.metrics_port).total("rocketmq_auth_failures_total", reason="signature")


def everything_said(d: Driver) -> str:
    """A driver's JSON lines, its stderr (ali-ons's logger) and its C++ client log files."""
    logs = sorted(d.log_dir.glob("*")) if d.log_dir.is_dir() else []
    return "\n".join(
        [json.dumps(d.events), d.stderr_path.read_text(errors="replace")]
        + [f.read_text(errors="replace") for f in logs if f.is_file()]
    )


async def _to_thread(fn, *args, **kw):
    return await asyncio.to_thread(fn, *args, **kw)
