"""Narrow interfaces to the outside world. Stages depend on these, never on client libraries,
so pure logic is tested with in-memory fakes and the real adapters are tested against real servers."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from workers.records import InMsg
from workers.state.keyspace import Keyspace
from workers.state.profile_fields import ProfileWrite
from workers.state.reputation import Applied, Bans, Plan, Reporters
from workers.state.signals import Plan as SignalPlan


class HashStore(Protocol):
    async def enrich(
        self, keys: Sequence[str], plans: Sequence[SignalPlan]
    ) -> tuple[list[dict[str, str]], list[list[float]]]:
        """The hashes at ``keys`` (empty where missing), and each plan's signals as before its post
        (in :attr:`Plan.features` order), which is then counted (workers/state/signals.py), in one round trip."""
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

    async def connect(self) -> None:
        """Read :attr:`version` and :attr:`parallelism` from the server; raises when it does not serve the model."""
        ...

    async def logits(
        self, input_ids: npt.NDArray[np.int64], attention_mask: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float32]:
        """``[batch, 2]`` logits; raises on timeout or server error."""
        ...

    async def close(self) -> None:
        """Release the connection: a text model switched from is closed once no batch uses it."""
        ...


class Source(Protocol):
    def poll_batch(self, max_size: int, max_wait_s: float) -> list[InMsg]: ...

    def store_offsets(self, offsets: dict[tuple[str, int], int]) -> None:
        """Mark ``(topic, partition) -> next offset`` as safe to commit."""
        ...

    def close(self) -> None: ...


Headers = Sequence[tuple[str, str | bytes | None]]

# librdkafka errors that blame the record rather than the broker: sending it again cannot help.
RECORD_ERRORS = frozenset(
    {"MSG_SIZE_TOO_LARGE", "INVALID_MSG_SIZE", "INVALID_MSG", "INVALID_RECORD", "RECORD_LIST_TOO_LARGE"}
)


@dataclass(frozen=True, slots=True)
class DeliveryError:
    code: str  # librdkafka's error name, e.g. MSG_SIZE_TOO_LARGE
    message: str

    @property
    def blames_record(self) -> bool:
        return self.code in RECORD_ERRORS

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class Sink(Protocol):
    def produce(self, topic: str, key: bytes | None, value: bytes, headers: Headers, token: int) -> None:
        """Queue a record; its delivery report is returned by :meth:`flush` under ``token``.
        Never raises for the record: a record the client refuses is reported as failed."""
        ...

    def flush(self, timeout_s: float) -> dict[int, DeliveryError | None]:
        """Wait for every queued record; ``token -> error`` (None when delivered)."""
        ...


class Framing(Protocol):
    """Records framed by a Schema Registry (a magic byte and a schema id before the payload),
    for a stream that is not plain JSON: read into their fields, written from them."""

    def read(self, topic: str, value: bytes) -> dict[str, Any]:
        """The fields of a record consumed from ``topic``. Raises :class:`~workers.errors.Outage`
        when the registry did not answer, any other error when the record cannot be read."""
        ...

    def write(self, topic: str, fields: dict[str, Any]) -> bytes:
        """A verdict's fields framed for ``topic``, its schema registered under the topic's subject;
        raises :class:`~workers.errors.Outage` when the registry did not answer."""
        ...

    def register(self, topic: str) -> int:
        """Register the verdict schema for ``topic`` now (at start-up); its schema id."""
        ...


class ReputationStore(Protocol):
    """Where the feedback worker keeps reputation counters and ban lists."""

    @property
    def keyspace(self) -> Keyspace: ...

    async def reporters(self, actors: Collection[str], posts: Collection[str]) -> Reporters:
        """The records of ``actors`` and who reported ``posts``, in one round trip (none when both are empty)."""
        ...

    async def apply(self, plan: Plan) -> Applied:
        """Apply each change of the batch at most once (atomically with its applied-marker), in
        one round trip, and return the counters the ban rules need as they are after it."""
        ...

    async def ban(self, bans: Bans) -> tuple[int, int]:
        """Add to the ban lists; returns how many domains and IPs were new."""
        ...


class ProfileStore(Protocol):
    """Where the profile ingester writes platform-supplied profile fields."""

    async def write(self, writes: Sequence[ProfileWrite]) -> tuple[int, int]:
        """Apply every write in one round trip; returns how many fields were written and how
        many kept (a newer value, or a prior, was already stored)."""
        ...
