from confluent_kafka import KafkaError, KafkaException, TopicPartition

from workers.adapters.kafka import KafkaSource
from workers.config import Settings
from workers.kafka.fetch_wait import FetchWait


def polls(fw: FetchWait, pattern: str, lag: int | None, start: float = 0.0, step: float = 0.25) -> list[float]:
    """``pattern``: one character per poll, ``r`` got records, ``.`` came back empty; returns the changes."""
    changes = []
    for i, c in enumerate(pattern):
        if (new := fw.observe(c == "r", start + i * step, lambda: lag)) is not None:
            changes.append(new)
    return changes


def test_empty_fetches_with_records_waiting_grow_the_wait_up_to_the_cap() -> None:
    fw = FetchWait(base_s=0.02, max_s=1.0, stall_s=1.0)
    assert polls(fw, "." * 30, lag=500) == [0.1, 0.5, 1.0]


def test_an_idle_consumer_keeps_the_configured_wait() -> None:
    fw = FetchWait(base_s=0.02, max_s=1.0, stall_s=1.0)
    assert polls(fw, "." * 30, lag=0) == [] and fw.current_s == 0.02


def test_records_flowing_reset_the_stall_clock() -> None:
    fw = FetchWait(base_s=0.02, max_s=1.0, stall_s=1.0)
    assert polls(fw, "...r...r...r...r", lag=500) == []


def test_once_caught_up_the_wait_goes_back_to_the_configured_one() -> None:
    fw = FetchWait(base_s=0.02, max_s=1.0, stall_s=1.0)
    assert polls(fw, "." * 10, lag=500) == [0.1, 0.5]
    assert polls(fw, "rrr" + "." * 10, lag=0, start=10.0) == [0.02]


def test_nothing_changes_while_the_lag_is_unknown() -> None:
    fw = FetchWait(base_s=0.02, max_s=1.0, stall_s=1.0)
    fw.current_s = 0.5  # backed off, then joining the group again: no partitions yet
    assert polls(fw, "." * 30, lag=None) == [] and fw.current_s == 0.5


def test_the_stall_clock_starts_afresh_at_every_rebalance() -> None:
    fw = FetchWait(base_s=0.02, max_s=1.0, stall_s=1.0)
    assert polls(fw, "." * 7, lag=None) == []  # joining: 1.5 s of empty polls, no partitions
    fw.rebalanced()
    # The first fetches after the assignment: a backlog, but not yet a stall.
    assert polls(fw, "...", lag=500, start=1.75) == []
    assert polls(fw, "..", lag=500, start=2.5) == [0.1]  # a whole stall_s after the assignment


class RestartingBroker:
    """A consumer whose broker went away mid-question: the lag check must not crash the worker."""

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition("posts", 0)]

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition("posts", 0, 5)]

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition("posts", 0, 7)]

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        raise KafkaException(KafkaError(KafkaError._DESTROY_BROKER, "Broker handle destroyed"))


def test_a_broker_that_cannot_say_leaves_the_lag_unknown() -> None:
    source = KafkaSource({"bootstrap.servers": "127.0.0.1:9", "group.id": "g"}, ["posts"])
    try:
        real, source._consumer = source._consumer, RestartingBroker()  # type: ignore[assignment]
        assert source._lag() is None
    finally:
        real.close()


def test_unless_set_a_stall_lasts_longer_than_a_join_round() -> None:
    """A rebalance holds fetches for about half a session on Tansu: a shorter stall is the group's."""
    assert Settings(session_timeout_s=6).fetch_stall == 6
    assert Settings(session_timeout_s=6, fetch_stall_s=0.5).fetch_stall == 0.5
