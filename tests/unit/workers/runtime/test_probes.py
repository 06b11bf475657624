"""/livez is the event loop's heartbeat, /readyz the worker's readiness, both in-process on the
metrics port; the served models and the text-score distribution are metrics the alerts read."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client import REGISTRY, Histogram

from tests.unit.fakes import tiny_decision_model, write_bundle
from workers.bundle.info import show_models
from workers.metrics import TEXT_SCORE_BUCKETS, TEXT_SCORE_KEY, score_histogram
from workers.runtime.probes import Heartbeat, mark_ready, probe_app, serve


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_heartbeat_goes_stale_only_after_the_loop_missed_it_for_longer_than_the_limit() -> None:
    clock = Clock()
    heartbeat = Heartbeat(stale_after_s=30, clock=clock)
    clock.now += 30
    assert heartbeat.alive()
    clock.now += 0.1
    assert not heartbeat.alive() and heartbeat.age_s() == pytest.approx(30.1)
    heartbeat.beat()
    assert heartbeat.alive() and heartbeat.age_s() == 0


async def test_the_pulse_beats_while_the_loop_runs_and_not_while_it_is_blocked() -> None:
    clock = Clock()
    heartbeat = Heartbeat(stale_after_s=5, clock=clock)
    pulse = asyncio.create_task(heartbeat.pulse(every_s=0.001))
    await asyncio.sleep(0.01)
    clock.now += 60  # the loop is blocked for a minute: nothing beats
    assert not heartbeat.alive()
    await asyncio.sleep(0.01)  # it runs again
    assert heartbeat.alive()
    pulse.cancel()


def call(app: Any, path: str) -> tuple[str, bytes]:
    status: list[str] = []
    body = b"".join(app({"PATH_INFO": path, "REQUEST_METHOD": "GET"}, lambda s, _headers: status.append(s)))
    return status[0], body


@pytest.fixture
def not_ready() -> Iterator[None]:
    mark_ready(False)
    yield
    mark_ready(False)


@pytest.mark.usefixtures("not_ready")
def test_probes_answer_from_the_heartbeat_and_the_readiness_and_metrics_stay_where_they_were() -> None:
    clock = Clock()
    app = probe_app(Heartbeat(stale_after_s=30, clock=clock))
    assert call(app, "/livez")[0] == "200 OK"
    assert call(app, "/readyz") == ("503 Service Unavailable", b"not ready: starting or draining\n")
    mark_ready(True)
    assert call(app, "/readyz") == ("200 OK", b"ready\n")
    assert REGISTRY.get_sample_value("modstream_ready") == 1
    clock.now += 31
    assert call(app, "/livez") == ("503 Service Unavailable", b"event loop last beat 31.0s ago\n")
    status, body = call(app, "/metrics")
    assert status == "200 OK" and b"modstream_ready 1.0" in body


@pytest.mark.usefixtures("not_ready")
def test_the_probe_server_answers_over_http(unused_tcp_port: int) -> None:
    serve(unused_tcp_port, Heartbeat(stale_after_s=30))
    base = f"http://127.0.0.1:{unused_tcp_port}"
    assert urllib.request.urlopen(f"{base}/livez", timeout=5).status == 200
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(f"{base}/readyz", timeout=5)
    assert caught.value.code == 503
    assert b"modstream_ready 0.0" in urllib.request.urlopen(f"{base}/metrics", timeout=5).read()


def test_the_training_baseline_is_what_a_live_histogram_of_the_same_scores_exposes() -> None:
    scores = [*np.random.default_rng(0).random(500).tolist(), 0.0, 0.5, 1.0]
    live = Histogram("scores_check", "", buckets=TEXT_SCORE_BUCKETS, registry=None)
    for s in scores:
        live.observe(s)
    exposed = {s.labels["le"]: int(s.value) for m in live.collect() for s in m.samples if s.name.endswith("_bucket")}
    assert score_histogram(scores) == exposed


def test_model_info_and_the_validation_baseline_follow_the_served_bundle(tmp_path: Path) -> None:
    with_baseline = write_bundle(tmp_path / "a", model=tiny_decision_model(version="da"), text_version="ta")
    card_path = with_baseline / "decision" / "card.json"
    card = json.loads(card_path.read_text())
    counts = score_histogram([0.0005, 0.02, 0.97, 0.98])
    card_path.write_text(json.dumps(card | {"validation": {"n": 4, TEXT_SCORE_KEY: counts}}))
    without = write_bundle(tmp_path / "b", model=tiny_decision_model(version="db"), text_version="ta")

    show_models(with_baseline, "ta", "da", cascade=True)
    assert REGISTRY.get_sample_value("modstream_model_info", {"text": "ta", "decision": "da"}) == 1
    assert REGISTRY.get_sample_value("modstream_text_score_validation", {"version": "ta", "le": "0.001"}) == 0.25
    assert REGISTRY.get_sample_value("modstream_text_score_validation", {"version": "ta", "le": "0.95"}) == 0.5
    assert REGISTRY.get_sample_value("modstream_text_score_validation", {"version": "ta", "le": "+Inf"}) == 1

    show_models(without, "ta", "db", cascade=True)  # an old card: no baseline, and the old model's series are gone
    assert REGISTRY.get_sample_value("modstream_model_info", {"text": "ta", "decision": "da"}) is None
    assert REGISTRY.get_sample_value("modstream_model_info", {"text": "ta", "decision": "db"}) == 1
    assert REGISTRY.get_sample_value("modstream_text_score_validation", {"version": "ta", "le": "+Inf"}) is None


def test_with_the_cascade_the_drift_baseline_is_that_of_the_posts_the_first_stage_leaves(tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path / "a", model=tiny_decision_model(version="da"), text_version="ta")
    card_path = bundle / "decision" / "card.json"
    card = json.loads(card_path.read_text())
    card_path.write_text(json.dumps(card | {"validation": {TEXT_SCORE_KEY: score_histogram([0.0005, 0.98])}}))
    (bundle / "decision" / "first_stage").mkdir()
    left = card | {"validation": {TEXT_SCORE_KEY: score_histogram([0.3, 0.4, 0.6, 0.7])}}
    (bundle / "decision" / "first_stage" / "card.json").write_text(json.dumps(left))

    show_models(bundle, "ta", "da", cascade=True)  # the transformer scores only the posts the first stage leaves
    assert REGISTRY.get_sample_value("modstream_text_score_validation", {"version": "ta", "le": "0.001"}) == 0
    show_models(bundle, "ta", "da", cascade=False)  # every post
    assert REGISTRY.get_sample_value("modstream_text_score_validation", {"version": "ta", "le": "0.001"}) == 0.5
