"""The issue's four reference examples and the casual-post set through the whole pipeline on
the real stack, with the real default models: a brand-new user posting at a human pace."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime, timedelta

import pytest
import redis

from modstream.traffic import Record
from tests.integration.conftest import default_models_stack, run_worker
from training.text_model import EVAL_SETS
from workers.keyspace import Keyspace

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Open the composer, type for a while, pause, submit: what a person does.
HUMAN_JOURNEY = [
    {"name": "open_composer", "offset_ms": 0},
    {"name": "type", "offset_ms": 4_200},
    {"name": "type", "offset_ms": 11_800},
    {"name": "submit", "offset_ms": 16_500},
]


def evaluation_posts() -> list[tuple[str, str, str]]:
    """Every evaluation set of the text model (the reference examples and the casual posts):
    (post id, text, label)."""
    posts = []
    for path in EVAL_SETS.values():
        with path.open(encoding="utf-8") as f:
            posts += [(row["id"].replace(":", "-"), row["text"], row["label"]) for row in csv.DictReader(f)]
    return posts


def test_reference_examples_and_casual_posts_get_the_right_verdicts() -> None:
    """Spam is never allowed; no reference ham and no casual post is blocked."""
    now = datetime.now(UTC)
    posts = evaluation_posts()
    with default_models_stack("modstream-ref-") as (_, ep, settings):
        ks = Keyspace(settings.redis_prefix)
        r = redis.Redis.from_url(ep.redis_url)
        records = []
        for i, (pid, text, _) in enumerate(posts):
            user = f"new-{settings.group_id}-{i}"  # each its own account, created a day ago, no history
            r.hset(ks.user(user), mapping={"created_at": str(int((now - timedelta(days=1)).timestamp()))})
            event = {
                "post_id": pid,
                "user_id": user,
                "created_at": now.isoformat().replace("+00:00", "Z"),
                "text": text,
                "ip": f"198.51.100.{10 + i}",
                "platform": "web",
                "journey": HUMAN_JOURNEY,
            }
            records.append(Record(pid, json.dumps(event).encode(), None))
        verdicts = run_worker(settings, records, timeout_s=180).outcomes.verdicts
    wrong = [
        f"{label} got {verdicts[pid].decision}: {text!r} ({verdicts[pid].stage_scores})"
        for pid, text, label in posts
        if verdicts[pid].decision == ("allow" if label == "spam" else "block")
    ]
    assert not wrong, "\n".join(wrong)
