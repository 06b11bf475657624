"""Labelled posts of platforms the default model never saw: the learning loop's "new platform"
(``python -m modstream.harness.trial``, tests/integration/test_retrain.py). :data:`PLATFORMS`
names them for the trial's ``--platform``.

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

``training/platforms/telegram_ru.csv``: 594 posts of Russian-language Telegram chats, 173 spam,
every sample of umputun/tg-spam's ``data/ham-samples.txt`` and ``data/spam-samples.txt`` (MIT,
``training/platforms/LICENSE.tg-spam``) over that repository's history to e14d516 (2026-08-20),
whitespace collapsed, kept where Cyrillic letters outnumber Latin ones; no text is in both files.
Those files are the samples the bot's maintainers labelled in their own chats. They carry no post
times, so the rows are in a fixed shuffle (seed 20231205): the trial's "next week" on this platform is a random
slice, not a later one. ``added_at`` is the commit that added a sample. The file sits outside
training/data because every file there is hashed into the default text model's cache key, and no
default model reads this one.
"""

from __future__ import annotations

import csv
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from schemas import JourneyStep, PostEvent

INSTAGRAM = Path(__file__).parents[1] / "data" / "platforms" / "instagram_comments.csv"
TELEGRAM_RU = Path(__file__).parents[1] / "platforms" / "telegram_ru.csv"


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


def telegram_ru(path: Path = TELEGRAM_RU) -> list[LabelledPost]:
    """The Russian chat posts in the file's (shuffled) order."""
    with path.open(encoding="utf-8", newline="") as f:
        return [
            LabelledPost(datetime.fromisoformat(row["added_at"]), row["text"], row["label"] == "1")
            for row in csv.DictReader(f)
        ]


PLATFORMS: dict[str, Callable[[], list[LabelledPost]]] = {"instagram": instagram_comments, "telegram-ru": telegram_ru}


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
