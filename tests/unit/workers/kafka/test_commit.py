from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from tests.unit.fakes import FakeKafkaError, FakeKafkaException
from workers.adapters.kafka import KafkaSource, KafkaTransactions
from workers.kafka.commit import Recovery, recovery, settle
from workers.records import InMsg


def _msgs(*spec: tuple[int, int]) -> list[InMsg]:
    return [InMsg("posts", p, o, None, b"", 0.0) for p, o in spec]


def test_all_delivered_stores_next_offset_per_partition() -> None:
    s = settle(_msgs((0, 10), (1, 5), (0, 11), (1, 6)), undelivered=set())
    assert s.store == {("posts", 0): 12, ("posts", 1): 7}
    assert s.complete


def test_failure_holds_back_its_partition_from_the_failed_offset() -> None:
    msgs = _msgs((0, 10), (0, 11), (0, 12), (1, 5))
    s = settle(msgs, undelivered={1})  # offset 11 failed
    assert s.store == {("posts", 0): 11, ("posts", 1): 6}
    assert [m.offset for m in s.failed] == [11]
    assert not s.complete


def test_failure_on_first_message_stores_nothing_for_that_partition() -> None:
    s = settle(_msgs((0, 10), (0, 11)), undelivered={0})
    assert s.store == {}


def test_out_of_order_batch_is_settled_in_offset_order() -> None:
    s = settle(_msgs((0, 12), (0, 10), (0, 11)), undelivered={0})  # offset 12 failed
    assert s.store == {("posts", 0): 12}


# What librdkafka raises after a broker restart, and how each is survived.
NO_OFFSET = FakeKafkaError("_NO_OFFSET")
LOST = FakeKafkaError("_ASSIGNMENT_LOST")
COORDINATOR_MOVED = FakeKafkaError("NOT_COORDINATOR", is_retriable=True)
UNKNOWN_MEMBER = FakeKafkaError("UNKNOWN_MEMBER_ID", requires_abort=True)
REBALANCING = FakeKafkaError("REBALANCE_IN_PROGRESS", is_retriable=True, requires_abort=True)
FENCED = FakeKafkaError("_FENCED", is_fatal=True)


@pytest.mark.parametrize("err", [LOST, COORDINATOR_MOVED, UNKNOWN_MEMBER, REBALANCING, FENCED])
def test_an_at_least_once_commit_that_fails_leaves_its_records_for_redelivery(err: FakeKafkaError) -> None:
    assert recovery(FakeKafkaException(err), transactional=False) is Recovery.REDELIVER


def test_nothing_stored_is_nothing_to_recover_from() -> None:
    for transactional in (False, True):
        assert recovery(FakeKafkaException(NO_OFFSET), transactional=transactional) is Recovery.NOTHING


@pytest.mark.parametrize(
    ("err", "expected"),
    [
        (COORDINATOR_MOVED, Recovery.RETRY),
        (UNKNOWN_MEMBER, Recovery.ABORT),
        (REBALANCING, Recovery.ABORT),  # retriable, but only after an abort
        (LOST, Recovery.ABORT),
        (FENCED, Recovery.REOPEN),
    ],
)
def test_a_transaction_commit_that_fails_is_retried_aborted_or_given_a_new_producer(
    err: FakeKafkaError, expected: Recovery
) -> None:
    assert recovery(FakeKafkaException(err), transactional=True) is expected


def test_an_error_from_elsewhere_aborts_the_transaction() -> None:
    assert recovery(RuntimeError("no delivery report"), transactional=True) is Recovery.ABORT


class LostConsumer:
    """A consumer whose group went on without it (the broker restarted): commits and seeks fail."""

    def __init__(self) -> None:
        self.closed = False

    def commit(self, asynchronous: bool) -> None:
        raise KafkaException(
            KafkaError(KafkaError._ASSIGNMENT_LOST, "Commit failed: Local: Group partition assignment lost")
        )

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition("posts", 0)]

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Broker transport failure"))

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def lost_source() -> Iterator[KafkaSource]:
    source = KafkaSource({"bootstrap.servers": "127.0.0.1:9", "group.id": "g"}, ["posts"])
    real, source._consumer = source._consumer, LostConsumer()  # type: ignore[assignment]
    try:
        yield source
    finally:
        real.close()
        source.consumer.close()


def test_a_commit_refused_in_a_rebalance_or_at_close_never_raises(lost_source: KafkaSource) -> None:
    lost = LostConsumer()
    lost_source._on_revoke(lost, [TopicPartition("posts", 0)])  # type: ignore[arg-type]
    lost_source._on_lost(lost, [TopicPartition("posts", 0)])  # type: ignore[arg-type]
    lost_source.close()
    assert lost_source.consumer.closed  # type: ignore[attr-defined]


def test_a_rewind_the_broker_cannot_answer_joins_the_group_again(lost_source: KafkaSource) -> None:
    KafkaTransactions(SimpleNamespace(), lost_source, 0.1).rewind()  # type: ignore[arg-type]  # no producer call
    assert not isinstance(lost_source.consumer, LostConsumer)  # a new consumer, from the committed offsets
