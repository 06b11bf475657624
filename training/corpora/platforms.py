"""Labelled posts of a platform the default model never saw: the learning loop's "new platform"
(``python -m modstream.harness.trial``, tests/integration/test_retrain.py).

``training/data/platforms/instagram_comments.csv``: 3,444 Instagram comments under the posts of 37
finance and crypto accounts, 2020-06 to 2023-03, each labelled scam (1) or real (0) by the ScamSpot
project (github.com/ScamSpot/scamspot_ig-comment-scraper at 84f5ef0, ``data/comments-rated.csv``;
MIT, ``training/data/platforms/LICENSE.scamspot``). The texts are as published there: lower case,
commas replaced by spaces, reply mentions removed. ``posted_at`` is the time of the post commented on,
decoded from its media id in the same commit's ``data/comments_extracted.json`` (Instagram media ids
carry milliseconds since 2011-08-24 above bit 23); rows are in that order, ties by comment id.

The labels are that project's and noisy: its preparation labelled every comment with an emoji
"real". No default model trains on this file (training/corpora/posts.py does not read it), so the default
bundle meets it zero-shot, as it would a new platform's posts.
"""

from __future__ import annotations

import csv
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from schemas import JourneyStep, PostEvent

INSTAGRAM = Path(__file__).parents[1] / "data" / "platforms" / "instagram_comments.csv"


@dataclass(frozen=True, slots=True)
class LabelledPost:
    posted_at: datetime
    text: str
    spam: bool


def instagram_comments(path: Path = INSTAGRAM) -> list[LabelledPost]:
    """The comments in time order."""
    with path.open(encoding="utf-8", newline="") as f:
        return [
            LabelledPost(datetime.fromisoformat(row["posted_at"]), row["text"], row["label"] == "1")
            for row in csv.DictReader(f)
        ]


def weeks(posts: Sequence[LabelledPost], history: int, next_week: int) -> tuple[list[LabelledPost], list[LabelledPost]]:
    """The last ``next_week`` posts, and the ``history`` posts before them: labelled past, unseen future."""
    if history < 1 or next_week < 1 or history + next_week > len(posts):
        raise ValueError(f"{history} + {next_week} posts asked of {len(posts)}")
    cut = len(posts) - next_week
    return list(posts[cut - history : cut]), list(posts[cut:])


def new_account_event(
    post_id: str, user_id: str, text: str, created_at: datetime, rng: random.Random, platform: str = "instagram"
) -> PostEvent:
    """A post from an account the platform knows nothing of, typed in the UI at 4–8 characters a
    second after a look around: what a platform's first day looks like, where the text decides."""
    typed = int(len(text) * rng.uniform(125, 250))
    start = rng.randint(2_000, 20_000)
    return PostEvent(
        post_id=post_id,
        user_id=user_id,
        created_at=created_at,
        text=text,
        journey=[
            JourneyStep(name="open_post", offset_ms=0),
            JourneyStep(name="compose", offset_ms=start),
            JourneyStep(name="submit", offset_ms=min(start + typed, 86_400_000)),
        ],
        platform=platform,
    )
