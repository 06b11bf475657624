"""The training set's join: logged verdicts with the labels that came back, and its Parquet file."""

from __future__ import annotations

import json
import math
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from modstream.loop.join import DatasetError, build, read_parquet, write_parquet
from schemas import Verdict
from tests.unit.fakes import T0, logged_verdict
from workers.records import InMsg


def label(pid: str, spam: bool, minute: int, kind: str = "moderator_label", **kw: object) -> bytes:
    body = {
        "kind": kind,
        "post_id": pid,
        "user_id": "u1",
        "actor_id": "mod1",
        "label": "spam" if spam else "ham",
        "created_at": (T0 + timedelta(minutes=minute)).isoformat(),
        **kw,
    }
    return json.dumps(body).encode()


def msgs(topic: str, values: list[bytes]) -> list[InMsg]:
    return [InMsg(topic, 0, i, None, v, 0.0) for i, v in enumerate(values)]


def vmsgs(*vs: Verdict) -> list[InMsg]:
    return msgs("verdicts", [v.model_dump_json().encode() for v in vs])


def test_the_latest_moderator_label_wins_and_unlabelled_posts_are_left_out() -> None:
    feedback = msgs(
        "feedback",
        # Arrival order is not label order: the later label (minute 30) arrives first.
        [label("p1", False, 30), label("p1", True, 20), label("p2", True, 5), label("ghost", True, 5)],
    )
    data = build(vmsgs(logged_verdict("p1", 1), logged_verdict("p2", 2), logged_verdict("p3", 3)), feedback)
    assert data.columns["post_id"] == ["p1", "p2"]
    assert data.columns["label"] == [0, 1]
    c = data.counts
    assert (c.posts, c.labelled, c.spam, c.unmatched_labels) == (3, 2, 1, 1)
    assert c.spam_share == 0.5


def test_user_reports_are_weak_labels_used_only_when_asked() -> None:
    feedback = msgs(
        "feedback", [label("p1", True, 5, kind="user_report"), label("p1", True, 6, kind="user_report", actor_id="x")]
    )
    verdicts = vmsgs(logged_verdict("p1", 1), logged_verdict("p2", 2))
    assert build(verdicts, feedback).counts.labelled == 0
    data = build(verdicts, feedback, weak_labels=True)
    assert data.columns["label"] == [1] and data.columns["label_source"] == ["user_report"]
    assert data.columns["reports_spam"] == [2] and data.counts.weak_only == 1


def test_bad_feedback_is_returned_for_the_dlq_and_bans_and_other_contracts_are_counted() -> None:
    feedback = msgs("feedback", [b"{not json", label("p1", True, 5), label("p2", True, 5, surprise=1)])
    verdicts = vmsgs(
        logged_verdict("p1", 1), logged_verdict("ban", 2, features=False), logged_verdict("old", 3, contract="0ld")
    )
    data = build(verdicts, feedback)
    assert [f.msg.offset for f in data.bad_feedback] == [0, 2]
    c = data.counts
    assert (c.bad_feedback, c.no_feature_row, c.other_contract, c.posts, c.labelled) == (2, 1, 1, 1, 1)


def test_a_redelivered_post_keeps_the_verdict_that_served_first() -> None:
    first, again = logged_verdict("p1", 1), logged_verdict("p1", 9)
    data = build(vmsgs(first, again), msgs("feedback", [label("p1", True, 20)]))
    assert data.columns["decided_at"] == [first.decided_at]


def test_parquet_keeps_the_logged_row_exactly_and_in_time_order(tmp_path: Path) -> None:
    feedback = msgs("feedback", [label(p, i % 2 == 0, 60) for i, p in enumerate(("a", "b", "c"))])
    data = build(vmsgs(logged_verdict("c", 30), logged_verdict("a", 10), logged_verdict("b", 20)), feedback)
    write_parquet(data, tmp_path / "set.parquet")
    back = read_parquet(tmp_path / "set.parquet")
    assert back.post_ids == ["a", "b", "c"] and back.y.tolist() == [1, 0, 1]
    logged = logged_verdict("a", 10).features
    assert logged is not None
    expected = [math.nan if v is None else v for v in logged.values]
    np.testing.assert_array_equal(back.x[0], np.array(expected))
    assert back.text_versions == {"t1"}


@pytest.mark.parametrize(
    ("content", "message"), [(b"PAR1 not really", "not a readable Parquet file"), (None, "no such file")]
)
def test_unusable_files_are_one_line_errors(tmp_path: Path, content: bytes | None, message: str) -> None:
    path = tmp_path / "set.parquet"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(DatasetError, match=message) as err:
        read_parquet(path)
    assert "\n" not in str(err.value)


def test_an_empty_set_is_refused(tmp_path: Path) -> None:
    write_parquet(build([], []), tmp_path / "empty.parquet")
    with pytest.raises(DatasetError, match="no labelled rows"):
        read_parquet(tmp_path / "empty.parquet")
