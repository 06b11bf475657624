"""The learning loop's training set: logged verdicts joined with the labels that came back.

Each verdict carries the exact feature row the decision model decided from
(:class:`schemas.FeatureRow`), so training on it trains on what served, never on features
recomputed later. Moderator labels are the ground truth, the latest one per post winning;
user reports are weak labels, kept in their own columns and used only when asked.
Posts without a label are left out. Pure logic over consumed records; reading Kafka and
writing files is the caller's (``modstream dataset build``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import ValidationError

from schemas import FeedbackEvent, Verdict
from workers.feedback.handler import parse as parse_feedback
from workers.records import Failure, InMsg
from workers.state.features import FEATURE_VERSION, FEATURES

# Columns besides one per feature (named as in workers.state.features.FEATURES).
ID_COLUMNS = ("post_id", "decided_at", "contract")
SERVED_COLUMNS = ("text_score", "served_decision", "served_score", "decision_version", "text_version")
LABEL_COLUMNS = ("label", "label_source", "labelled_at", "weak_label", "reports_spam", "reports_ham")


class DatasetError(ValueError):
    """A training set that cannot be used; the message is one line."""


@dataclass(frozen=True, slots=True)
class Logged:
    """A verdict as read back from the verdicts topic."""

    verdict: Verdict
    offset: tuple[int, int]  # (partition, offset): a redelivery's second verdict comes later


@dataclass(frozen=True, slots=True)
class PostLabels:
    """What came back about one post."""

    label: int | None = None  # the latest moderator label: 1 spam, 0 ham
    labelled_at: datetime | None = None
    reports_spam: int = 0
    reports_ham: int = 0

    @property
    def weak_label(self) -> int | None:
        """The user reports' majority; None without reports or on a tie."""
        if self.reports_spam == self.reports_ham:
            return None
        return int(self.reports_spam > self.reports_ham)


@dataclass
class Counts:
    verdicts: int = 0  # verdict records read
    bad_verdicts: int = 0  # records that are not a Verdict
    no_feature_row: int = 0  # posts decided without the model (bans): nothing to learn from
    other_contract: int = 0  # posts logged under another feature contract
    posts: int = 0  # distinct posts with a feature row of this contract
    labelled: int = 0  # posts in the set
    spam: int = 0
    weak_only: int = 0  # labelled by user reports alone (with weak labels on)
    feedback: int = 0  # valid feedback events read
    bad_feedback: int = 0  # dead-lettered
    unmatched_labels: int = 0  # moderator labels for posts not in the range

    @property
    def spam_share(self) -> float:
        return self.spam / self.labelled if self.labelled else math.nan

    def as_dict(self) -> dict[str, float]:
        return {**self.__dict__, "spam_share": round(self.spam_share, 4)}


@dataclass
class Dataset:
    columns: dict[str, list[Any]]
    counts: Counts
    bad_feedback: list[Failure] = field(default_factory=list)  # for the feedback DLQ


def read_verdicts(msgs: Iterable[InMsg], counts: Counts) -> dict[str, Logged]:
    """The first verdict per post (the one that served), by post id."""
    first: dict[str, Logged] = {}
    for msg in msgs:
        counts.verdicts += 1
        try:
            verdict = Verdict.model_validate_json(msg.value or b"")
        except ValidationError:
            counts.bad_verdicts += 1
            continue
        logged = Logged(verdict, (msg.partition, msg.offset))
        first.setdefault(verdict.post_id, logged)
    return first


def collect_labels(events: Iterable[FeedbackEvent]) -> dict[str, PostLabels]:
    """Per post: the latest moderator label (by its ``created_at``) and the user reports' tallies."""
    moderator: dict[str, FeedbackEvent] = {}
    reports: Counter[tuple[str, str]] = Counter()
    for e in events:
        if e.kind == "moderator_label":
            if e.post_id not in moderator or e.created_at >= moderator[e.post_id].created_at:
                moderator[e.post_id] = e
        else:
            reports[e.post_id, e.label] += 1
    posts = set(moderator) | {pid for pid, _ in reports}
    return {
        pid: PostLabels(
            label=None if (m := moderator.get(pid)) is None else int(m.label == "spam"),
            labelled_at=None if m is None else m.created_at,
            reports_spam=reports[pid, "spam"],
            reports_ham=reports[pid, "ham"],
        )
        for pid in posts
    }


def build(verdict_msgs: Iterable[InMsg], feedback_msgs: Sequence[InMsg], *, weak_labels: bool = False) -> Dataset:
    """Join the logged verdicts with their labels; ``weak_labels`` labels a post that no moderator
    labelled by its user reports' majority."""
    counts = Counts()
    logged = read_verdicts(verdict_msgs, counts)
    events, bad = parse_feedback(feedback_msgs)
    counts.feedback, counts.bad_feedback = len(events), len(bad)
    labels = collect_labels(events.values())
    counts.unmatched_labels = sum(e.kind == "moderator_label" and e.post_id not in logged for e in events.values())
    columns: dict[str, list[Any]] = {name: [] for name in (*ID_COLUMNS, *FEATURES, *SERVED_COLUMNS, *LABEL_COLUMNS)}
    for pid, log in sorted(logged.items(), key=lambda kv: (kv[1].verdict.decided_at, kv[0])):
        v = log.verdict
        if v.features is None:
            counts.no_feature_row += 1
            continue
        if v.features.contract != FEATURE_VERSION or len(v.features.values) != len(FEATURES):
            counts.other_contract += 1
            continue
        counts.posts += 1
        got = labels.get(pid, PostLabels())
        label, source = got.label, "moderator"
        if label is None and weak_labels:
            label, source = got.weak_label, "user_report"
        if label is None:
            continue
        counts.labelled += 1
        counts.spam += label
        counts.weak_only += source == "user_report"
        row: dict[str, Any] = {
            "post_id": pid,
            "decided_at": v.decided_at.astimezone(UTC),
            "contract": v.features.contract,
            **dict(zip(FEATURES, v.features.values, strict=True)),
            "text_score": v.stage_scores.get("text"),
            "served_decision": v.decision,
            "served_score": v.score,
            "decision_version": v.model_versions.get("decision"),
            "text_version": v.model_versions.get("text"),
            "label": label,
            "label_source": source,
            "labelled_at": got.labelled_at,
            "weak_label": got.weak_label,
            "reports_spam": got.reports_spam,
            "reports_ham": got.reports_ham,
        }
        for name, value in row.items():
            columns[name].append(value)
    return Dataset(columns, counts, bad)


def write_parquet(data: Dataset, path: Path) -> None:
    schema = pa.schema(
        [
            ("post_id", pa.string()),
            ("decided_at", pa.timestamp("us", tz="UTC")),
            ("contract", pa.string()),
            *((name, pa.float64()) for name in FEATURES),
            ("text_score", pa.float64()),
            ("served_decision", pa.string()),
            ("served_score", pa.float64()),
            ("decision_version", pa.string()),
            ("text_version", pa.string()),
            ("label", pa.int8()),
            ("label_source", pa.string()),
            ("labelled_at", pa.timestamp("us", tz="UTC")),
            ("weak_label", pa.int8()),
            ("reports_spam", pa.int32()),
            ("reports_ham", pa.int32()),
        ]
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(data.columns, schema=schema), path)


@dataclass(frozen=True)
class Labelled:
    """A training set read back: rows in time order."""

    post_ids: list[str]
    times: npt.NDArray[np.float64]  # epoch seconds, ascending: decided_at here, the posts' created_at in a retrain
    x: npt.NDArray[np.float64]  # FEATURES order, missing as NaN
    y: npt.NDArray[np.int_]
    text_versions: set[str]


def read_parquet(path: Path) -> Labelled:
    """The set at ``path``; raises a one-line :class:`DatasetError` for a file that cannot train."""
    try:
        table = pq.read_table(path)
    except FileNotFoundError:
        raise DatasetError(f"{path}: no such file") from None
    except (pa.ArrowException, OSError) as exc:
        raise DatasetError(f"{path}: not a readable Parquet file ({str(exc).splitlines()[0]})") from None
    needed = ("post_id", "decided_at", "contract", *FEATURES, "label")
    if missing := [c for c in needed if c not in table.column_names]:
        raise DatasetError(f"{path}: missing columns {missing[:5]}{' …' if len(missing) > 5 else ''}")
    if table.num_rows == 0:
        raise DatasetError(f"{path}: no labelled rows")
    if others := set(table.column("contract").to_pylist()) - {FEATURE_VERSION}:
        raise DatasetError(
            f"{path}: rows logged under feature contract {sorted(others)}, not this code's {FEATURE_VERSION!r}"
        )
    labels = table.column("label").to_numpy(zero_copy_only=False)
    if np.isnan(labels.astype(np.float64)).any():
        raise DatasetError(f"{path}: some rows have no label")
    at = np.array([t.timestamp() for t in table.column("decided_at").to_pylist()], dtype=np.float64)
    order = np.argsort(at, kind="stable")
    x = np.column_stack([table.column(name).to_numpy(zero_copy_only=False).astype(np.float64) for name in FEATURES])
    versions = table.column("text_version").to_pylist() if "text_version" in table.column_names else []
    return Labelled(
        post_ids=[table.column("post_id")[int(i)].as_py() for i in order],
        times=at[order],
        x=x[order],
        y=labels.astype(np.int_)[order],
        text_versions={v for v in versions if v},
    )
