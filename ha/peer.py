"""``HAPeer``: what both ends of the HA link hold about the broker they run in.

The master's ``HAService`` and the slave's ``HAClient`` each carry the store they stream from
or into, the broker's cluster and name (checked in the handshake), its epoch providers (the
current epoch, and in controller mode the history the handshake carries) and the inner
credential that signs the handshake.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ha.protocol import EpochProvider, no_epoch
from rmq.auth.credentials import Credential
from rmq.protocol.epoch import EpochEntry
from rmq.store.message_store import MessageStore

__all__ = ["EpochsProvider", "HAPeer"]

#: (controller mode) this broker's epoch history, oldest first
EpochsProvider = Callable[[], Sequence[EpochEntry]]


class HAPeer:
    def __init__(
        self,
        store: MessageStore,
        cluster: str,
        broker_name: str,
        epoch_provider: EpochProvider | None,
        epochs_provider: EpochsProvider | None,
        credential: Credential | None,
    ) -> None:
        self.store = store
        self.config = store.config
        self.cluster = cluster
        self.broker_name = broker_name
        self.epoch_provider = epoch_provider or no_epoch
        self.epochs_provider = epochs_provider
        self.credential = credential

    def epoch_list(self) -> tuple[EpochEntry, ...] | None:
        """The epoch history the handshake carries (None without an epochs_provider)."""
        p = self.epochs_provider
        return tuple(p()) if p is not None else None
