"""A full disk refuses writes; it does not corrupt them (and never kills the broker)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCENARIO = Path(__file__).with_name("disk_full_scenario.py")


def _namespace_prefix() -> list[str]:
    """A private mount namespace: root uses it directly; others map themselves to root."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.fail("util-linux `unshare` is required for the disk-full test")
    return [unshare, "--mount"] if os.geteuid() == 0 else [unshare, "--user", "--map-root-user", "--mount"]


@pytest.mark.timeout(180)
def test_full_disk_refuses_writes_and_keeps_acked_messages(tmp_path):
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    script = f"mount -t tmpfs -o size=1536k tmpfs {mnt} && exec {sys.executable} {SCENARIO} {mnt}/store"
    proc = subprocess.run(
        [*_namespace_prefix(), "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=170,
        cwd=str(Path(__file__).parents[2]),
    )
    # A SIGBUS (-7) here would mean a write through a mapping hit a hole on a full disk.
    assert proc.returncode == 0, f"scenario failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["acked"] > 200, result
    # the store said why it refused: file creation failed, then the store turned read-only
    assert set(result["refused"]) <= {"CREATE_MAPPED_FILE_FAILED", "SERVICE_NOT_AVAILABLE"}, result
    assert "CREATE_MAPPED_FILE_FAILED" in result["refused"] or result["flags"], result
    v = result["verify"]
    assert v["n_bad"] == 0, v
    # every acknowledged message is still in its queue after reopening
    assert sum(v["queues"]) == result["acked"], (v, result["acked"])
    assert (
        "No space left on device" in proc.stderr
        or "create mapped file failed" in proc.stderr.lower()
        or "cannot create" in proc.stderr
    ), proc.stderr[-2000:]
