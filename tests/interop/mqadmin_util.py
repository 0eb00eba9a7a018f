"""The real mqadmin 4.9.8 (../shared/rocketmq-4.9.8) run as a subprocess against rmq."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROCKETMQ = Path(__file__).resolve().parents[3] / "shared" / "rocketmq-4.9.8" / "bin" / "rocketmq"


@dataclass
class MqadminRun:
    rc: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


def mqadmin_available() -> str | None:
    """Why the real mqadmin cannot run here, or None."""
    if not ROCKETMQ.exists():
        return f"{ROCKETMQ} is missing"
    if shutil.which("java") is None:
        return "no java on PATH"
    return None


def mqadmin(
    user_home: Path, *args: str, timeout: float = 60.0, rocketmq_home: Path | None = None, cwd: Path | None = None
) -> MqadminRun:
    """``bin/rocketmq mqadmin ARGS``; logs and client state under user_home; ``cwd`` for the
    subcommands that write files relative to it (consumerStatus)."""
    env = dict(os.environ, ROCKETMQ_USER_HOME=str(user_home), JAVA_HEAP="256m")
    # mqadmin starts a background route request (TBW102) on the NameServer connection its
    # command shares; on a CPU-starved CI box that request can time out, and with the
    # client's default closeSocketIfTimeout=true the client closes the shared connection,
    # failing the command's own request with a causeless "send request failed" (seen with
    # the NameServer answering other connections within ms). The command's own timeout
    # still fails the command.
    opts = "-Dcom.rocketmq.remoting.client.closeSocketIfTimeout=false"
    env["JAVA_TOOL_OPTIONS"] = f"{env.get('JAVA_TOOL_OPTIONS', '')} {opts}".strip()
    env.pop("NAMESRV_ADDR", None)
    if rocketmq_home is not None:
        env["ROCKETMQ_HOME"] = str(rocketmq_home)
    p = subprocess.run(
        [str(ROCKETMQ), "mqadmin", *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd
    )
    return MqadminRun(p.returncode, p.stdout, p.stderr)
