"""The logged verdicts of a range joined with their labels (``modstream dataset build``, as Parquet),
and for a retrain with their texts too, read back from the input topic."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from modstream.loop.config import Topics
from modstream.loop.join import Counts, Dataset, DatasetError, Labelled, Logged, build, read_verdicts, write_parquet
from modstream.loop.posts import posts_by_id, posts_range
from modstream.loop.topics import Range, RangeError, read_range
from schemas import Verdict
from workers.adapters.kafka import KafkaSink
from workers.kafka.delivery import DeadLetters, deliver_dead_letters
from workers.records import InMsg, Post

GROUP = "modstream-dataset"  # names this command in its dead letters


def feedback_dlq(settings: Topics) -> DeadLetters:
    """The feedback worker's DLQ topic: a bad record is dead-lettered where it always is."""
    return DeadLetters(f"{settings.feedback_topic}.dlq", GROUP, settings.dead_letter_max_bytes)


def join(
    settings: Topics, rng: Range, *, weak_labels: bool = False, dead_letter: bool = True
) -> tuple[Dataset, list[InMsg]]:
    """The range's labelled rows and its verdict records; bad feedback dead-lettered. Raises a
    one-line DatasetError or RangeError.

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
    return data, verdicts


def build_dataset(
    settings: Topics, rng: Range, out: Path, *, weak_labels: bool = False, dead_letter: bool = True
) -> Counts:
    """Read, join, write ``out`` (see :func:`join`)."""
    data, _ = join(settings, rng, weak_labels=weak_labels, dead_letter=dead_letter)
    write_parquet(data, out)
    return data.counts


@dataclass(frozen=True)
class Texts:
    """Moderator-labelled posts with their texts, in the order they were posted.

    By the posts' own ``created_at``, not by when the worker decided them: a backlog, a replay or
    several partitions decide posts out of order, and the retrain holds out the latest *posts*."""

    verdicts: list[Verdict]  # each post's first verdict, its logged row as the champion saw it
    labels: list[int]
    posts: dict[str, Post]  # by post id, as the worker's validate stage prepared them
    counts: Counts
    no_text: int  # labelled posts whose text the input topic no longer holds: left out

    @property
    def spam(self) -> int:
        return sum(self.labels)

    @property
    def times(self) -> list[datetime]:
        """Each row's post time."""
        return [self.posts[v.post_id].event.created_at for v in self.verdicts]


def with_texts(logged: dict[str, Logged], data: Dataset, posts: dict[str, Post]) -> Texts:
    """``data``'s labelled rows whose post is in ``posts``; the others counted."""
    rows = [
        (logged[pid].verdict, label) for pid, label in zip(data.columns["post_id"], data.columns["label"], strict=True)
    ]
    kept = sorted(
        ((v, label) for v, label in rows if v.post_id in posts),
        key=lambda row: (posts[row[0].post_id].event.created_at, row[0].decided_at, row[0].post_id),
    )
    return Texts(
        verdicts=[v for v, _ in kept],
        labels=[label for _, label in kept],
        posts={v.post_id: posts[v.post_id] for v, _ in kept},
        counts=data.counts,
        no_text=len(rows) - len(kept),
    )


def labelled_texts(settings: Topics, rng: Range, *, dead_letter: bool = True) -> Texts:
    """The range's moderator-labelled posts joined with their texts from the input topic."""
    data, records = join(settings, rng, dead_letter=dead_letter)
    logged = read_verdicts(records, Counts())
    labelled = [logged[pid].verdict for pid in data.columns["post_id"]]
    return with_texts(logged, data, posts_by_id(read_range(settings, settings.input_topic, posts_range(labelled))))


def matrix(verdicts: list[Verdict], labels: list[int], times: Sequence[datetime]) -> Labelled:
    """Logged rows (null as NaN) as a training set, in the given time order."""
    return Labelled(
        post_ids=[v.post_id for v in verdicts],
        times=np.array([t.timestamp() for t in times], dtype=np.float64),
        x=np.array([[np.nan if x is None else x for x in v.features.values] for v in verdicts if v.features]),
        y=np.array(labels, dtype=np.int_),
        text_versions={t for v in verdicts if (t := v.model_versions.get("text"))},
    )
