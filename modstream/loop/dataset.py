"""``modstream dataset build``: the logged verdicts of a range joined with their labels, as Parquet."""

from __future__ import annotations

from pathlib import Path

from modstream.topics import Range, RangeError, read_range
from training.dataset import Counts, Dataset, DatasetError, build, write_parquet
from workers.adapters.kafka import KafkaSink
from workers.config import Settings
from workers.delivery import DeadLetters, deliver_dead_letters

GROUP = "modstream-dataset"  # names this command in its dead letters


def feedback_dlq(settings: Settings) -> DeadLetters:
    """The feedback worker's DLQ topic: a bad record is dead-lettered where it always is."""
    return DeadLetters(f"{settings.feedback_topic}.dlq", GROUP, settings.dead_letter_max_bytes)


def build_dataset(
    settings: Settings, rng: Range, out: Path, *, weak_labels: bool = False, dead_letter: bool = True
) -> Counts:
    """Read, join, dead-letter bad feedback, write ``out``; raises a one-line DatasetError or RangeError.

    ``dead_letter`` off leaves bad feedback to the feedback worker, which dead-letters it too:
    a platform running it would otherwise get a second dead letter per build."""
    verdicts = read_range(settings, settings.output_topic, rng)
    if not verdicts:
        raise RangeError(f"no verdicts on {settings.output_topic!r} in the range: nothing to build from")
    # Labels for the range's posts arrive after them: read feedback from its start to now.
    feedback = read_range(settings, settings.feedback_topic, rng.after())
    data: Dataset = build(verdicts, feedback, weak_labels=weak_labels)
    if data.bad_feedback and dead_letter:
        deliver_dead_letters(
            KafkaSink(settings.producer_conf()), data.bad_feedback, feedback_dlq(settings), settings.publish_timeout_s
        )
    if not data.counts.labelled:
        raise DatasetError(
            f"none of the {data.counts.posts} posts in the range has a label "
            f"({data.counts.unmatched_labels} labels name posts outside it)"
        )
    write_parquet(data, out)
    return data.counts
