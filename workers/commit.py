"""The commit policy, in one place.

An input offset becomes committable only when every record it caused (its verdict, or
its dead letter) has a successful delivery report. Per partition that is the offset after
the longest fully-delivered prefix of the batch; anything after a failed delivery is left
for redelivery. At-least-once stores those offsets for librdkafka to commit; exactly-once
commits them in the transaction that holds the batch's outputs.

No commit error ends the worker (:func:`recovery`): a broker restart loses assignments, moves
the group coordinator, forgets members and fences producers, and each of those is survived by
leaving the offsets uncommitted and handling their records again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Collection, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol, runtime_checkable

from workers import isolation
from workers.clients import Source
from workers.delivery import DeliveryFailed
from workers.isolation import describe
from workers.records import InMsg

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Settlement:
    store: dict[TopicPartition, int]  # (topic, partition) -> next offset to consume
    failed: list[InMsg]  # messages whose output was not acknowledged

    @property
    def complete(self) -> bool:
        return not self.failed


def settle(msgs: Sequence[InMsg], undelivered: Collection[int]) -> Settlement:
    """``undelivered`` holds indexes into ``msgs`` whose output was not acknowledged."""
    store: dict[TopicPartition, int] = {}
    blocked: set[TopicPartition] = set()
    for i in sorted(range(len(msgs)), key=lambda j: (msgs[j].topic, msgs[j].partition, msgs[j].offset)):
        msg, tp = msgs[i], (msgs[i].topic, msgs[i].partition)
        if i in undelivered:
            blocked.add(tp)
        elif tp not in blocked:
            store[tp] = msg.offset + 1
    return Settlement(store, [msgs[i] for i in sorted(undelivered)])


@runtime_checkable
class ClientError(Protocol):
    """What the policy reads of a Kafka client's error (confluent-kafka's ``KafkaError``)."""

    def name(self) -> str: ...

    def fatal(self) -> bool: ...

    def retriable(self) -> bool: ...

    def txn_requires_abort(self) -> bool: ...


# librdkafka's answer to a commit with nothing stored since the last one.
NOTHING_STORED = "_NO_OFFSET"


class Recovery(Enum):
    """What follows a failed commit; never the end of the worker."""

    NOTHING = "nothing to commit"
    # At-least-once: the offsets stay uncommitted and their records come again (to this worker
    # when the assignment survives, to the partitions' new owner when it was lost).
    REDELIVER = "redeliver"
    RETRY = "retry the commit"  # the transaction is intact: the same call may succeed
    ABORT = "abort and rewind"  # the transaction cannot commit: abort it, poll again from the committed offsets
    # The producer is fenced or failed for good: a new one (its init aborts what the old one left
    # open), then rewind.
    REOPEN = "new producer and rewind"


def client_error(exc: BaseException) -> ClientError | None:
    """The Kafka client's error inside ``exc`` (a ``KafkaException`` carries it first), if any."""
    return next((a for a in exc.args[:1] if isinstance(a, ClientError)), None)


def recovery(exc: BaseException, *, transactional: bool) -> Recovery:
    """How a worker goes on after a commit raised ``exc``."""
    err = client_error(exc)
    if err is not None and err.name() == NOTHING_STORED:
        return Recovery.NOTHING
    if not transactional:
        return Recovery.REDELIVER
    if err is None:
        return Recovery.ABORT
    if err.fatal():
        return Recovery.REOPEN
    if err.retriable() and not err.txn_requires_abort():
        return Recovery.RETRY
    return Recovery.ABORT


# A retriable transaction commit is tried this many times in all before it is aborted.
COMMIT_ATTEMPTS = 3


class Transactions(Protocol):
    """The output producer's transactions, tied to the input consumer's group (exactly-once).
    (Here rather than in workers/clients.py, which the decision model's training imports.)"""

    def begin(self) -> None: ...

    def commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Add the consumer's ``(topic, partition) -> next offset`` and commit, atomically with the
        records produced since :meth:`begin`; raises when the transaction could not commit."""
        ...

    def abort(self) -> None:
        """Drop what was produced since :meth:`begin`; no reader in read_committed sees it."""
        ...

    def rewind(self) -> None:
        """Move the consumer back to its committed offsets on every assigned partition."""
        ...

    def reopen(self) -> None:
        """Replace a fenced or failed producer with a new one; what the old one left open is aborted."""
        ...


class BatchCommit(Protocol):
    """How one batch's outputs and offsets become final; batches settle in poll order."""

    async def before_publish(self) -> None:
        """Called before each publish of the batch's outputs (the batch may publish again,
        record by record, after an error)."""
        ...

    def discard(self) -> None:
        """What the batch published so far is to be published again, record by record."""
        ...

    async def settle(self, settlement: Settlement) -> None:
        """Make the batch's delivered outputs and their offsets final, or raise."""
        ...


class Rewound(Exception):
    """The batch's transaction was aborted: it and the batches polled since are dropped, and the
    consumer is rewound to the committed offsets to poll them again."""


@dataclass(slots=True)
class AtLeastOnce:
    """Offsets are stored once the batch before stored its own; librdkafka commits them. Outputs
    go out as soon as they are ready, so a crash before the commit repeats them."""

    source: Source
    after: Awaitable[None] | None

    async def before_publish(self) -> None:
        pass

    def discard(self) -> None:
        pass

    async def settle(self, settlement: Settlement) -> None:
        if self.after is not None:
            await self.after
        self.source.store_offsets(settlement.store)
        if not settlement.complete:
            raise DeliveryFailed(f"{len(settlement.failed)} outputs not delivered; first: {settlement.failed[0]}")


@dataclass(slots=True)
class ExactlyOnce:
    """One transaction per batch holds its verdicts, dead letters and input offsets. Transactions
    run one at a time in poll order: a batch publishes only after the batch before committed.
    A failed commit aborts and raises :class:`Rewound`."""

    transactions: Transactions
    after: Awaitable[None] | None
    open: bool = False

    async def before_publish(self) -> None:
        if self.open:
            return
        if self.after is not None:
            try:
                await self.after
            except Rewound:
                raise
            except Exception as exc:  # the batch before failed: its successors cannot commit past it
                raise Rewound(f"the batch before failed: {exc}") from exc
        self.transactions.begin()
        self.open = True

    def discard(self) -> None:
        if self.open:
            self.transactions.abort()
            self.open = False

    async def settle(self, settlement: Settlement) -> None:
        await self.before_publish()  # a batch that published nothing still commits its offsets
        try:
            if not settlement.complete:
                raise DeliveryFailed(f"{len(settlement.failed)} outputs not delivered; first: {settlement.failed[0]}")
            self._commit(settlement.store)
        except Exception as exc:
            self._abort(exc)
            raise Rewound(f"transaction aborted: {describe(exc)}") from exc
        finally:
            self.open = False

    def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            try:
                self.transactions.commit(offsets)
                return
            except Exception as exc:
                if attempt == COMMIT_ATTEMPTS or recovery(exc, transactional=True) is not Recovery.RETRY:
                    raise
                log.warning("transaction commit failed (%s), trying again", describe(exc))

    def _abort(self, exc: Exception) -> None:
        """Abort the transaction ``exc`` ended; a producer that cannot abort is replaced."""
        if recovery(exc, transactional=True) is not Recovery.REOPEN:
            try:
                self.transactions.abort()
                return
            except Exception as abort_exc:
                exc = abort_exc
        log.error("the producer is fenced or failed (%s): replacing it", describe(exc))
        self.transactions.reopen()


def batch_commit(source: Source, transactions: Transactions | None, after: Awaitable[None] | None) -> BatchCommit:
    """The commit policy of a batch polled after ``after``: exactly-once when the worker has transactions."""
    return AtLeastOnce(source, after) if transactions is None else ExactlyOnce(transactions, after)


def is_record_error(exc: BaseException) -> bool:
    """Whether ``exc`` may be one record's fault (workers/isolation.py), so its batch is retried
    record by record; a rolled-back transaction never is."""
    return isolation.is_record_error(exc) and not isinstance(exc, Rewound)
