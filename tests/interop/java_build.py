"""The official RocketMQ 4.9.8 Java client from ``../shared/rocketmq-4.9.8`` (its README):
compile a small Java test program against its client jars and run it (mqadmin itself:
tests/interop/mqadmin_util.py).

    classes = compile_java([JAVA_SRC / "AclClient.java"], tmp_dir)      # javac, once a session
    r = run_java("AclClient", ["produce", ns, topic, "3", ak, sk], classes=classes, user_home=tmp)
    home = rocketmq_home_copy(tmp / "home", "accessKey: ...\nsecretKey: ...\n")  # mqadmin's tools.yml

``ROCKETMQ_USER_HOME`` (logs, client state) always points at a temp dir of the caller's.
A missing ``javac`` / ``java`` / distribution fails the test (never skips) and names
scripts/install_test_deps.sh, which installs them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.conftest import SHARED

ROCKETMQ_DIST = SHARED / "rocketmq-4.9.8"
ROCKETMQ_BIN = ROCKETMQ_DIST / "bin" / "rocketmq"
JAVA_SRC = Path(__file__).resolve().parent / "java"
INSTALL_SCRIPT = "scripts/install_test_deps.sh"


def require_java() -> None:
    """Fail (not skip) when the JDK or the RocketMQ 4.9.8 distribution is missing."""
    missing = [tool for tool in ("java", "javac") if shutil.which(tool) is None]
    if not ROCKETMQ_BIN.exists():
        missing.append(f"{ROCKETMQ_BIN} (RMQ_SHARED_DIR points at the shared directory)")
    if missing:
        pytest.fail(
            f"Java interop environment is missing: {', '.join(missing)}. "
            f"{INSTALL_SCRIPT} installs default-jdk-headless (`make test` runs it first).",
            pytrace=False,
        )


def classpath() -> str:
    return subprocess.run([str(ROCKETMQ_BIN), "classpath"], capture_output=True, text=True, check=True).stdout.strip()


def compile_java(sources: Sequence[Path], out_dir: Path) -> Path:
    """javac the sources against the 4.9.8 client classpath into out_dir; returns out_dir."""
    require_java()
    out_dir.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(
        ["javac", "-encoding", "UTF-8", "-cp", classpath(), "-d", str(out_dir), *map(str, sources)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if r.returncode != 0:
        pytest.fail(f"javac {' '.join(map(str, sources))} failed:\n{r.stdout}{r.stderr}", pytrace=False)
    return out_dir


def java_env(user_home: Path, classes: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ROCKETMQ_HOME", "NAMESRV_ADDR")}
    env.update(ROCKETMQ_USER_HOME=str(user_home), EXTRA_CP=str(classes), JAVA_HEAP="256m")
    return env


def run_java(
    main_class: str,
    args: Sequence[str],
    *,
    classes: Path,
    user_home: Path,
    stdin: str | None = None,
    timeout: float = 180,
) -> subprocess.CompletedProcess[str]:
    """``EXTRA_CP=classes bin/rocketmq java main_class args...``."""
    user_home.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [str(ROCKETMQ_BIN), "java", main_class, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=java_env(user_home, classes=classes),
        stdin=None if stdin is not None else subprocess.DEVNULL,
    )


def rocketmq_home_copy(dst: Path, tools_yml: str | None = None) -> Path:
    """A writable ROCKETMQ_HOME: the distribution's conf/ copied to dst/conf; tools.yml
    (mqadmin's credentials) replaced by ``tools_yml`` when given."""
    shutil.copytree(ROCKETMQ_DIST / "conf", dst / "conf", dirs_exist_ok=True)
    if tools_yml is not None:
        (dst / "conf" / "tools.yml").write_text(tools_yml)
    return dst
