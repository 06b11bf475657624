"""A challenger with its own text model: scored by a second model in the same batches, published
after the champion's verdicts, and never able to hold them back or fail them."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from tests.unit.fakes import FakeSink, FakeTextModel, event, tiny_decision_model
from tests.unit.modstream.loop.test_loop import POSTS
from tests.unit.workers.test_moderation import make_worker, msgs, verdicts
from workers.bundle.local_text import LocalText
from workers.bundle.shadow import RETRY_S, Shadow, ShadowText
from workers.metrics import SHADOW_FAILURES
from workers.moderation import ModerationWorker
from workers.stages.score import ScoreCache, TextScorer
from workers.text.encoder import TextEncoder


class Contrary(FakeTextModel):
    """Another text model: spam where the served one sees ham."""

    async def logits(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        return -(await super().logits(input_ids, attention_mask))


class TooSlow(FakeTextModel):
    """Served, but every request runs past its deadline."""

    async def logits(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        self.batches.append(input_ids.shape)
        raise TimeoutError("triton deadline exceeded")


class Gated(Contrary):
    """Answers only once ``gate`` is set."""

    def __init__(self, cheap_id: int, version: str) -> None:
        super().__init__(cheap_id, version=version)
        self.gate = asyncio.Event()

    async def logits(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        await self.gate.wait()
        return await super().logits(input_ids, attention_mask)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def cheap_id(encoder: TextEncoder) -> int:
    return encoder.tokenize(["cheap"])[0][1]


def shadowed(
    encoder: TextEncoder, batch: list, model: FakeTextModel | None, clock: Clock | None = None
) -> tuple[ModerationWorker, FakeSink]:
    """A worker whose challenger has its own text model ``model`` (card version t2), or the served one (None)."""
    w = make_worker(encoder, batch)
    own = None
    if model is not None:
        scorer = TextScorer(encoder, model, sub_batch=2, max_in_flight=2, cache=ScoreCache(100))
        own = ShadowText(LocalText("t2", encoder, None), scorer, clock or Clock())
    shadow_sink = FakeSink()
    w.shadow = Shadow(tiny_decision_model(seed=1, version="challenger"), shadow_sink, "verdicts.shadow", 5.0, own)
    return w, shadow_sink


def shadow_verdicts(sink: FakeSink) -> dict[str, dict]:  # type: ignore[type-arg]
    return {json.loads(r[2])["post_id"]: json.loads(r[2]) for r in sink.records}


async def test_a_challenger_with_its_own_text_model_decides_on_its_own_scores(encoder: TextEncoder) -> None:
    batch = msgs(*POSTS)
    contrary = Contrary(cheap_id(encoder), version="t2")
    w, shadow_sink = shadowed(encoder, batch, contrary)
    await w.handle(batch)
    assert w.shadow is not None
    await w.shadow.drain()
    champion, shadow = verdicts(w.sink), shadow_verdicts(shadow_sink)  # type: ignore[arg-type]
    assert shadow.keys() == champion.keys() and len(champion) == len(POSTS)
    assert {v.model_versions["text"] for v in champion.values()} == {"fake-1"}
    assert {v["model_versions"]["text"] for v in shadow.values()} == {"t2"}
    assert {v["model_versions"]["decision"] for v in shadow.values()} == {"challenger"}
    # Its scores are the second model's: the contrary of the champion's, post by post.
    for pid, v in champion.items():
        assert shadow[pid]["stage_scores"]["text"] == pytest.approx(1 - v.stage_scores["text"], abs=1e-6)
        assert not shadow[pid]["degraded"]
    assert contrary.batches and w.scorer.model.batches  # type: ignore[attr-defined]


async def test_the_champion_never_waits_for_the_challengers_scores(encoder: TextEncoder) -> None:
    batch = msgs(*POSTS)
    gated = Gated(cheap_id(encoder), version="t2")
    w, shadow_sink = shadowed(encoder, batch, gated)
    await asyncio.wait_for(w.handle(batch), 5)  # the challenger's scores are still held back
    assert len(verdicts(w.sink)) == len(POSTS) and w.source.stored  # type: ignore[arg-type,attr-defined]
    assert shadow_sink.records == []
    gated.gate.set()
    assert w.shadow is not None
    await w.shadow.drain()
    assert len(shadow_verdicts(shadow_sink)) == len(POSTS)


@pytest.mark.parametrize(
    "model",
    [
        pytest.param(lambda: FakeTextModel(0, fail=True, version="t2"), id="not served"),
        pytest.param(lambda: TooSlow(0, version="t2"), id="too slow"),
        pytest.param(lambda: FakeTextModel(0, version="t3"), id="another version served"),
    ],
)
async def test_a_failing_challenger_text_model_is_counted_and_the_champion_unharmed(
    encoder: TextEncoder, model: object
) -> None:
    batch = msgs(*POSTS)
    w, shadow_sink = shadowed(encoder, batch, model())  # type: ignore[operator]
    before = SHADOW_FAILURES.labels("score")._value.get()
    await w.handle(batch)
    assert w.shadow is not None
    await w.shadow.drain()
    champion = verdicts(w.sink)  # type: ignore[arg-type]
    assert len(champion) == len(POSTS) and w.source.stored  # type: ignore[attr-defined]
    assert not any(v.degraded for v in champion.values())
    # Skipped, not decided degraded: no challenger verdict for the batch.
    assert shadow_sink.records == []
    assert SHADOW_FAILURES.labels("score")._value.get() - before == len(POSTS)


async def test_after_a_failure_the_challenger_asks_again_only_after_a_while(encoder: TextEncoder) -> None:
    first, second, third = (msgs(event(f"{b}1", "cheap"), event(f"{b}2", "hello")) for b in "xyz")
    slow, clock = TooSlow(0, version="t2"), Clock()
    w, shadow_sink = shadowed(encoder, first, slow, clock)
    assert w.shadow is not None
    before = SHADOW_FAILURES.labels("score")._value.get()
    await w.handle(first)
    await w.shadow.drain()
    asked = len(slow.batches)
    clock.now += RETRY_S / 2
    await w.handle(second)
    await w.shadow.drain()
    assert len(slow.batches) == asked  # skipped at once, without a request
    assert SHADOW_FAILURES.labels("score")._value.get() - before == 4
    clock.now += RETRY_S
    await w.handle(third)
    await w.shadow.drain()
    assert len(slow.batches) > asked
    assert len(verdicts(w.sink)) == 6 and shadow_sink.records == []  # type: ignore[arg-type]


async def test_a_challenger_with_the_served_text_model_reads_the_champions_scores(encoder: TextEncoder) -> None:
    batch = msgs(*POSTS)
    alone = make_worker(encoder, batch)
    await alone.handle(batch)
    w, shadow_sink = shadowed(encoder, batch, None)
    await w.handle(batch)
    assert w.shadow is not None
    await w.shadow.drain()
    # No second model: the champion's model is asked exactly as often as without a challenger.
    assert w.scorer.model.batches == alone.scorer.model.batches  # type: ignore[attr-defined]
    champion, shadow = verdicts(w.sink), shadow_verdicts(shadow_sink)  # type: ignore[arg-type]
    for pid, v in champion.items():
        assert shadow[pid]["stage_scores"]["text"] == v.stage_scores["text"]
        assert shadow[pid]["model_versions"]["text"] == "fake-1"


async def test_a_challenger_that_withholds_a_language_decides_it_without_the_transformer(encoder: TextEncoder) -> None:
    """The champion reads every score; the challenger's bundle withholds the transformer's in Russian:
    its verdict on the Russian post has no text score, its English one (the twin) keeps it."""
    from workers.stages.decide import DecisionModel
    from workers.text.trust import Trust

    batch = msgs(
        event("ru", "Подработка для всех, пишите в личку, оплата каждый день"),
        event("en", "Just finished reading the release notes, the new version looks great"),
    )
    w, shadow_sink = shadowed(encoder, batch, None)
    assert w.shadow is not None
    m = w.shadow.model
    w.shadow.model = DecisionModel(m.booster, m.thresholds, m.version, trust=Trust(ngram_only=frozenset({"ru"})))
    await w.handle(batch)
    await w.shadow.drain()
    champion, shadow = verdicts(w.sink), shadow_verdicts(shadow_sink)  # type: ignore[arg-type]
    assert "text" in champion["ru"].stage_scores and "text" not in shadow["ru"]["stage_scores"]
    assert "text" in shadow["en"]["stage_scores"]
    assert shadow["ru"]["reasons"][-1]["code"] == "text_language"
