"""The learning loop in the worker and offline: replay reproduces what served, the challenger
decides beside the champion without touching it, and a promoted model is picked up between batches."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from modstream.cli import app
from modstream.loop.comparison import compare, label_metrics
from modstream.loop.promotion import PromotionError, history_file, promote, rollback
from modstream.loop.redecide import redecide
from modstream.loop.topics import Range
from tests.unit.fakes import FakeSink, FakeSource, event, logged_verdict, tiny_decision_model, write_bundle
from tests.unit.workers.test_moderation import make_worker, msgs, verdicts
from workers.bundle.reload import BundleReloader
from workers.bundle.shadow import MAX_PENDING, Shadow
from workers.metrics import MODEL_RELOADS, SHADOW_DECISIONS, SHADOW_FAILURES
from workers.records import InMsg
from workers.stages.decide import DecisionModel
from workers.text.encoder import TextEncoder

POSTS = [event(f"p{i}", text) for i, text in enumerate(["hello", "buy cheap pills", "cheap cheap", "nice day"] * 5)]


async def served(encoder: TextEncoder, sink: FakeSink | None = None) -> dict[str, object]:
    batch = msgs(*POSTS)
    w = make_worker(encoder, batch, sink=sink or FakeSink())
    await w.handle(batch)
    return verdicts(w.sink)  # type: ignore[arg-type,return-value]


async def test_replay_with_the_serving_model_reproduces_every_decision_and_score(encoder: TextEncoder) -> None:
    recorded = await served(encoder)
    again = redecide(recorded.values(), tiny_decision_model())  # type: ignore[arg-type]
    assert len(again.pairs) == len(POSTS)
    assert all(r.decision == n.decision and r.score == n.score for r, n in again.pairs)
    c = compare({r.post_id: r.decision for r, _ in again.pairs}, {n.post_id: n.decision for _, n in again.pairs}, {})
    assert c.agreement == 1.0 and c.flipped == []


async def test_replay_with_another_model_reports_flips_and_label_metrics(encoder: TextEncoder) -> None:
    recorded = await served(encoder)
    strict = tiny_decision_model()
    strict.thresholds = type(strict.thresholds)(block=1.0, allow=0.0)  # everything to review
    again = redecide(recorded.values(), strict)  # type: ignore[arg-type]
    labels = {r.post_id: int("cheap" in r.reasons[0].detail or r.decision == "block") for r, _ in again.pairs}
    c = compare(
        {r.post_id: r.decision for r, _ in again.pairs}, {n.post_id: n.decision for _, n in again.pairs}, labels
    )
    assert c.matrix["block"]["review"] + c.matrix["allow"]["review"] == len(POSTS) == len(c.flipped)
    assert c.b_labels.review_share == 1.0 and c.a_labels.labelled == len(POSTS)
    assert all(n.model_versions["decision"] == "d1" for _, n in again.pairs)


async def test_the_challenger_publishes_apart_and_counts_decision_pairs(encoder: TextEncoder) -> None:
    batch = msgs(*POSTS)
    sink, shadow_sink = FakeSink(), FakeSink()
    w = make_worker(encoder, batch, sink=sink)
    w.shadow = Shadow(tiny_decision_model(seed=1, version="challenger"), shadow_sink, "verdicts.shadow", 5.0)
    before = SHADOW_DECISIONS.labels("block", "block")._value.get()
    await w.handle(batch)
    await w.shadow.drain()
    champion = verdicts(sink)
    shadow = {json.loads(r[2])["post_id"]: json.loads(r[2]) for r in shadow_sink.records}
    assert all(r[0] == "verdicts" for r in sink.records) and len(champion) == len(POSTS)
    assert shadow.keys() == champion.keys() and {r[1] for r in shadow_sink.records} == {k.encode() for k in shadow}
    assert {v["model_versions"]["decision"] for v in shadow.values()} == {"challenger"}
    assert {v.model_versions["decision"] for v in champion.values()} == {"d1"}
    assert SHADOW_DECISIONS.labels("block", "block")._value.get() > before


class Broken(DecisionModel):
    def __init__(self) -> None:
        self.version = "broken"

    def predict(self, rows):  # type: ignore[no-untyped-def]
        raise RuntimeError("challenger bug")


async def test_a_failing_challenger_is_counted_and_the_champion_unharmed(encoder: TextEncoder) -> None:
    batch = msgs(*POSTS)
    sink = FakeSink()
    w = make_worker(encoder, batch, sink=sink)
    w.shadow = Shadow(Broken(), FakeSink(fail_tokens=set(range(100))), "verdicts.shadow", 5.0)
    before = SHADOW_FAILURES.labels("decide")._value.get()
    await w.handle(batch)
    assert len(verdicts(sink)) == len(POSTS) and w.source.stored  # type: ignore[attr-defined]
    assert SHADOW_FAILURES.labels("decide")._value.get() - before == len(POSTS)


async def test_undelivered_challenger_verdicts_are_counted_not_retried(encoder: TextEncoder) -> None:
    batch = msgs(*POSTS)
    w = make_worker(encoder, batch)
    w.shadow = Shadow(tiny_decision_model(), FakeSink(fail_tokens=set(range(100))), "verdicts.shadow", 5.0)
    before = SHADOW_FAILURES.labels("publish")._value.get()
    await w.handle(batch)
    await w.shadow.drain()
    assert SHADOW_FAILURES.labels("publish")._value.get() - before == len(POSTS)
    assert w.source.stored  # type: ignore[attr-defined]


@pytest.fixture
def bundles(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The served link and two bundles: the first served, the second a retrained one."""
    a = write_bundle(tmp_path / "a", model=tiny_decision_model(version="va"))
    b = write_bundle(tmp_path / "b", model=tiny_decision_model(seed=1, version="vb"))
    link = tmp_path / "current"
    link.symlink_to(a)
    return link, a, b


class GatedSource(FakeSource):
    """Hands out ``later`` only once ``gate`` was set before the poll began: the worker has looked
    for a promoted model before polling the batch."""

    def __init__(self, first: list[list[InMsg]], later: list[list[InMsg]]) -> None:
        super().__init__(first)
        self.later, self.gate = later, threading.Event()

    def poll_batch(self, max_size: int, max_wait_s: float) -> list[InMsg]:
        if self.batches or not self.gate.is_set():
            time.sleep(0 if self.batches else max_wait_s)
            return super().poll_batch(max_size, max_wait_s)
        return self.later.pop(0) if self.later else []


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_promote_and_rollback_swap_the_link_and_keep_a_history(bundles: tuple[Path, Path, Path]) -> None:
    link, a, b = bundles
    switch = promote(link, b)
    assert (switch.decision, switch.text_changed) == ("vb", False) and link.resolve() == b.resolve()
    assert rollback(link).after == str(a.resolve()) and link.resolve() == a.resolve()
    with pytest.raises(PromotionError, match="nothing to roll back"):
        rollback(link)
    assert [json.loads(x)["action"] for x in history_file(link).read_text().splitlines()] == ["promote", "rollback"]


def test_a_bundle_that_cannot_serve_is_never_linked(bundles: tuple[Path, Path, Path], tmp_path: Path) -> None:
    link, a, b = bundles
    card = b / "decision" / "card.json"
    card.write_text(json.dumps(json.loads(card.read_text()) | {"features": ["x"], "feature_version": "x"}))
    result = CliRunner().invoke(app, ["models", "promote", str(b)], env={"MODSTREAM_MODEL_DIR": str(link)})
    assert result.exit_code == 2 and "feature contract" in " ".join(result.output.split())
    assert link.resolve() == a.resolve()


async def test_the_worker_switches_models_between_batches(
    encoder: TextEncoder, bundles: tuple[Path, Path, Path]
) -> None:
    link, _, b = bundles
    first, second = msgs(event("x1", "cheap"), event("x2", "cheap"))
    sink = FakeSink()
    w = make_worker(encoder, [first], sink=sink)
    w.source = GatedSource([[first]], [[second]])
    w.decision = DecisionModel.load(link / "decision")
    clock = Clock()
    w.reloader = BundleReloader(link, "t1", 1.0, clock)
    loaded = MODEL_RELOADS.labels("loaded")._value.get()
    stop = asyncio.Event()

    async def promote_after_first_batch() -> None:
        while not sink.records:
            await asyncio.sleep(0.01)
        promote(link, b)
        clock.now = 2.0
        w.source.gate.set()  # type: ignore[attr-defined]
        while len(sink.records) < 2:
            await asyncio.sleep(0.01)
        stop.set()

    await asyncio.gather(w.run(stop), promote_after_first_batch())
    out = verdicts(sink)
    assert (out["x1"].model_versions["decision"], out["x2"].model_versions["decision"]) == ("va", "vb")
    assert MODEL_RELOADS.labels("loaded")._value.get() == loaded + 1


def test_without_tritons_repository_another_text_model_is_refused(bundles: tuple[Path, Path, Path]) -> None:
    link, a, _ = bundles
    other = write_bundle(link.parent / "c", model=tiny_decision_model(version="vc"), text_version="t2")
    with pytest.raises(PromotionError, match="MODSTREAM_TRITON_REPO"):
        promote(link, other)
    assert link.resolve() == a.resolve()
    result = CliRunner().invoke(app, ["models", "promote", str(other)], env={"MODSTREAM_MODEL_DIR": str(link)})
    assert result.exit_code == 2 and "MODSTREAM_TRITON_REPO" in " ".join(result.output.split())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--from-time", "2026-11-23T10:00", "--to-time", "2026-11-23T09:00"], "the range is empty"),
        (["--from-time", "yesterday"], "not an ISO time"),
        (["--from-offsets", "0:1,x"], "PARTITION:OFFSET"),
        (["--from-offsets", "0:1", "--from-time", "2026-11-23T10:00"], "not both"),
    ],
)
def test_bad_ranges_are_one_line_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["dataset", "build", *args])
    assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output


def test_offsets_parse() -> None:
    assert Range.parse_offsets("0:120, 1:98") == {0: 120, 1: 98}


async def test_a_shadow_backlog_is_skipped_and_counted(encoder: TextEncoder) -> None:
    release = threading.Event()

    class Stuck(FakeSink):
        def flush(self, timeout_s: float) -> dict[int, object]:  # type: ignore[override]
            release.wait(10)  # a broker that does not answer until the batches are all handled
            return super().flush(timeout_s)

    shadow = Shadow(tiny_decision_model(), Stuck(), "verdicts.shadow", 5.0)
    batches = [msgs(event(f"b{i}", "cheap")) for i in range(MAX_PENDING + 3)]
    w = make_worker(encoder, batches[0])
    w.shadow = shadow
    skipped = SHADOW_FAILURES.labels("backlog")._value.get()
    for batch in batches:
        await w.handle(batch)
    assert SHADOW_FAILURES.labels("backlog")._value.get() - skipped == 3
    release.set()
    await shadow.drain()
    assert len(shadow.sink.records) == MAX_PENDING  # type: ignore[attr-defined]


def test_a_time_range_holds_its_start_not_its_end_and_labels_are_read_from_its_start_on() -> None:
    rng = Range(datetime(2026, 11, 23, 10, tzinfo=UTC), datetime(2026, 11, 23, 11, tzinfo=UTC))
    start_ms = int(rng.from_time.timestamp() * 1000)  # type: ignore[union-attr]
    assert rng.contains(start_ms) and not rng.contains(start_ms - 1) and not rng.contains(start_ms + 3_600_000)
    assert rng.after() == Range(rng.from_time) and rng.after().contains(start_ms + 10**9)


def test_label_metrics_are_nan_where_nothing_was_decided_so() -> None:
    m = label_metrics({"a": "review", "b": "allow", "c": "allow"}, {"a": 1, "b": 0, "c": 1, "gone": 1})
    assert (m.labelled, m.allow_npv, m.review_share) == (3, 0.5, 1 / 3)
    assert math.isnan(m.block_precision) and m.block_recall == 0.0


def test_replay_with_another_text_model_it_cannot_load_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logged = [logged_verdict(f"p{i}", i) for i in range(3)]
    records = [InMsg("verdicts", 0, i, None, v.model_dump_json().encode(), 0.0) for i, v in enumerate(logged)]
    monkeypatch.setattr("modstream.loop.replay.read_range", lambda *_: records)
    bundle = write_bundle(tmp_path / "b", model=tiny_decision_model(), text_version="t2")
    result = CliRunner().invoke(app, ["replay", "--bundle", str(bundle), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    # Its texts would be scored again (tests/unit/modstream/loop/test_rescore.py): not without its tokenizer.
    assert "cannot load the bundle's text model" in result.output
