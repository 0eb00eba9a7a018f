"""Plain ACL on a ``RemotingServer`` (spec rocketmq-4x-acl-tls.md §2): the auth hook and
the reload loop around ``rmq.auth``, shared by the broker and the NameServer.

* ``acl_home``: where the files are (the ``rocketmqHome`` key, else ``ROCKETMQ_HOME``,
  else the working directory), as RocketMQ's ``MixAll.ROCKETMQ_HOME``;
* ``AclGuard``: ``guard(peer, request)`` is the ``RemotingServer`` auth hook; it holds the
  current ``AclSet`` (replaced whole on reload, so a request sees one consistent set),
  decides with a rule (the broker's ``permissions.validate`` by default, the
  NameServer's ``namesrv_rules.validate_namesrv``), lets the cluster credential in as an
  admin account (``credentials.with_cluster_account``), counts refusals per reason
  (``rocketmq_auth_failures_total``) and logs them, rate-limited, naming the AccessKey
  and the peer, never a secret or a signature;
* ``AclReloadService``: polls the files' stamps every second (4.9.8 every 5 s: polling
  faster is how a change is live "within 5 s"), reloads in a thread when they change, and
  keeps the previous accounts when the new files do not load.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Mapping

from rmq.auth.acl_config import AclConfigError, AclSet, acl_file_stamps, load_acl
from rmq.auth.address import peer_host
from rmq.auth.cache import BoundedCache
from rmq.auth.credentials import Credential, with_cluster_account
from rmq.auth.permissions import Allowed, Decision, Denied, denial_response, validate
from rmq.protocol.codes import RemotingSysResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.runtime.service import ServiceLoop

__all__ = ["ROCKETMQ_HOME_ENV", "AclGuard", "AclReloadService", "AclRule", "acl_home", "load_acl_set"]

log = logging.getLogger("rmq.acl")

#: (accounts, request code, ext fields, body, request version, peer host) -> verdict
AclRule = Callable[[AclSet, int, Mapping[str, str] | None, bytes | None, int, str], Decision]

ROCKETMQ_HOME_ENV = "ROCKETMQ_HOME"
# Refusal log lines: at most this many per window, then one summary line per window.
LOG_BURST = 20
LOG_WINDOW_S = 10.0
# Longest AccessKey (and twice that for a message quoting it) a refusal log line carries
LOG_TEXT_MAX = 128
# Peer "host:port" strings whose host part is remembered (one per live connection)
PEER_MEMO = 4096


def acl_home(rocketmq_home: str, env: Mapping[str, str] | None = None) -> str:
    """broker.conf ``rocketmqHome``, else ``$ROCKETMQ_HOME``, else the working directory."""
    env = os.environ if env is None else env
    return rocketmq_home or env.get(ROCKETMQ_HOME_ENV) or os.getcwd()


def load_acl_set(home: str, logger: logging.Logger = log) -> AclSet:
    """``load_acl`` plus its warnings logged (duplicate accounts, ignored fields)."""
    acl = load_acl(home)
    for warning in acl.warnings:
        logger.warning("ACL: %s", warning)
    return acl


class AclGuard:
    """The auth hook of one ``RemotingServer`` (a broker's or a NameServer's).

    ``acl`` is the set loaded from the files (what reload replaces and what the ACL
    management codes rewrite); requests are decided against it plus the cluster
    credential's account.
    """

    def __init__(
        self,
        acl: AclSet,
        clock: Callable[[], float] = time.monotonic,
        *,
        rule: AclRule = validate,
        cluster: Credential | None = None,
        logger: logging.Logger = log,
    ) -> None:
        self._rule = rule
        self._cluster = cluster
        self.log = logger
        self.acl = acl
        self.failures: dict[str, int] = {}  # reason -> refusals (metrics read a copy)
        self._clock = clock
        self._window_start = 0.0
        self._logged_in_window = 0
        self._suppressed = 0
        # A refused oneway request gets no answer, but the dispatcher needs a non-None
        # verdict to drop it; this one is never sent.
        self._drop = RemotingCommand(RemotingSysResponseCode.SYSTEM_ERROR)
        # A connection's address is the same for all its requests: its host is cut once.
        self._hosts: BoundedCache[str, str] = BoundedCache(PEER_MEMO)

    @property
    def acl(self) -> AclSet:
        return self._files

    @acl.setter
    def acl(self, acl: AclSet) -> None:
        # one assignment of the pair's second half: a request sees the old or the new set
        self._files = acl
        self._effective = with_cluster_account(acl, self._cluster)

    def __call__(self, remote_address: str, request: RemotingCommand) -> RemotingCommand | None:
        host = self._hosts.get(remote_address)
        if host is None:
            host = self._hosts.put(remote_address, peer_host(remote_address))
        decision = self._rule(self._effective, request.code, request.ext_fields, request.body, request.version, host)
        if isinstance(decision, Allowed):
            return None
        self.failures[decision.reason] = self.failures.get(decision.reason, 0) + 1
        self._log_refusal(decision, remote_address, request.code)
        response = denial_response(request, decision)
        return self._drop if response is None else response

    def failure_counts(self) -> dict[str, int]:
        return dict(self.failures)

    def _log_refusal(self, denied: Denied, peer: str, code: int) -> None:
        # A client retrying with a bad secret would otherwise write a line per request.
        now = self._clock()
        if now - self._window_start >= LOG_WINDOW_S:
            if self._suppressed:
                self.log.warning("ACL: %d more refusals not logged in the last %.0f s", self._suppressed, LOG_WINDOW_S)
            self._window_start = now
            self._logged_in_window = 0
            self._suppressed = 0
        if self._logged_in_window >= LOG_BURST:
            self._suppressed += 1
            return
        self._logged_in_window += 1
        # The message texts name the AccessKey at most (rmq.auth.permissions), never a
        # secret; a client-chosen key is cut so a huge one cannot flood the log.
        ak = denied.access_key
        self.log.warning(
            "ACL: refused request code %d from %s, accessKey=%s: %s (%s)",
            code,
            peer,
            _clip(ak) if ak is not None else "(none)",
            _clip(denied.message or "", LOG_TEXT_MAX * 2),
            denied.reason,
        )


def _clip(text: str, limit: int = LOG_TEXT_MAX) -> str:
    return text if len(text) <= limit else f"{text[:limit]}...({len(text)} chars)"


class AclReloadService(ServiceLoop):
    """Reload the ACL files when they change; a broken file keeps the previous accounts."""

    def __init__(self, guard: AclGuard, home: str, interval_s: float = 1.0) -> None:
        super().__init__("acl-reload", guard.log)
        self.guard = guard
        self.home = home
        self._interval = interval_s
        self._stamps: tuple[tuple[str, int, int], ...] | None = None

    def interval(self) -> float | None:
        return self._interval

    async def on_start(self) -> None:
        # The set in force was loaded at start; changes are measured from here.
        self._stamps = await asyncio.to_thread(acl_file_stamps, self.home)

    async def run_once(self) -> None:
        stamps = await asyncio.to_thread(acl_file_stamps, self.home)
        if stamps == self._stamps:
            return
        # Remembered before loading: a broken file is reported once, not every second;
        # the next edit changes the stamps again and is loaded then.
        self._stamps = stamps
        try:
            acl = await asyncio.to_thread(load_acl_set, self.home, self.guard.log)
        except AclConfigError as e:
            # str(e) is path:line: field: problem, written never to include a secret
            self.guard.log.error("ACL: reload failed, keeping the previous accounts: %s", e)
            return
        except OSError as e:
            self.guard.log.error("ACL: reload failed, keeping the previous accounts: %s", e)
            return
        if acl.fingerprint == self.guard.acl.fingerprint:
            return  # touched, not changed
        self.guard.acl = acl
        self.guard.log.info(
            "ACL: reloaded %d accounts from %d files under %s", len(acl.accounts), len(acl.files), self.home
        )
