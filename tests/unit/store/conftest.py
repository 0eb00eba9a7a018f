"""Store fixtures: small files so rolling, BLANK records and recovery are exercised."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from rmq.protocol.message import MessageExtBrokerInner
from rmq.store.config import MessageStoreConfig
from rmq.store.message_store import MessageStore


def small_config(root: Path, **overrides) -> MessageStoreConfig:
    base = dict(
        storePathRootDir=str(root),
        mappedFileSizeCommitLog=16 * 1024,
        mappedFileSizeConsumeQueue=20 * 64,
        maxHashSlotNum=128,
        maxIndexNum=512,
        messageDelayLevel="1s 2s 3s",
    )
    base.update(overrides)
    return MessageStoreConfig(**base)


def msg(topic: str = "TopicA", body: bytes = b"hello", queue_id: int = 0, **props: str) -> MessageExtBrokerInner:
    return MessageExtBrokerInner(topic=topic, body=body, queue_id=queue_id, properties=dict(props))


@pytest.fixture
def open_store(tmp_path: Path) -> Callable[..., contextlib.AbstractAsyncContextManager[MessageStore]]:
    """`async with open_store(**cfg) as st:` loads, starts and always shuts down."""

    @contextlib.asynccontextmanager
    async def _open(root: Path | None = None, **overrides) -> AsyncIterator[MessageStore]:
        st = MessageStore(small_config(root or tmp_path / "store", **overrides))
        st.load()
        try:
            await st.start()
            yield st
        finally:
            await st.shutdown()

    return _open
