"""The whole learning loop on the embedded stack: traffic with a challenger in shadow, labels on the
feedback topic, dataset build, the decision model retrained on it, replay reproducing what served, and a promotion
the running worker picks up without losing or duplicating a verdict."""

from __future__ import annotations

import json
import random
import uuid
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from modstream.cli import app
from modstream.harness.demo import WorkerThread, simulated_labels
from modstream.harness.traffic import Collector, Record, produce_all
from modstream.loop.dataset import build_dataset
from modstream.loop.gate import Gate
from modstream.loop.promotion import promote
from modstream.loop.replay import ReplayError, replay
from modstream.loop.retrain_decision import retrain_decision
from modstream.loop.topics import Range, RangeError, read_range
from modstream.stack.local import Endpoints, create_topics
from schemas import Verdict
from tests.integration.conftest import run_settings
from tests.integration.polls import reloads, wait_until
from tests.unit.fakes import event, tiny_decision_model, write_bundle
from training.corpora.platforms import LabelledPost
from workers.metrics import SHADOW_DECISIONS

pytestmark = pytest.mark.integration


def bundle(path: Path, text_dir: Path, seed: int, version: str) -> Path:
    write_bundle(path, model=tiny_decision_model(seed=seed, version=version))
    (path / "text" / "card.json").unlink()
    (path / "text").rmdir()
    (path / "text").symlink_to(text_dir)
    return path


def traffic(n: int, prefix: str, seed: int, posts: Sequence[LabelledPost] = ()) -> list[Record]:
    """Spam posts a direct API call with a link, ham ones typed in the UI; 10% the other way round.
    With ``posts``, one record each, with its text and label (``n`` is then their number)."""
    rng = random.Random(seed)
    records = []
    for i in range(len(posts) or n):
        spam = posts[i].spam if posts else rng.random() < 0.4
        looks_spam = spam != (rng.random() < 0.1)
        kw: dict[str, object] = (
            {"urls": [f"https://promo{i % 7}.example.xyz/deal"]}
            if looks_spam
            else {"journey": [{"name": "open", "offset_ms": 0}, {"name": "type", "offset_ms": 4000 + i}]}
        )
        text = (
            posts[i].text if posts else f"{'great deal click now' if spam else 'lovely walk by the river'} number {i}"
        )
        body = json.loads(event(f"{prefix}{i}", text, user_id=f"u{i % 23}", ip=f"192.0.2.{i % 200 + 1}", **kw))
        body["created_at"] = datetime.now(UTC).isoformat()
        records.append(Record(f"{prefix}{i}", json.dumps(body).encode(), int(spam)))
    return records


def shadow_total() -> float:
    return sum(s.value for m in SHADOW_DECISIONS.collect() for s in m.samples if s.name.endswith("_total"))


def test_the_learning_loop(stack: Endpoints, tiny_model_dir: Path, tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    champion = bundle(tmp_path / "champion", tiny_model_dir, 0, "champion")
    challenger = bundle(tmp_path / "challenger", tiny_model_dir, 1, "challenger")
    current = tmp_path / "current"
    current.symlink_to(champion)
    s = run_settings(
        stack,
        current,
        run,
        model_reload_s=0.2,
        shadow_model_dir=challenger,
        feedback_topic=f"feedback-{run}",
        shadow_topic=f"verdicts-{run}.shadow",
    )
    create_topics(
        s.kafka_bootstrap,
        {s.input_topic: 2, s.output_topic: 2, s.dlq_topic: 1, s.feedback_topic: 1, s.shadow_topic: 2}
        | {f"{s.feedback_topic}.dlq": 1},
    )
    first, later = traffic(400, "p", 1), traffic(60, "q", 2)
    shadowed_before = shadow_total()
    start = datetime.now(UTC)
    collector = Collector(s, f"collector-{run}")
    worker = WorkerThread(s)
    try:
        # 1. Traffic, decided by the champion and, in shadow, by the challenger.
        produce_all(s, first)
        assert collector.wait_for([r.key for r in first], 120), "not every post got a verdict"
        labels = simulated_labels(first, 0.8, seed=3)
        unknown = simulated_labels(traffic(1, "ghost", 4), 1.0, seed=4)
        bad = [Record("bad", b"{not a label", None)]
        produce_all(s, [*labels, *unknown, *bad], topic=s.feedback_topic)
        end = datetime.now(UTC)
        rng = Range(start, end)

        # 2. Labels -> training set, through the command line.
        env = {f"MODSTREAM_{k.upper()}": str(v) for k, v in s.model_dump(mode="json").items() if v is not None}
        env = {k: v for k, v in env.items() if k.endswith(("_TOPIC", "_BOOTSTRAP"))}
        window = ["--from-time", start.isoformat(), "--to-time", end.isoformat()]
        result = CliRunner().invoke(app, ["dataset", "build", "--out", str(tmp_path / "set.parquet"), *window], env=env)
        assert result.exit_code == 0, result.output
        counts = json.loads(next(line for line in result.output.splitlines() if line.startswith("{")))
        assert (counts["posts"], counts["labelled"]) == (400, len(labels))
        assert (counts["unmatched_labels"], counts["bad_feedback"]) == (1, 1)
        (dead,) = read_range(s, f"{s.feedback_topic}.dlq", Range())
        assert dead.value == b"{not a label"

        # 3. Train on it; the serving model decides the same (latest) rows.
        decided = retrain_decision(tmp_path / "set.parquet", current, tmp_path / "retrained", Gate())
        assert sum(decided.rows.values()) == len(labels) and decided.challenger.n == decided.champion.n
        assert (tmp_path / "retrained" / "decision" / "model.txt").exists()

        # 4. Replay with the bundle that served reproduces every decision; another one is a diff.
        result = CliRunner().invoke(
            app, ["replay", "--bundle", str(champion), "--out", str(tmp_path / "replay-same"), *window], env=env
        )
        assert result.exit_code == 0, result.output
        same = json.loads((tmp_path / "replay-same" / "replay.json").read_text())
        assert (same["posts"], same["agreement"], same["flipped"], same["published"]) == (400, 1.0, [], 0)
        other = replay(s, tmp_path / "retrained", rng, tmp_path / "replay-new", output_topic=f"replayed-{run}")
        assert other.comparison.posts == 400 and other.published == 400
        assert other.comparison.b_labels.labelled == len(labels)

        # Bad inputs: a range with nothing in it, a bundle whose text model did not score the range
        # and which Triton does not serve (spam_text_shadow serves tiny0002).
        with pytest.raises(RangeError, match="no verdicts"):
            build_dataset(s, Range(end + timedelta(hours=1)), tmp_path / "empty.parquet")
        tokenizer = tiny_model_dir / "tokenizer.json"
        other_text = write_bundle(tmp_path / "other-text", tokenizer, tiny_decision_model(), text_version="t2")
        with pytest.raises(ReplayError, match=r"Triton serves no version \d+ of spam_text_shadow \(text model t2\)"):
            replay(s, other_text, rng, tmp_path / "replay-other")
        assert not (tmp_path / "empty.parquet").exists()

        # 5. The challenger decided every post, apart from the champion's verdicts.
        assert shadow_total() - shadowed_before >= 400
        result = CliRunner().invoke(app, ["shadow-report", "--out", str(tmp_path / "shadow"), *window], env=env)
        assert result.exit_code == 0, result.output
        shadow = json.loads((tmp_path / "shadow" / "shadow.json").read_text())
        assert shadow["posts"] == 400 and shadow["a_labels"]["labelled"] == len(labels)
        # The gate on the labelled shadowed posts (no retrain report: this challenger was not retrained).
        assert shadow["evidence"] == {"retrain": 0, "shadow": len(labels)}
        assert shadow["gate"]["outcome"] in {"better", "not_better", "too_few_labels"}
        assert (tmp_path / "shadow" / "shadow_flips.png").exists()
        queue = [json.loads(line) for line in (tmp_path / "shadow" / "label_queue.jsonl").read_text().splitlines()]
        assert {q["post_id"] for q in queue} == set(shadow["flipped"]) - {r.key for r in labels}  # unlabelled flips

        # 6. Promote the retrained bundle while the worker runs: later posts name it.
        before = reloads()
        new_version = promote(current, tmp_path / "retrained").decision
        assert wait_until(lambda: reloads() > before, 60), "the worker never switched to the promoted bundle"
        produce_all(s, later)
        assert collector.wait_for([r.key for r in later], 60)
    finally:
        worker.close()
        collector.close()
    verdicts = collector.outcomes.verdicts
    assert {verdicts[r.key].model_versions["decision"] for r in first} == {"champion"}
    assert {verdicts[r.key].model_versions["decision"] for r in later} == {new_version}
    # Nothing lost or duplicated across the switch: one verdict per post on the topic.
    published = Counter(
        Verdict.model_validate_json(m.value or b"").post_id for m in read_range(s, s.output_topic, Range())
    )
    assert set(published) == {r.key for r in [*first, *later]} and set(published.values()) == {1}
