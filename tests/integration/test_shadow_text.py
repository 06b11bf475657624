"""A challenger with its own text model on the embedded stack: tritonserver serves it as
``spam_text_shadow`` beside ``spam_text``, and every post gets one verdict from each."""

from __future__ import annotations

import json
import logging
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

import pytest

from modstream.stack import Endpoints, create_topics
from modstream.topics import Range, read_range
from schemas import Verdict
from tests.integration.conftest import run_settings, run_worker
from tests.integration.test_loop import bundle, traffic
from workers.metrics import SHADOW_FAILURES

pytestmark = pytest.mark.integration


def inferences(stack: Endpoints, model: str) -> int:
    with urllib.request.urlopen(f"http://{stack.triton_http}/v2/models/{model}/stats", timeout=5) as resp:
        return int(json.load(resp)["model_stats"][0]["inference_count"])


def test_a_challenger_with_its_own_text_model_is_shadowed(
    stack: Endpoints, tiny_model_dir: Path, tiny_challenger_text_dir: Path, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    champion = bundle(tmp_path / "champion", tiny_model_dir, 0, "champion")
    challenger = bundle(tmp_path / "challenger", tiny_challenger_text_dir, 1, "challenger")
    s = run_settings(stack, champion, run, shadow_model_dir=challenger, shadow_topic=f"verdicts-{run}.shadow")
    create_topics(s.kafka_bootstrap, {s.input_topic: 2, s.output_topic: 2, s.dlq_topic: 1, s.shadow_topic: 2})
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
    tiny_model_dir: Path,
    tiny_challenger_text_dir: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    run = uuid.uuid4().hex[:8]
    champion = bundle(tmp_path / "champion", tiny_model_dir, 0, "champion")
    challenger = bundle(tmp_path / "challenger", tiny_challenger_text_dir, 1, "challenger")
    s = run_settings(
        stack,
        champion,
        run,
        shadow_model_dir=challenger,
        shadow_topic=f"verdicts-{run}.shadow",
        shadow_triton_model="not_served",
    )
    create_topics(s.kafka_bootstrap, {s.input_topic: 2, s.output_topic: 2, s.dlq_topic: 1, s.shadow_topic: 2})
    records = traffic(30, "n", 6)
    skipped = SHADOW_FAILURES.labels("score")._value.get()

    with caplog.at_level(logging.WARNING, logger="workers.shadow"):
        out = run_worker(s, records).outcomes

    assert set(out.verdicts) == {r.key for r in records} and not any(v.degraded for v in out.verdicts.values())
    assert read_range(s, s.shadow_topic, Range()) == []
    assert SHADOW_FAILURES.labels("score")._value.get() - skipped == len(records)
    assert len([r for r in caplog.records if "unavailable" in r.getMessage()]) == 1
