"""rmq.remoting.acl_guard: the auth hook over rmq.auth (verdicts, refusal counts, rate-limited log
lines without secrets), where the files are, and the reload loop (changes picked up,
touches ignored, a broken file keeps the previous accounts)."""

from __future__ import annotations

import logging
import os

import pytest

from rmq.auth.acl_config import load_acl
from rmq.auth.signing import sign_request
from rmq.protocol.codes import RemotingSysResponseCode, RequestCode
from rmq.protocol.frame import RemotingCommand
from rmq.remoting.acl_guard import LOG_BURST, LOG_WINDOW_S, AclGuard, AclReloadService, acl_home
from tests.unit.waiting import wait_until

pytestmark = pytest.mark.timeout(30)

ACL = "accounts:\n  - accessKey: RocketMQUser\n    secretKey: 12345678user\n    defaultTopicPerm: PUB\n"


def _home(tmp_path, text: str = ACL):
    (tmp_path / "conf").mkdir(exist_ok=True)
    (tmp_path / "conf" / "plain_acl.yml").write_text(text)
    return tmp_path


def _send(ak: str, sk: str, topic: str = "T", oneway: bool = False) -> RemotingCommand:
    ext = sign_request({"a": "PG", "b": topic, "c": "TBW102"}, b"body", ak, sk)
    cmd = RemotingCommand(RequestCode.SEND_MESSAGE_V2, opaque=7, ext_fields=ext, body=b"body")
    if oneway:
        cmd.mark_oneway()
    return cmd


def test_acl_home_precedence(tmp_path):
    assert acl_home("/from/conf", {"ROCKETMQ_HOME": "/from/env"}) == "/from/conf"
    assert acl_home("", {"ROCKETMQ_HOME": "/from/env"}) == "/from/env"
    assert acl_home("", {}) == os.getcwd()


def test_guard_allows_refuses_and_counts(tmp_path, caplog):
    guard = AclGuard(load_acl(_home(tmp_path)))
    assert guard("127.0.0.1:5000", _send("RocketMQUser", "12345678user")) is None
    with caplog.at_level(logging.WARNING, "rmq.acl"):
        refusal = guard("127.0.0.1:5000", _send("RocketMQUser", "wrong-secret"))
    assert refusal is not None and refusal.code == RemotingSysResponseCode.SYSTEM_ERROR and refusal.opaque == 7
    assert "Check signature failed for accessKey=RocketMQUser" in (refusal.remark or "")
    # a refused oneway still gets a verdict (the dispatcher drops it unanswered)
    assert guard("[::1]:5000", _send("Nobody1", "12345678x", oneway=True)) is not None
    assert guard.failure_counts() == {"signature": 1, "unknown_access_key": 1}
    text = caplog.text
    assert "accessKey=RocketMQUser" in text and "127.0.0.1:5000" in text
    assert "12345678user" not in text and "wrong-secret" not in text
    ext = _send("RocketMQUser", "wrong-secret").ext_fields or {}
    assert ext["Signature"] not in text


def test_refusal_log_is_rate_limited(tmp_path, caplog):
    now = [1000.0]
    guard = AclGuard(load_acl(_home(tmp_path)), clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, "rmq.acl"):
        for _ in range(LOG_BURST + 30):
            guard("10.0.0.1:1", _send("Nobody1", "12345678x"))
        assert len(caplog.records) == LOG_BURST
        now[0] += LOG_WINDOW_S
        guard("10.0.0.1:1", _send("Nobody1", "12345678x"))
    assert "30 more refusals not logged" in caplog.records[LOG_BURST].getMessage()
    assert len(caplog.records) == LOG_BURST + 2
    assert guard.failure_counts() == {"unknown_access_key": LOG_BURST + 31}


async def test_reload_picks_up_changes_ignores_touches_and_keeps_accounts_on_error(tmp_path, caplog):
    home = _home(tmp_path)
    guard = AclGuard(load_acl(home))
    service = AclReloadService(guard, str(home), interval_s=0.02)
    service.start()
    try:
        await wait_until(lambda: service._stamps is not None)
        first = guard.acl
        os.utime(home / "conf" / "plain_acl.yml", ns=(1, 1))  # touched, same content
        await wait_until(lambda: service._stamps is not None and service._stamps[0][1] == 1)
        assert guard.acl is first  # same fingerprint: not replaced
        extra = home / "conf" / "acl" / "more.yaml"
        extra.parent.mkdir()
        extra.write_text("accounts:\n  - accessKey: Another1\n    secretKey: another123\n    defaultTopicPerm: PUB\n")
        await wait_until(lambda: guard.acl.account("Another1") is not None)
        assert guard("127.0.0.1:1", _send("Another1", "another123")) is None
        with caplog.at_level(logging.ERROR, "rmq.acl"):
            extra.write_text("accounts:\n  - accessKey: Another1\n    secretKey: [broken\n")
            await wait_until(lambda: "reload failed" in caplog.text)
        assert "more.yaml:" in caplog.text and "another123" not in caplog.text
        assert guard.acl.account("Another1") is not None and guard.acl is not first
        kept = guard.acl
        os.utime(extra, ns=(2, 2))
        extra.write_text(extra.read_text())  # rewritten, same broken content: reported once more at most
        extra.unlink()
        await wait_until(lambda: guard.acl is not kept)
        assert guard.acl.account("Another1") is None and guard.acl.fingerprint == first.fingerprint
    finally:
        await service.stop(cancel=True)


def test_a_huge_access_key_is_clipped_in_the_log_line(tmp_path, caplog):
    guard = AclGuard(load_acl(_home(tmp_path)))
    huge = "K" * (1 << 20)
    with caplog.at_level(logging.WARNING, "rmq.acl"):
        refusal = guard("10.0.0.1:1", _send(huge, "12345678x"))
    assert refusal is not None and huge in (refusal.remark or "")  # the answer names it as 4.9.8 does
    (line,) = [r.getMessage() for r in caplog.records]
    assert len(line) < 1000 and f"({len(huge)} chars)" in line
