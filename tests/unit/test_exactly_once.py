"""Exactly-once mode over fakes: one transaction per batch, in poll order; a failed commit rewinds."""

import asyncio

from tests.unit.fakes import FakeKafkaException, FakeSink, FakeTransactions, event
from tests.unit.test_commit import COORDINATOR_MOVED, FENCED, UNKNOWN_MEMBER
from tests.unit.test_worker import RecordingSource, make_worker, msgs, overtaking_worker, verdicts
from workers.commit import COMMIT_ATTEMPTS
from workers.textenc import TextEncoder


async def test_each_batch_commits_its_outputs_and_offsets_in_one_transaction(encoder: TextEncoder) -> None:
    batch = msgs(event("a"), b"{bad json", event("b"))
    txns = FakeTransactions()
    w = make_worker(encoder, batch, transactions=txns)
    await w.handle(batch)
    assert txns.log == ["begin", "commit"] and txns.committed == {("posts", 0): 3}
    assert w.source.stored == {}  # type: ignore[attr-defined]  # nothing for librdkafka to commit


async def test_a_batch_publishes_only_after_the_batch_before_committed(encoder: TextEncoder) -> None:
    """Batch two is decided first, but its transaction must not open inside batch one's."""
    txns = FakeTransactions()
    w, _, gate = overtaking_worker(encoder, FakeSink())
    w.transactions = txns
    stop = asyncio.Event()

    async def release_and_stop() -> None:
        await asyncio.sleep(0.2)
        assert "c" not in verdicts(w.sink)  # type: ignore[arg-type]  # held back behind batch one
        gate.set()
        while txns.log.count("commit") < 2:
            await asyncio.sleep(0.005)
        stop.set()

    await asyncio.gather(w.run(stop), release_and_stop())
    assert txns.log == ["begin", "commit", "begin", "commit"] and txns.committed == {("posts", 0): 3}
    assert set(verdicts(w.sink)) == {"a", "b", "c"}  # type: ignore[arg-type]


async def test_a_failed_commit_aborts_rewinds_and_the_worker_goes_on(encoder: TextEncoder) -> None:
    batch = msgs(event("a"), event("b"))
    source = RecordingSource([batch])
    txns = FakeTransactions(fail_commits=1, on_rewind=lambda: source.batches.append(batch))
    w = make_worker(encoder, [], transactions=txns)
    w.source = source
    stop = asyncio.Event()

    async def stop_when_committed() -> None:
        while "commit" not in txns.log:
            await asyncio.sleep(0.005)
        stop.set()

    await asyncio.gather(w.run(stop), stop_when_committed())
    assert txns.log == ["begin", "abort", "rewind", "begin", "commit"] and txns.committed == {("posts", 0): 2}


async def test_the_batches_polled_after_an_aborted_one_are_dropped(encoder: TextEncoder) -> None:
    txns = FakeTransactions(fail_commits=1)
    w, _, gate = overtaking_worker(encoder, FakeSink())
    w.transactions = txns
    stop = asyncio.Event()

    async def stop_when_rewound() -> None:
        gate.set()
        while "rewind" not in txns.log:
            await asyncio.sleep(0.005)
        stop.set()

    await asyncio.gather(w.run(stop), stop_when_rewound())
    assert txns.log == ["begin", "abort", "rewind"] and txns.committed == {}
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
    assert txns.log == ["begin", "abort", "begin", "commit"] and txns.committed == {("posts", 0): 2}


async def _run_until_committed(encoder: TextEncoder, txns: FakeTransactions) -> list[str]:
    """One batch through a worker whose transactions are ``txns``, polled again on a rewind."""
    batch = msgs(event("a"), event("b"))
    source = RecordingSource([batch])
    txns.on_rewind = lambda: source.batches.append(batch)
    w = make_worker(encoder, [], transactions=txns)
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
    assert await _run_until_committed(encoder, txns) == ["begin", "commit failed", "commit"]


async def test_an_abortable_commit_error_aborts_rewinds_and_the_worker_goes_on(encoder: TextEncoder) -> None:
    txns = FakeTransactions(commit_errors=[FakeKafkaException(UNKNOWN_MEMBER)])
    log = await _run_until_committed(encoder, txns)
    assert log == ["begin", "commit failed", "abort", "rewind", "begin", "commit"]


async def test_a_fenced_producer_is_replaced_and_the_batch_polled_again(encoder: TextEncoder) -> None:
    txns = FakeTransactions(commit_errors=[FakeKafkaException(FENCED)])
    log = await _run_until_committed(encoder, txns)
    assert log == ["begin", "commit failed", "reopen", "rewind", "begin", "commit"]


async def test_a_producer_that_cannot_abort_is_replaced(encoder: TextEncoder) -> None:
    txns = FakeTransactions(commit_errors=[FakeKafkaException(UNKNOWN_MEMBER)], abort_error=FakeKafkaException(FENCED))
    log = await _run_until_committed(encoder, txns)
    assert log == ["begin", "commit failed", "abort", "reopen", "rewind", "begin", "commit"]


async def test_retries_of_a_commit_are_bounded_then_it_aborts(encoder: TextEncoder) -> None:
    txns = FakeTransactions(commit_errors=[FakeKafkaException(COORDINATOR_MOVED)] * COMMIT_ATTEMPTS)
    log = await _run_until_committed(encoder, txns)
    assert log == ["begin", *["commit failed"] * COMMIT_ATTEMPTS, "abort", "rewind", "begin", "commit"]
