"""A retrain's dataset: labelled posts joined with their texts from the input topic; a post whose
text the topic no longer holds is counted and left out, never guessed."""

from __future__ import annotations

import math
from datetime import timedelta

from modstream.loop.dataset import matrix, with_texts
from modstream.loop.join import Counts, build, read_verdicts
from modstream.loop.posts import posts_by_id
from tests.unit.fakes import T0, event, logged_verdict
from tests.unit.modstream.loop.test_join import label, msgs, vmsgs


def test_labelled_posts_are_joined_with_their_texts_and_the_missing_ones_counted() -> None:
    verdicts = vmsgs(*(logged_verdict(f"p{i}", i) for i in range(5)))
    feedback = msgs(
        "feedback", [label("p0", True, 9), label("p1", False, 9), label("p3", True, 9), label("p4", False, 9)]
    )
    data = build(verdicts, feedback)
    # The input topic kept p0, p3 and p4 (p1's event is gone); p2 has a text but no label.
    posts = posts_by_id(msgs("posts", [event(p, text=f"text of {p}") for p in ("p0", "p2", "p3", "p4")]))
    texts = with_texts(read_verdicts(verdicts, Counts()), data, posts)
    assert [v.post_id for v in texts.verdicts] == ["p0", "p3", "p4"]  # posted at one time: in decision order
    assert texts.labels == [1, 1, 0] and texts.spam == 2 and texts.no_text == 1
    assert texts.posts["p3"].text == "text of p3" and texts.counts.labelled == 4


def test_labelled_posts_are_in_the_order_they_were_posted_not_decided() -> None:
    # A backlog over partitions: the worker decided p2, then p0, then p1; they were posted p0, p1, p2.
    verdicts = vmsgs(logged_verdict("p2", 1), logged_verdict("p0", 2), logged_verdict("p1", 3))
    data = build(verdicts, msgs("feedback", [label(p, p != "p1", 9) for p in ("p0", "p1", "p2")]))
    posted = {f"p{i}": (T0 + timedelta(seconds=i)).isoformat() for i in range(3)}
    posts = posts_by_id(msgs("posts", [event(p, created_at=at) for p, at in posted.items()]))
    texts = with_texts(read_verdicts(verdicts, Counts()), data, posts)
    assert [v.post_id for v in texts.verdicts] == ["p0", "p1", "p2"] and texts.labels == [1, 0, 1]
    assert [t.isoformat() for t in texts.times] == list(posted.values())


def test_logged_rows_become_a_training_set_with_null_as_nan() -> None:
    vs = [logged_verdict("a", 1), logged_verdict("b", 2)]
    m = matrix(vs, [0, 1], [T0, T0 + timedelta(seconds=1)])
    assert m.post_ids == ["a", "b"] and m.y.tolist() == [0, 1] and m.text_versions == {"t1"}
    assert math.isnan(m.x[0, 1]) and m.x[1, 0] == vs[1].features.values[0]  # type: ignore[union-attr]
    assert m.times.tolist() == [T0.timestamp(), T0.timestamp() + 1]
