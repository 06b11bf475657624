"""A bundle with another text model promoted under load: Triton loads its version, the running worker
switches between batches, nothing is lost or restarted, and the old version is unloaded."""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

import pytest

from modstream.harness.demo import WorkerThread
from modstream.harness.traffic import Collector, Record, produce_all
from modstream.loop.promotion import TextServing, promote, rollback, shadow
from modstream.loop.topics import Range, read_range
from modstream.serving.triton_repo import RepoOptions, build_repo, ensure_model, versions
from modstream.stack.local import Endpoints, create_topics
from schemas import Verdict
from tests.integration.conftest import run_settings
from tests.integration.polls import reloads, wait_until
from tests.unit.fakes import event, tiny_decision_model
from workers.adapters.triton import TritonControl, triton_version
from workers.config import Settings
from workers.state.features import FEATURE_VERSION, FEATURES

pytestmark = pytest.mark.integration


def decision_bundle(path: Path, text_dir: Path, version: str, seed: int) -> Path:
    (path / "decision").mkdir(parents=True)
    (path / "text").symlink_to(text_dir)
    tiny_decision_model(seed=seed, version=version).booster.save_model(str(path / "decision" / "model.txt"))
    card = {"features": list(FEATURES), "feature_version": FEATURE_VERSION, "version": version}
    (path / "decision" / "card.json").write_text(json.dumps(card | {"thresholds": {"block": 0.8, "allow": 0.2}}))
    return path


def test_a_promoted_text_model_is_served_hot_and_rolled_back(
    stack: Endpoints,
    stack_dir: Path,
    triton_repo: Path,
    tiny_model_dir: Path,
    tiny_challenger_text_dir: Path,
    tmp_path: Path,
) -> None:
    run = uuid.uuid4().hex[:8]
    name = f"hot_{run}"  # a Triton model of this test's own: the session's spam_text stays as it is
    build_repo("cpu-embedded", tiny_model_dir, triton_repo, RepoOptions(instances=1), name=name)
    control = TritonControl(stack.triton_grpc, 60)
    control.load(name)
    a = decision_bundle(tmp_path / "a", tiny_model_dir, "dec-a", 0)
    b = decision_bundle(tmp_path / "b", tiny_challenger_text_dir, "dec-b", 1)
    link = tmp_path / "current"
    link.symlink_to(a)
    settings = run_settings(
        stack, link, run, triton_model=name, triton_repo=triton_repo, model_reload_s=0.2, batch_max_size=8
    )
    create_topics(settings.kafka_bootstrap, {settings.input_topic: 2, settings.output_topic: 2, settings.dlq_topic: 1})
    serving = TextServing(triton_repo / name, control, idle_s=1.0, drain_min_s=1.0, drain_max_s=30.0)
    records = [Record(f"p{i}", event(f"p{i}", f"post {i}: buy cheap pills" if i % 3 else f"hello {i}"), None)
               for i in range(240)]  # fmt: skip
    collector = Collector(settings, f"collector-{run}")
    worker = WorkerThread(settings)
    stop_sending = threading.Event()

    def send() -> None:  # a steady stream across the promotion and the rollback
        for i in range(0, len(records), 8):
            produce_all(settings, records[i : i + 8])
            time.sleep(0.1)
        stop_sending.set()

    sender = threading.Thread(target=send)
    try:
        sender.start()
        assert collector.wait_for([r.key for r in records[:40]], 60)
        promoted = promote(link, b, serving)
        assert collector.wait_for([r.key for r in records[:160]], 60)
        rolled_back = rollback(link, serving)
        sender.join(60)
        assert collector.wait_for([r.key for r in records], 60), "a post got no verdict"
    finally:
        stop_sending.wait(60)
        worker.close()  # raises what ended the worker early, if anything did
        collector.close()
    out = collector.outcomes
    assert not out.dead_letters and set(out.verdicts) == {r.key for r in records}  # 0 lost
    pairs = [(v.model_versions["text"], v.model_versions["decision"]) for v in out.verdicts.values()]
    # Every batch is scored and decided by one bundle's models, never a mix, and never degraded.
    assert set(pairs) == {("tiny0001", "dec-a"), ("tiny0002", "dec-b")}
    assert not any(v.degraded for v in out.verdicts.values())
    assert (promoted.text_changed, promoted.retired) == (True, ["tiny0001"])
    assert rolled_back.retired == ["tiny0002"]
    assert versions(triton_repo / name) == {triton_version("tiny0001"): "tiny0001"}
    assert not control.ready(name, triton_version("tiny0002"))
    # One Python stub started per text model added (the first, the promoted one, the one rolled back to):
    # a load request leaves the versions already loaded as they are, and a retirement starts none.
    log = (stack_dir / "triton.log").read_text()
    assert log.count(f"TRITONBACKEND_ModelInstanceInitialize: {name}_0_") == 3
    control.close()


def test_a_challenger_is_shadowed_hot_with_its_own_text_model(
    stack: Endpoints, triton_repo: Path, tiny_model_dir: Path, tiny_challenger_text_dir: Path, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    name = f"hot_{run}"
    build_repo("cpu-embedded", tiny_model_dir, triton_repo, RepoOptions(instances=1), name=name)
    control = TritonControl(stack.triton_grpc, 60)
    control.load(name)
    served = tmp_path / "current"
    served.symlink_to(decision_bundle(tmp_path / "a", tiny_model_dir, "dec-a", 0))
    challenger = tmp_path / "challenger"  # first the served text model with another decision model
    challenger.symlink_to(decision_bundle(tmp_path / "s1", tiny_model_dir, "shadow-1", 2))
    settings = run_settings(
        stack,
        served,
        run,
        triton_model=name,
        triton_repo=triton_repo,
        shadow_model_dir=challenger,
        shadow_topic=f"verdicts-{run}.shadow",
        shadow_triton_model=f"{name}_shadow",
        model_reload_s=0.2,
        batch_max_size=8,
    )
    topics = {settings.input_topic: 2, settings.output_topic: 2, settings.dlq_topic: 1, settings.shadow_topic: 2}
    create_topics(settings.kafka_bootstrap, topics)
    shadow_root = ensure_model(triton_repo, settings.shadow_triton_model, like=name)
    serving = TextServing(shadow_root, control, idle_s=1.0, drain_min_s=1.0, drain_max_s=30.0)
    first = [Record(f"a{i}", event(f"a{i}", f"hello {i}"), None) for i in range(40)]
    then = [Record(f"b{i}", event(f"b{i}", f"buy cheap pills {i}"), None) for i in range(40)]
    collector = Collector(settings, f"collector-{run}")
    worker = WorkerThread(settings)
    try:
        produce_all(settings, first)
        assert collector.wait_for([r.key for r in first], 60)
        before = reloads()
        switch = shadow(challenger, decision_bundle(tmp_path / "s2", tiny_challenger_text_dir, "shadow-2", 3), serving)
        assert wait_until(lambda: reloads() > before, 60), "the worker never switched to the new challenger"
        produce_all(settings, then)
        assert collector.wait_for([r.key for r in then], 60)
    finally:
        worker.close()  # drains the challenger's publishes
        collector.close()
        control.close()
    assert switch.text_changed and switch.text == "tiny0002"
    champion = {v.post_id: v for v in read_verdicts(settings, settings.output_topic)}
    shadowed = {v.post_id: v for v in read_verdicts(settings, settings.shadow_topic)}
    assert set(champion) == {r.key for r in first + then}  # the champion lost nothing
    assert {(v.model_versions["text"], v.model_versions["decision"]) for v in champion.values()} == {
        ("tiny0001", "dec-a")
    }
    before = {(shadowed[r.key].model_versions["text"], shadowed[r.key].model_versions["decision"]) for r in first}
    after = {(shadowed[r.key].model_versions["text"], shadowed[r.key].model_versions["decision"]) for r in then}
    assert (before, after) == ({("tiny0001", "shadow-1")}, {("tiny0002", "shadow-2")})


def read_verdicts(settings: Settings, topic: str) -> list[Verdict]:
    return [Verdict.model_validate_json(m.value or b"") for m in read_range(settings, topic, Range())]
