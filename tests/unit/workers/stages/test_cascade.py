"""The cascade's first stage: what it decides without the transformer, what it leaves, its audits,
the worker scoring only the rest, and replay deciding its verdicts again."""

import asyncio

import lightgbm as lgb
import numpy as np
import pytest

from modstream.loop.redecide import redecide
from schemas import Reason, Verdict
from tests.unit.fakes import FakeSink, FakeSource, FakeStore, FakeTextModel, event, tiny_decision_model
from workers.config import Settings
from workers.metrics import CASCADE_AUDITS, CASCADE_POSTS, DECISION_RULES
from workers.model_cards import Thresholds
from workers.moderation import ModerationWorker
from workers.records import InMsg
from workers.stages.decide import (
    FIRST_STAGE,
    DecisionModel,
    Unavailable,
    audit,
    audited,
    decide,
    first_stage,
)
from workers.stages.score import ScoreCache, TextScorer
from workers.stages.short_circuit import BanListCache
from workers.stages.validate import validate
from workers.state.features import FEATURES, MONOTONE, Profile
from workers.state.keyspace import Keyspace
from workers.text.encoder import TextEncoder
from workers.text.trust import Trust

KS = Keyspace("t:")
# An account the platform has a profile of: the first stage may allow its posts. Of one it knows
# nothing of, only the text can tell, and the first stage reads no transformer (decide.unsure_allow).
KNOWN = Profile(user={"friends": "12"})
CHARS = FEATURES.index("text_chars")
SHORT, MIDDLE, LONG = "hi there", "a post of forty-odd characters, say about", "x" * 90


def length_model(seed: int = 0) -> DecisionModel:
    """A first stage that reads the text's length: under 35 characters ham, over 55 spam, a coin
    toss in between (not sure there)."""
    rng = np.random.default_rng(seed)
    x = rng.random((2000, len(FEATURES)))
    x[:, CHARS] = rng.uniform(0, 100, len(x))
    middle = (x[:, CHARS] > 35) & (x[:, CHARS] < 55)
    y = np.where(middle, rng.random(len(x)) < 0.5, x[:, CHARS] >= 55).astype(int)
    params = {"objective": "binary", "verbose": -1, "num_leaves": 4, "min_data_in_leaf": 5}
    booster = lgb.train(params | {"monotone_constraints": MONOTONE}, lgb.Dataset(x, y, feature_name=list(FEATURES)), 30)
    return DecisionModel(booster, Thresholds(block=0.8, allow=0.2), "first-1")


GAP = FEATURES.index("journey_min_gap_ms")
HUMAN = [{"name": "focus", "offset_ms": 0}, {"name": "type", "offset_ms": 4000}, {"name": "submit", "offset_ms": 9000}]


def journey_model() -> DecisionModel:
    """A first stage that reads the length and the client-reported pace: long texts are spam unless
    typed at a human pace (a gap of a second or more between steps), short ones ham."""
    rng = np.random.default_rng(1)
    x = rng.random((3000, len(FEATURES)))
    x[:, CHARS] = rng.uniform(0, 100, len(x))
    x[:, GAP] = rng.choice([50.0, 3000.0], len(x))
    y = ((x[:, CHARS] >= 55) & (x[:, GAP] < 1000)).astype(int)
    params = {"objective": "binary", "verbose": -1, "num_leaves": 4, "min_data_in_leaf": 5}
    booster = lgb.train(params | {"monotone_constraints": MONOTONE}, lgb.Dataset(x, y, feature_name=list(FEATURES)), 30)
    return DecisionModel(booster, Thresholds(block=0.8, allow=0.2), "first-journey")


def test_an_allow_that_rests_on_the_senders_reported_pace_is_left_to_the_transformer() -> None:
    """A scripted human pace must not buy skipping the transformer: the long post it allows goes on;
    its twin, a short post at the same pace, is allowed without it and decided here."""
    msgs = [InMsg("posts", 0, i, None, event(f"p{i}", t, journey=HUMAN), 0.0) for i, t in enumerate((LONG, SHORT))]
    posts, failures = validate(msgs, 10_000)
    assert not failures
    model = journey_model()
    first = first_stage(posts, [KNOWN] * 2, model, {}, Unavailable())
    assert first.later == [0]
    assert [o.verdict.post_id for o in first.outcomes] == ["p1"]
    assert first.outcomes[0].verdict.decision == "allow"


def cascade_model() -> DecisionModel:
    full = tiny_decision_model()
    return DecisionModel(full.booster, full.thresholds, full.version, first=length_model())


def posts_of(*texts: str):  # type: ignore[no-untyped-def]
    msgs = [InMsg("posts", 0, i, None, event(f"p{i}", t), 0.0) for i, t in enumerate(texts)]
    posts, failures = validate(msgs, 10_000)
    assert not failures
    return posts


def test_the_first_stage_decides_what_it_is_sure_of_and_leaves_the_rest() -> None:
    posts = posts_of(SHORT, MIDDLE, LONG)
    first = first_stage(posts, [KNOWN] * 3, length_model(), {"decision": "d1"}, Unavailable())
    assert first.later == [1]
    by_id = {o.verdict.post_id: o.verdict for o in first.outcomes}
    assert (by_id["p0"].decision, by_id["p2"].decision) == ("allow", "block")
    for v in by_id.values():  # it says so, and logs the row it saw: no transformer score
        assert set(v.stage_scores) == {FIRST_STAGE}
        assert v.features is not None and v.features.values[FEATURES.index("text_spam_prob")] is None
        assert not v.degraded


def test_a_post_of_an_account_nothing_is_known_of_is_allowed_only_after_the_transformer() -> None:
    """A first day's account: its short post, which the first stage would allow, is left for the
    transformer (only the text can tell, and the first stage does not read it), while its long one is
    blocked here; replay decides both alike. The twin, the same posts of a known account: both here."""
    posts = posts_of(SHORT, LONG)
    model = cascade_model()
    first = first_stage(posts, [Profile()] * 2, model.first, {"decision": model.version}, Unavailable())
    assert first.later == [0]
    assert [(o.verdict.post_id, o.verdict.decision) for o in first.outcomes] == [("p1", "block")]
    again = redecide([o.verdict for o in first.outcomes], model)
    assert [(a.decision, FIRST_STAGE in a.stage_scores) for _, a in again.pairs] == [("block", True)]
    known = first_stage(posts, [KNOWN] * 2, model.first, {}, Unavailable())
    assert known.later == [] and [o.verdict.decision for o in known.outcomes] == ["allow", "block"]


def test_without_a_first_stage_every_post_is_left_for_the_transformer() -> None:
    posts = posts_of(SHORT, LONG)
    first = first_stage(posts, [KNOWN] * 2, None, {}, Unavailable())
    assert (first.outcomes, first.later, first.audited) == ([], [0, 1], [])


def test_a_rule_that_would_move_a_first_stage_decision_leaves_the_post_to_the_full_model() -> None:
    """A user's reports lift the length model's block? Reports alone never block: not sure, so later."""
    posts = posts_of(LONG)
    profile = Profile(user={"reports": "40"})
    first = first_stage(posts, [profile], length_model(), {}, Unavailable())
    sure = first.outcomes[0].verdict.decision if first.outcomes else None
    assert sure in (None, "block")  # never a decision a rule moved


def test_audits_are_a_fixed_share_by_post_id() -> None:
    posts = posts_of(*[SHORT] * 400)
    none = first_stage(posts, [KNOWN] * 400, length_model(), {}, Unavailable(), audit_share=0.0)
    every = first_stage(posts, [KNOWN] * 400, length_model(), {}, Unavailable(), audit_share=1.0)
    some = first_stage(posts, [KNOWN] * 400, length_model(), {}, Unavailable(), audit_share=0.1)
    assert (none.audited, every.audited) == ([], list(range(400)))
    assert 20 <= len(some.audited) <= 60
    again = first_stage(posts, [KNOWN] * 400, length_model(), {}, Unavailable(), audit_share=0.1)
    assert again.audited == some.audited
    assert all(audited(posts[i], 0.1) for i in some.audited)


def test_an_audit_keeps_the_first_stage_verdict_beside_the_full_models_scores_and_counts_the_pair() -> None:
    posts = posts_of(SHORT)
    first = first_stage(posts, [KNOWN], length_model(), {}, Unavailable(), audit_share=1.0)
    full, _ = decide(posts, [KNOWN], [0.99], tiny_decision_model(), {}, Unavailable())
    before = CASCADE_AUDITS.labels("allow", full[0].verdict.decision)._value.get()
    (out,) = audit(first.outcomes, full)
    assert out.verdict.decision == "allow"
    assert set(out.verdict.stage_scores) == {FIRST_STAGE, "decision", "text"}
    assert CASCADE_AUDITS.labels("allow", full[0].verdict.decision)._value.get() == before + 1


def _worker(encoder: TextEncoder, texts: list[str], model: FakeTextModel, **settings: object) -> ModerationWorker:
    store = FakeStore({KS.user("u1"): dict(KNOWN.user)})
    batch = [InMsg("posts", 0, i, None, event(f"p{i}", t), 0.0) for i, t in enumerate(texts)]
    return ModerationWorker(
        Settings(**{"redis_prefix": "t:", "cascade_audit_share": 0.0, **settings}),  # type: ignore[arg-type]
        FakeSource([batch]),
        FakeSink(),
        store,
        TextScorer(encoder, model, sub_batch=8, max_in_flight=2, cache=ScoreCache(0)),
        cascade_model(),
        BanListCache(store, KS, refresh_s=60),
    )


def _verdicts(w: ModerationWorker) -> dict[str, Verdict]:
    sink = w.sink
    assert isinstance(sink, FakeSink)
    return {v.post_id: v for v in (Verdict.model_validate_json(r[2]) for r in sink.records if r[0] == "verdicts")}


async def test_the_worker_sends_only_the_posts_the_first_stage_is_not_sure_of_to_the_transformer(
    encoder: TextEncoder,
) -> None:
    model = FakeTextModel(encoder.tokenize(["cheap"])[0][1])
    w = _worker(encoder, [SHORT, MIDDLE, LONG, SHORT], model)
    first_before = CASCADE_POSTS.labels(FIRST_STAGE)._value.get()
    await w.handle(w.source.poll_batch(10, 0))
    out = _verdicts(w)
    assert len(out) == 4
    assert sum(shape[0] for shape in model.batches) == 1  # the middle one
    assert "text" in out["p1"].stage_scores and FIRST_STAGE not in out["p1"].stage_scores
    assert all(FIRST_STAGE in out[p].stage_scores for p in ("p0", "p2", "p3"))
    assert CASCADE_POSTS.labels(FIRST_STAGE)._value.get() == first_before + 3


class HeldTextModel(FakeTextModel):
    """Answers only once ``release`` is set: the transformer of a batch still in flight."""

    def __init__(self, cheap_id: int) -> None:
        super().__init__(cheap_id)
        self.asked, self.release = asyncio.Event(), asyncio.Event()

    async def logits(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        self.asked.set()
        await self.release.wait()
        return await super().logits(input_ids, attention_mask)


async def test_the_first_stages_verdicts_are_out_before_the_transformer_answers(encoder: TextEncoder) -> None:
    model = HeldTextModel(encoder.tokenize(["cheap"])[0][1])
    w = _worker(encoder, [SHORT, MIDDLE, LONG], model)
    handled = asyncio.create_task(w.handle(w.source.poll_batch(10, 0)))
    await asyncio.wait_for(model.asked.wait(), 5)  # the middle post's request is at Triton
    await asyncio.sleep(0.01)
    assert set(_verdicts(w)) == {"p0", "p2"} and not handled.done()
    model.release.set()
    await handled
    assert set(_verdicts(w)) == {"p0", "p1", "p2"}
    assert w.source.stored == {("posts", 0): 3}  # the offsets once every verdict is out


@pytest.mark.parametrize("settings", [{"cascade": False}, {"cascade_audit_share": 1.0}])
async def test_the_cascade_off_or_audited_scores_every_post(encoder: TextEncoder, settings: dict[str, object]) -> None:
    model = FakeTextModel(encoder.tokenize(["cheap"])[0][1])
    w = _worker(encoder, [SHORT, MIDDLE, LONG], model, **settings)
    await w.handle(w.source.poll_batch(10, 0))
    out = _verdicts(w)
    assert sum(shape[0] for shape in model.batches) == 3
    assert all("text" in v.stage_scores for v in out.values())
    # Audited, the first stage's verdicts stand: p2 blocked by its length whatever its text scored.
    assert (FIRST_STAGE in out["p2"].stage_scores) == bool(settings.get("cascade_audit_share"))


async def test_the_first_stage_decides_while_the_transformer_is_down(encoder: TextEncoder) -> None:
    model = FakeTextModel(encoder.tokenize(["cheap"])[0][1], fail=True)
    w = _worker(encoder, [SHORT, MIDDLE], model)
    await w.handle(w.source.poll_batch(10, 0))
    out = _verdicts(w)
    assert not out["p0"].degraded and out["p1"].degraded


def test_replay_decides_first_stage_verdicts_again_by_the_first_stage() -> None:
    model = cascade_model()
    posts = posts_of(SHORT, MIDDLE, LONG)
    first = first_stage(posts, [KNOWN] * 3, model.first, {"decision": model.version}, Unavailable())
    later = [posts[i] for i in first.later]
    full, _ = decide(later, [KNOWN] * len(later), [0.9] * len(later), model, {"decision": model.version}, Unavailable())
    recorded = [o.verdict for o in first.outcomes + full]
    again = redecide(recorded, model)
    assert [(a.decision, a.score) for _, a in again.pairs] == [(v.decision, v.score) for v in recorded]
    assert [FIRST_STAGE in a.stage_scores for _, a in again.pairs] == [True, True, False]


def test_a_rule_moving_an_audit_only_decision_is_not_counted_as_moving_a_verdict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    moved = ("review", [Reason.of("reports_only", "reports alone never block: review")])
    monkeypatch.setattr("workers.stages.decide.judge", lambda _, x, *__: [(moved[0], list(moved[1])) for _ in x])
    posts = posts_of(LONG, LONG)
    before = DECISION_RULES.labels("reports_only")._value.get()
    out, _ = decide(
        posts,
        [KNOWN] * 2,
        [0.99] * 2,
        tiny_decision_model(),
        {},
        Unavailable(),
        audit_only=frozenset({posts[1].msg}),
    )
    assert [o.verdict.decision for o in out] == ["review", "review"]
    assert DECISION_RULES.labels("reports_only")._value.get() == before + 1  # the published one only


async def test_a_language_whose_transformer_score_the_bundle_withholds_is_not_sent_to_triton(
    encoder: TextEncoder,
) -> None:
    """A Russian post goes to the full model without the transformer; the English one beside it,
    the benign twin, is scored and read as before."""
    model = FakeTextModel(encoder.tokenize(["cheap"])[0][1])
    ru = "Подработка для всех, пишите в личку, оплата каждый день, сорок символов"
    en = "a post of forty-odd characters, say about it"
    w = _worker(encoder, [ru, en], model)
    full = tiny_decision_model()
    w.decision = DecisionModel(full.booster, full.thresholds, full.version, trust=Trust(ngram_only=frozenset({"ru"})))
    await w.handle(w.source.poll_batch(10, 0))
    out = _verdicts(w)
    assert sum(shape[0] for shape in model.batches) == 1
    assert "text" not in out["p0"].stage_scores and "text" in out["p1"].stage_scores
    assert out["p0"].features is not None and out["p0"].features.values[FEATURES.index("text_spam_prob")] is None
    assert [r.code for r in out["p0"].reasons][-1] == "text_language" and not out["p0"].degraded
    assert all(r.code != "text_language" for r in out["p1"].reasons)
