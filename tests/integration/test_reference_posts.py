"""The issue's four reference examples and the casual-post set through the whole pipeline on
the real stack, with the real default models: a brand-new user posting at a human pace."""

from __future__ import annotations

import csv
import json
import tempfile
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from rich.console import Console

from modstream.artifacts import ensure_models
from modstream.demo import worker_settings
from modstream.stack import LocalStack, create_topics
from modstream.traffic import Record
from modstream.triton_repo import build_repo
from tests.integration.conftest import run_worker
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
    models = ensure_models(Console(stderr=True))
    now = datetime.now(UTC)
    posts = evaluation_posts()
    with tempfile.TemporaryDirectory(prefix="modstream-ref-") as tmp:
        repo = build_repo("cpu-embedded", models.text, Path(tmp) / "triton_repo")
        with LocalStack(Path(tmp) / "stack", repo) as ep:
            run = uuid.uuid4().hex[:8]
            settings = worker_settings(ep, models.bundle, run)
            create_topics(
                ep.kafka_bootstrap, {settings.input_topic: 1, settings.output_topic: 1, settings.dlq_topic: 1}
            )
            ks = Keyspace(settings.redis_prefix)
            r = redis.Redis.from_url(ep.redis_url)
            records = []
            for i, (pid, text, _) in enumerate(posts):
                user = f"new-{run}-{i}"  # each its own account, created a day ago, no history
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
