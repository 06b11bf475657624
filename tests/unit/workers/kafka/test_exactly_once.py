"""Exactly-once mode over fakes: one transaction per batch, in poll order; a failed commit rewinds."""

import asyncio
import threading

import pytest

from tests.unit.fakes import FakeKafkaException, FakeSink, FakeTransactions, event
from tests.unit.workers.kafka.test_commit import COORDINATOR_MOVED, FENCED, UNKNOWN_MEMBER
from tests.unit.workers.test_moderation import RecordingSource, make_worker, msgs, overtaking_worker, verdicts
from workers.config import Settings
from workers.kafka.commit import COMMIT_ATTEMPTS, Wedged, within
from workers.text.encoder import TextEncoder


async def test_each_batch_commits_its_outputs_and_offsets_in_one_transaction(encoder: TextEncoder) -> None:
    batch = msgs(event("a"), b"{bad json", event("b"))
    txns = FakeTransactions()
    w = make_worker(encoder, batch, transactions=txns)
    await w.handle(batch)
    assert txns.log == ["init", "begin", "commit"] and txns.committed == {("posts", 0): 3}
    assert w.source.stored == {}  # type: ignore[attr-defined]  # nothing for librdkafka to commit


async def test_a_batch_publishes_only_after_the_batch_before_committed(encoder: TextEncoder) -> None:
    """Batch two is decided first, but its transaction must not open inside batch one's."""
    txns = FakeTransactions()
    w, _, gate = overtaking_worker(encoder, FakeSink(), txns)
    stop = asyncio.Event()

    async def release_and_stop() -> None:
        await asyncio.sleep(0.2)
        assert "c" not in verdicts(w.sink)  # type: ignore[arg-type]  # held back behind batch one
        gate.set()
        while txns.log.count("commit") < 2:
            await asyncio.sleep(0.005)
        stop.set()

    await asyncio.gather(w.run(stop), release_and_stop())
    assert txns.log == ["init", "begin", "commit", "begin", "commit"] and txns.committed == {("posts", 0): 3}
    assert set(verdicts(w.sink)) == {"a", "b", "c"}  # type: ignore[arg-type]


async def test_a_failed_commit_aborts_rewinds_and_the_worker_goes_on(encoder: TextEncoder) -> None:
    log = await _run_until_committed(encoder, FakeTransactions(fail_commits=1))
    assert log == ["init", "begin", "abort", "rewind", "begin", "commit"]


async def test_the_batches_polled_after_an_aborted_one_are_dropped(encoder: TextEncoder) -> None:
    txns = FakeTransactions(fail_commits=1)
    w, _, gate = overtaking_worker(encoder, FakeSink(), txns)
    stop = asyncio.Event()

    async def stop_when_rewound() -> None:
        gate.set()
        while "rewind" not in txns.log:
            await asyncio.sleep(0.005)
        stop.set()

    await asyncio.gather(w.run(stop), stop_when_rewound())
    assert txns.log == ["init", "begin", "abort", "rewind"] and txns.committed == {}
    assert "c" not in verdicts(w.sink)  # type: ignore[arg-type]  # batch two never opened a transaction


async def test_an_error_no_step_catches_aborts_and_republishes_record_by_record(encoder: TextEncoder) -> None:
    batch = msgs(event("a"), event("b"))
    sink = FakeSink()
    txns = FakeTransactions()
    w = make_worker(encoder, batch, sink=sink, transactions=txns)
    real = w._publish
    calls = 0

    async def publish_failing_once(*args, **kw):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        result = await real(*args, **kw)
        if calls == 1:
            raise RecursionError("after producing")
        return result

    w._publish = publish_failing_once  # type: ignore[method-assign]
    await w.handle(batch)
    assert txns.log == ["init", "begin", "abort", "begin", "commit"] and txns.committed == {("posts", 0): 2}


async def _run_until_committed(
    encoder: TextEncoder, txns: FakeTransactions, settings: Settings | None = None
) -> list[str]:
    """One batch through a worker whose transactions are ``txns``, polled again on a rewind."""
    batch = msgs(event("a"), event("b"))
    source = RecordingSource([batch])
    txns.on_rewind = lambda: source.batches.append(batch)
    w = make_worker(encoder, [], transactions=txns, settings=settings)
    w.source = source
    stop = asyncio.Event()

    async def stop_when_committed() -> None:
        while "commit" not in txns.log:
            await asyncio.sleep(0.005)
        stop.set()

    await asyncio.gather(w.run(stop), stop_when_committed())
    assert txns.committed == {("posts", 0): 2}
    return txns.log


async def test_a_commit_to_a_moved_coordinator_is_retried_in_the_same_transaction(encoder: TextEncoder) -> None:
    txns = FakeTransactions(commit_errors=[FakeKafkaException(COORDINATOR_MOVED)])
    assert await _run_until_committed(encoder, txns) == ["init", "begin", "commit failed", "commit"]


async def test_an_abortable_commit_error_aborts_rewinds_and_the_worker_goes_on(encoder: TextEncoder) -> None:
    txns = FakeTransactions(commit_errors=[FakeKafkaException(UNKNOWN_MEMBER)])
    log = await _run_until_committed(encoder, txns)
    assert log == ["init", "begin", "commit failed", "abort", "rewind", "begin", "commit"]


async def test_a_fenced_producer_is_replaced_and_the_batch_polled_again(encoder: TextEncoder) -> None:
    txns = FakeTransactions(commit_errors=[FakeKafkaException(FENCED)])
    log = await _run_until_committed(encoder, txns)
    assert log == ["init", "begin", "commit failed", "replace", "init", "rewind", "begin", "commit"]


async def test_a_producer_that_cannot_abort_is_replaced(encoder: TextEncoder) -> None:
    txns = FakeTransactions(commit_errors=[FakeKafkaException(UNKNOWN_MEMBER)], abort_error=FakeKafkaException(FENCED))
    log = await _run_until_committed(encoder, txns)
    assert log == ["init", "begin", "commit failed", "abort", "replace", "init", "rewind", "begin", "commit"]


async def test_retries_of_a_commit_are_bounded_then_it_aborts(encoder: TextEncoder) -> None:
    txns = FakeTransactions(commit_errors=[FakeKafkaException(COORDINATOR_MOVED)] * COMMIT_ATTEMPTS)
    log = await _run_until_committed(encoder, txns)
    assert log == ["init", "begin", *["commit failed"] * COMMIT_ATTEMPTS, "abort", "rewind", "begin", "commit"]


# Transactional calls under a 0.1 s timeout: one still running at 0.125 s is wedged.
QUICK = Settings(redis_prefix="t:", transaction_timeout_s=0.1)


async def test_a_commit_that_never_returns_gets_a_new_producer_and_the_batch_polled_again(
    encoder: TextEncoder,
) -> None:
    """librdkafka's send_offsets_to_transaction hung past its timeout after a broker restart: the
    worker stops waiting at the deadline, replaces the producer (whose init fences the old one)
    and polls the batch again, while the hung call is still running."""
    txns = FakeTransactions(hang_commits=1)
    try:
        log = await _run_until_committed(encoder, txns, QUICK)
        assert log == ["init", "begin", "commit hangs", "replace", "init", "rewind", "begin", "commit"]
        assert not txns.released.is_set()  # not waited for
    finally:
        txns.released.set()


async def test_a_stop_is_not_held_up_by_a_call_that_never_returns(encoder: TextEncoder) -> None:
    txns = FakeTransactions(hang_commits=1)
    w = make_worker(encoder, msgs(event("a")), transactions=txns, settings=QUICK)
    stop = asyncio.Event()

    async def stop_when_hung() -> None:
        while "commit hangs" not in txns.log:
            await asyncio.sleep(0.005)
        stop.set()

    try:
        # The bound only tells a drain that waits for ever from one that gives the call up at its deadline.
        await asyncio.wait_for(asyncio.gather(w.run(stop), stop_when_hung()), timeout=10)
        assert txns.committed == {} and txns.log[-2:] == ["replace", "init"]
    finally:
        txns.released.set()


async def test_a_late_answer_from_a_call_given_up_is_dropped() -> None:
    released = threading.Event()

    def late() -> str:
        released.wait()
        return "too late"

    with pytest.raises(Wedged, match=r"commit_transaction still running after 0\.05 s"):
        await within(late, 0.05, "commit_transaction")
    released.set()
    await asyncio.sleep(0.05)  # its answer reaches the loop and is dropped without an error
