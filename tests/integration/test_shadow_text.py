"""A challenger with its own text model on the embedded stack: tritonserver serves it as
``spam_text_shadow`` beside ``spam_text``, and every post gets one verdict from each; replay with a
bundle of that text model rescores the texts through it."""

from __future__ import annotations

import json
import logging
import urllib.request
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from modstream.cli import app
from modstream.harness.traffic import Record, produce_all
from modstream.loop.replay import replay
from modstream.loop.rescore import NGRAM, TEXT
from modstream.loop.topics import Range, read_range
from modstream.stack.local import Endpoints, create_topics
from schemas import Verdict
from tests.integration.conftest import run_settings, run_worker
from tests.integration.test_loop import bundle, traffic
from workers.config import Settings
from workers.metrics import SHADOW_FAILURES

pytestmark = pytest.mark.integration


def inferences(stack: Endpoints, model: str) -> int:
    with urllib.request.urlopen(f"http://{stack.triton_http}/v2/models/{model}/stats", timeout=5) as resp:
        return int(json.load(resp)["model_stats"][0]["inference_count"])


@pytest.fixture
def champion(tmp_path: Path, tiny_model_dir: Path) -> Path:
    """The served bundle: the first tiny text model with decision model "champion"."""
    return bundle(tmp_path / "champion", tiny_model_dir, 0, "champion")


def started(stack: Endpoints, champion: Path, run: str, **overrides: Any) -> Settings:
    """This run's settings with its topics created (the shadow topic too, when the run names one)."""
    s = run_settings(stack, champion, run, **overrides)
    topics = {s.input_topic: 2, s.output_topic: 2, s.dlq_topic: 1}
    create_topics(s.kafka_bootstrap, topics | ({s.shadow_topic: 2} if "shadow_topic" in overrides else {}))
    return s


def test_a_challenger_with_its_own_text_model_is_shadowed(
    stack: Endpoints, champion: Path, tiny_challenger_text_dir: Path, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    challenger = bundle(tmp_path / "challenger", tiny_challenger_text_dir, 1, "challenger")
    s = started(stack, champion, run, shadow_model_dir=challenger, shadow_topic=f"verdicts-{run}.shadow")
    records = traffic(120, "t", 5)
    before = inferences(stack, s.shadow_triton_model)

    out = run_worker(s, records).outcomes  # the worker is stopped, and its shadow drained, on return

    posts = {r.key for r in records}
    assert set(out.verdicts) == posts and not out.dead_letters
    served = [Verdict.model_validate_json(m.value or b"") for m in read_range(s, s.output_topic, Range())]
    shadowed = [Verdict.model_validate_json(m.value or b"") for m in read_range(s, s.shadow_topic, Range())]
    # Exactly one verdict per post on each topic.
    assert Counter(v.post_id for v in served) == dict.fromkeys(posts, 1)
    assert Counter(v.post_id for v in shadowed) == dict.fromkeys(posts, 1)
    assert {(v.model_versions["text"], v.model_versions["decision"]) for v in served} == {("tiny0001", "champion")}
    assert {(v.model_versions["text"], v.model_versions["decision"]) for v in shadowed} == {("tiny0002", "challenger")}
    assert not any(v.degraded for v in [*served, *shadowed])
    # Scored by the second model: its own text scores, not the champion's.
    theirs = {v.post_id: v.stage_scores["text"] for v in shadowed}
    assert sum(abs(v.stage_scores["text"] - theirs[v.post_id]) > 1e-4 for v in served) > len(posts) // 2
    assert inferences(stack, s.shadow_triton_model) - before >= len(posts)  # every text is another


def test_a_challenger_text_model_triton_does_not_serve_never_stops_the_champion(
    stack: Endpoints,
    champion: Path,
    tiny_challenger_text_dir: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    run = uuid.uuid4().hex[:8]
    challenger = bundle(tmp_path / "challenger", tiny_challenger_text_dir, 1, "challenger")
    s = started(
        stack,
        champion,
        run,
        shadow_model_dir=challenger,
        shadow_topic=f"verdicts-{run}.shadow",
        shadow_triton_model="not_served",
    )
    records = traffic(30, "n", 6)
    skipped = SHADOW_FAILURES.labels("score")._value.get()

    with caplog.at_level(logging.WARNING, logger="workers.bundle.shadow"):
        out = run_worker(s, records).outcomes

    assert set(out.verdicts) == {r.key for r in records} and not any(v.degraded for v in out.verdicts.values())
    assert read_range(s, s.shadow_topic, Range()) == []
    assert SHADOW_FAILURES.labels("score")._value.get() - skipped == len(records)
    assert len([r for r in caplog.records if "unavailable" in r.getMessage()]) == 1


def test_replay_with_a_bundles_own_text_model_rescores_through_triton(
    stack: Endpoints, champion: Path, tiny_challenger_text_dir: Path, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    # The same decision model beside the second tiny text model (tiny0002, served as spam_text_shadow).
    other = bundle(tmp_path / "other", tiny_challenger_text_dir, 0, "champion")
    s = started(stack, champion, run)
    records = traffic(80, "r", 7)
    start = datetime.now(UTC)
    run_worker(s, records)
    served = {
        v.post_id: v
        for v in (Verdict.model_validate_json(m.value or b"") for m in read_range(s, s.output_topic, Range()))
    }
    # A verdict whose post event is not on the input topic: counted, never guessed.
    ghost = served[records[0].key].model_copy(update={"post_id": "ghost"})
    produce_all(s, [Record("ghost", ghost.model_dump_json().encode(), None)], topic=s.output_topic)
    rng = Range(start)

    before = inferences(stack, s.shadow_triton_model)
    same = replay(s, champion, rng, tmp_path / "same")
    assert same.reproduced == 1.0 and same.comparison.posts == len(records) + 1
    assert same.rescored.triton_model is None and inferences(stack, s.shadow_triton_model) == before

    env = {"MODSTREAM_KAFKA_BOOTSTRAP": s.kafka_bootstrap, "MODSTREAM_TRITON_URL": s.triton_url}
    env |= {"MODSTREAM_INPUT_TOPIC": s.input_topic, "MODSTREAM_OUTPUT_TOPIC": s.output_topic}
    args = ["replay", "--bundle", str(other), "--out", str(tmp_path / "other"), "--from-time", start.isoformat()]
    args += ["--triton-model", s.shadow_triton_model, "--output-topic", f"replayed-{run}"]
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert (
        f"{len(records)} texts rescored by the bundle's text model through Triton model {s.shadow_triton_model!r}"
        in said
    )
    report = json.loads((tmp_path / "other" / "replay.json").read_text())
    assert (report["rescored"], report["no_post_event"], report["triton_model"]) == (
        len(records),
        1,
        s.shadow_triton_model,
    )
    assert inferences(stack, s.shadow_triton_model) - before >= len(records)
    again = {
        v.post_id: v
        for v in (Verdict.model_validate_json(m.value or b"") for m in read_range(s, f"replayed-{run}", Range()))
    }
    assert again.keys() == {r.key for r in records} and report["published"] == len(records)
    assert {(v.model_versions["text"], v.model_versions["decision"]) for v in again.values()} == {
        ("tiny0002", "champion")
    }
    for pid, v in again.items():
        assert v.features is not None and (old := served[pid].features) is not None
        # Only the two text features are the new model's; the rest is what the worker saw.
        assert [x for i, x in enumerate(v.features.values) if i not in (TEXT, NGRAM)] == [
            x for i, x in enumerate(old.values) if i not in (TEXT, NGRAM)
        ]
        assert v.stage_scores["text"] == v.features.values[TEXT]
    moved = [pid for pid, v in again.items() if abs(v.stage_scores["text"] - served[pid].stage_scores["text"]) > 1e-4]
    assert len(moved) > len(records) // 2
