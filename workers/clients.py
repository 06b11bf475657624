"""Narrow interfaces to the outside world. Stages depend on these, never on client libraries,
so pure logic is tested with in-memory fakes and the real adapters are tested against real servers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from workers.records import InMsg


class HashStore(Protocol):
    async def hgetall_many(self, keys: Sequence[str]) -> list[dict[str, str]]:
        """All hashes in one round trip; a missing key gives an empty dict."""
        ...

    async def members(self, keys: Sequence[str]) -> list[set[str]]:
        """The members of several sets in one round trip."""
        ...


class TextModel(Protocol):
    @property
    def version(self) -> str: ...

    @property
    def parallelism(self) -> int:
        """Model instances the server runs at once: a small batch is split across them."""
        ...

    async def logits(
        self, input_ids: npt.NDArray[np.int64], attention_mask: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float32]:
        """``[batch, 2]`` logits; raises on timeout or server error."""
        ...


class Source(Protocol):
    def poll_batch(self, max_size: int, max_wait_s: float) -> list[InMsg]: ...

    def store_offsets(self, offsets: dict[tuple[str, int], int]) -> None:
        """Mark ``(topic, partition) -> next offset`` as safe to commit."""
        ...

    def close(self) -> None: ...


class Sink(Protocol):
    def produce(
        self, topic: str, key: bytes | None, value: bytes, headers: Sequence[tuple[str, str | bytes | None]], token: int
    ) -> None:
        """Queue a record; its delivery report is returned by :meth:`flush` under ``token``."""
        ...

    def flush(self, timeout_s: float) -> dict[int, str | None]:
        """Wait for every queued record; ``token -> error`` (None when delivered)."""
        ...
