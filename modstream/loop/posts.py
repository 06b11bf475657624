"""The post events of logged verdicts, read back from the input topic and prepared by the worker's own
validate stage: the text the worker scored, for a retrain and a replay."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from modstream.loop.topics import Range
from schemas import Verdict
from schemas.events import TEXT_JUDGED_CHARS
from workers.records import InMsg, Post
from workers.stages.validate import validate

# A post event is written before its verdict, by as much as the worker lagged then; its record
# time (the producer's clock) may also run a little ahead of decided_at (the worker's).
LOOKBACK = timedelta(hours=1)
SKEW = timedelta(minutes=1)


def posts_range(verdicts: Sequence[Verdict], lookback: timedelta = LOOKBACK) -> Range:
    """Where on the input topic the post events of ``verdicts`` are."""
    times = [v.decided_at for v in verdicts]
    return Range(min(times) - lookback, max(times) + SKEW)


def posts_by_id(msgs: Sequence[InMsg], max_text_chars: int = TEXT_JUDGED_CHARS) -> dict[str, Post]:
    """The first readable event of each post, prepared by the worker's validate stage."""
    posts, _ = validate(msgs, max_text_chars)  # an unreadable record is no post: its verdict counts as without one
    out: dict[str, Post] = {}
    for p in posts:
        out.setdefault(p.event.post_id, p)
    return out
