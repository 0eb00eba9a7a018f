"""Fixtures shared by every test layer."""

from __future__ import annotations

import os
import shutil
import tarfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
# The project's shared artefacts sit next to the checkout (../shared); RMQ_SHARED_DIR
# points elsewhere for a clone made in another place.
SHARED = Path(os.environ.get("RMQ_SHARED_DIR") or REPO_ROOT.parent / "shared")
ROCKETMQ_STORE_TGZ = SHARED / "fixtures" / "rocketmq-4.9.8-store.tar.gz"


@pytest.fixture(scope="session")
def rocketmq_store_pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real RocketMQ 4.9.8 store, unpacked once per session. Do not modify it."""
    if not ROCKETMQ_STORE_TGZ.exists():
        pytest.fail(f"fixture missing: {ROCKETMQ_STORE_TGZ}")
    root = tmp_path_factory.mktemp("rocketmq-4.9.8")
    with tarfile.open(ROCKETMQ_STORE_TGZ) as tf:
        tf.extractall(root, filter="data")
    return root / "store"


@pytest.fixture
def rocketmq_store(rocketmq_store_pristine: Path, tmp_path: Path) -> Path:
    """A private, writable copy of the RocketMQ 4.9.8 store for one test."""
    dst = tmp_path / "store"
    shutil.copytree(rocketmq_store_pristine, dst)
    return dst
