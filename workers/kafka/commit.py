"""The commit policy, in one place.

An input offset becomes committable only when every record it caused (its verdict, or
its dead letter) has a successful delivery report. Per partition that is the offset after
the longest fully-delivered prefix of the batch; anything after a failed delivery is left
for redelivery. At-least-once stores those offsets for librdkafka to commit; exactly-once
commits them in the transaction that holds the batch's outputs.

No commit error ends the worker (:func:`recovery`): a broker restart loses assignments, moves
the group coordinator, forgets members and fences producers, and each of those is survived by
leaving the offsets uncommitted and handling their records again. A transactional call can
also never return (librdkafka, after a broker restart): each runs on a thread of its own under a
deadline (:class:`Guarded`), and one past it is a failed producer, replaced like a fenced one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import partial
from typing import Protocol, TypeVar, runtime_checkable

from workers import errors as isolation
from workers.clients import Source
from workers.errors import describe
from workers.kafka.delivery import DeliveryFailed
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


class Wedged(Exception):
    """A transactional call ran past its deadline: its producer is taken as failed."""


def recovery(exc: BaseException, *, transactional: bool) -> Recovery:
    """How a worker goes on after a commit raised ``exc``."""
    if isinstance(exc, Wedged):
        return Recovery.REOPEN
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
    Each call blocks; the worker makes them through :class:`Guarded`.
    (Here rather than in workers/clients.py, which the decision model's training imports.)"""

    def init(self) -> None:
        """Register the producer's transactional id: fences a predecessor with the same id and
        aborts the transaction it left open. Once per producer, before its first :meth:`begin`."""
        ...

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

    def replace(self) -> None:
        """Put a new producer (not yet :meth:`init`-ed) in place of a fenced, failed or wedged one,
        without waiting on the old one: it is closed in the background."""
        ...


# A transactional call counts as wedged once it runs this many times its own timeout: librdkafka
# answers a timeout itself, as an error the policy reads; only a call that never returns gets here.
DEADLINE_FACTOR = 1.25

T = TypeVar("T")


async def within(call: Callable[[], T], deadline_s: float, what: str) -> T:
    """``call()`` on a thread of its own; raises :class:`Wedged` once ``deadline_s`` passes, leaving
    the thread behind. (Not the loop's executor: a wedged call would hold one of its threads, and
    asyncio.run waits for those at exit; a daemon thread ends with the process.)"""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not done.done():  # gone past its deadline: nobody waits for it any more
            outcome()

    def run() -> None:
        try:
            result = call()
        except BaseException as exc:
            answer = partial(settle, partial(done.set_exception, exc))
        else:
            answer = partial(settle, partial(done.set_result, result))
        with contextlib.suppress(RuntimeError):  # the loop closed while the call hung
            loop.call_soon_threadsafe(answer)

    threading.Thread(target=run, name=f"txn-{what}", daemon=True).start()
    try:
        return await asyncio.wait_for(done, deadline_s)
    except TimeoutError:
        raise Wedged(f"{what} still running after {deadline_s:g} s") from None


@dataclass(slots=True)
class Guarded:
    """The worker's :class:`Transactions`, each call under a deadline (:data:`DEADLINE_FACTOR` times
    ``timeout_s``, the calls' own timeout). A producer is :meth:`Transactions.init`-ed before
    its first transaction; one that is fenced, failed or wedged is replaced and the new one
    initialised (same transactional id: that fences the old one) before the consumer rewinds."""

    transactions: Transactions
    timeout_s: float
    initialised: bool = field(default=False, init=False)

    async def _call(self, call: Callable[[], T], what: str) -> T:
        return await within(call, self.timeout_s * DEADLINE_FACTOR, what)

    async def init(self) -> None:
        """Initialise the producer if it is not yet; raises when it could not be (the next
        transaction tries again)."""
        if not self.initialised:
            await self._call(self.transactions.init, "init_transactions")
            self.initialised = True

    async def begin(self) -> None:
        await self.init()
        await self._call(self.transactions.begin, "begin_transaction")

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        await self._call(partial(self.transactions.commit, offsets), "commit_transaction")

    async def abort(self) -> None:
        await self._call(self.transactions.abort, "abort_transaction")

    async def reopen(self, why: BaseException) -> None:
        """Replace the producer ``why`` showed failed, and fence the old one with the new one's init.
        An init that fails is logged and tried again before the next transaction."""
        log.error("the producer is fenced, failed or wedged (%s): replacing it", describe(why))
        self.transactions.replace()
        self.initialised = False
        try:
            await self.init()
        except Exception as exc:
            log.warning("the new producer's init failed (%s); trying again before the next transaction", describe(exc))

    async def recover(self, exc: BaseException) -> None:
        """After a transaction failed with ``exc``: abort it, or replace a producer that cannot."""
        if recovery(exc, transactional=True) is not Recovery.REOPEN:
            try:
                await self.abort()
                return
            except Exception as abort_exc:
                exc = abort_exc
        await self.reopen(exc)

    async def rewind(self) -> None:
        """The consumer back to the committed offsets (its calls have their own timeouts)."""
        await asyncio.to_thread(self.transactions.rewind)


class BatchCommit(Protocol):
    """How one batch's outputs and offsets become final; batches settle in poll order."""

    async def before_publish(self) -> None:
        """Called before each publish of the batch's outputs (the batch may publish again,
        record by record, after an error)."""
        ...

    async def discard(self) -> None:
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

    async def discard(self) -> None:
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
    A transaction that fails (to begin, or to commit) is aborted and raises :class:`Rewound`."""

    transactions: Guarded
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
        try:
            await self.transactions.begin()
        except Exception as exc:  # nothing is open to abort; a producer that cannot go on is replaced
            if recovery(exc, transactional=True) is Recovery.REOPEN:
                await self.transactions.reopen(exc)
            raise Rewound(f"no transaction began: {describe(exc)}") from exc
        self.open = True

    async def discard(self) -> None:
        if self.open:
            self.open = False
            try:
                await self.transactions.abort()
            except Exception as exc:
                await self.transactions.reopen(exc)
                raise Rewound(f"the transaction could not abort: {describe(exc)}") from exc

    async def settle(self, settlement: Settlement) -> None:
        await self.before_publish()  # a batch that published nothing still commits its offsets
        try:
            if not settlement.complete:
                raise DeliveryFailed(f"{len(settlement.failed)} outputs not delivered; first: {settlement.failed[0]}")
            await self._commit(settlement.store)
        except Exception as exc:
            await self.transactions.recover(exc)
            raise Rewound(f"transaction aborted: {describe(exc)}") from exc
        finally:
            self.open = False

    async def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            try:
                await self.transactions.commit(offsets)
                return
            except Exception as exc:
                if attempt == COMMIT_ATTEMPTS or recovery(exc, transactional=True) is not Recovery.RETRY:
                    raise
                log.warning("transaction commit failed (%s), trying again", describe(exc))


def batch_commit(source: Source, transactions: Guarded | None, after: Awaitable[None] | None) -> BatchCommit:
    """The commit policy of a batch polled after ``after``: exactly-once when the worker has transactions."""
    return AtLeastOnce(source, after) if transactions is None else ExactlyOnce(transactions, after)


def is_record_error(exc: BaseException) -> bool:
    """Whether ``exc`` may be one record's fault (workers/errors.py), so its batch is retried
    record by record; a rolled-back transaction never is."""
    return isolation.is_record_error(exc) and not isinstance(exc, Rewound)
