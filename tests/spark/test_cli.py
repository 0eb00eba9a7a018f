"""`rmq rebuild-cq` called by its full path, without activating the venv: a bare PATH,
no VIRTUAL_ENV, no PYSPARK_PYTHON, run from elsewhere. Bad input gets one clear line and
exit code 2 before Spark starts."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark.commitlog_gen import CommitLogWriter
from tests.spark.test_scan import varied_messages

pytestmark = pytest.mark.timeout(300)

RMQ = Path(sys.executable).parent / "rmq"


def run_cli(*args: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8"}
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    return subprocess.run(
        [str(RMQ), "rebuild-cq", *args], cwd=cwd, env=env, text=True, capture_output=True, timeout=timeout
    )


def small_store(root: Path, n: int = 200) -> CommitLogWriter:
    w = CommitLogWriter(str(root / "commitlog"), 16 * 1024)
    varied_messages(w, random.Random(9), n)
    w.close()
    return w


def test_full_run_from_its_full_path(tmp_path):
    assert RMQ.is_file()
    w = small_store(tmp_path / "store")
    out = tmp_path / "out"
    r = run_cli("--store", str(tmp_path / "store"), "--out", str(out), "--master", "local[2]", "--index", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "spark: local[2]" in r.stdout
    assert f"scan: {len(os.listdir(tmp_path / 'store' / 'commitlog'))} files" in r.stdout
    want: dict[tuple[str, int], int] = {}
    for x in w.written:
        if x.sys_flag & 0xC in (0, 8):
            want[(x.topic, x.queue_id)] = want.get((x.topic, x.queue_id), 0) + 1
    got = {}
    for t in os.listdir(out / "consumequeue"):
        for q in os.listdir(out / "consumequeue" / t):
            data = b"".join(
                (out / "consumequeue" / t / q / f).read_bytes()
                for f in sorted(os.listdir(out / "consumequeue" / t / q))
            )
            got[(t, int(q))] = sum(1 for i in range(0, len(data), 20) if data[i : i + 20] != bytes(20))
    assert got == want
    assert os.listdir(out / "index")
    assert not [n for n in os.listdir(out) if n.startswith(".rebuild")]  # no temp left
    # Spark's own chatter stays out: no log4j defaults, no JVM module notice
    assert "Setting default log level" not in r.stderr
    assert "incubator" not in r.stderr


@pytest.mark.parametrize(
    "case",
    ["missing", "no-commitlog", "sizes", "out-not-empty", "nothing-to-do", "bad-conf", "bad-split", "verify-missing"],
)
def test_clear_errors(tmp_path, case):
    store = tmp_path / "store"
    args = ["--store", str(store), "--out", str(tmp_path / "out")]
    if case == "missing":
        expect = f"store directory {store} does not exist"
    elif case == "no-commitlog":
        store.mkdir()
        expect = f"{store} has no CommitLog"
    elif case == "sizes":
        d = store / "commitlog"
        d.mkdir(parents=True)
        (d / f"{0:020d}").write_bytes(bytes(8192))
        (d / f"{8192:020d}").write_bytes(bytes(4096))
        (d / f"{16384:020d}").write_bytes(bytes(8192))
        expect = "inconsistent sizes: 00000000000000008192 is 4096 bytes"
    else:
        small_store(store, 5)
        if case == "out-not-empty":
            (tmp_path / "out" / "consumequeue" / "T").mkdir(parents=True)
            expect = "exists and is not empty"
        elif case == "nothing-to-do":
            args = ["--store", str(store)]
            expect = "nothing to do"
        elif case == "bad-conf":
            conf = tmp_path / "broker.conf"
            conf.write_text("messageDelayLevel=1s 5x\n")
            args += ["--broker-conf", str(conf)]
            expect = "messageDelayLevel"
        elif case == "bad-split":
            args += ["--split-size", "12q"]
            expect = "not a size: '12q'"
        else:
            args += ["--verify", str(tmp_path / "nope")]
            expect = "--verify"
    r = run_cli(*args, cwd=tmp_path, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rmq rebuild-cq: error: "), r.stderr
    assert expect in lines[0]
    assert "spark:" not in r.stdout  # refused before Spark started
    assert not (tmp_path / "out" / "consumequeue").exists() or case == "out-not-empty"
