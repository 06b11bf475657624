"""Replay with a bundle whose text model did not score the range: the texts are scored again as
the worker prepared them, only the two text features change, and Triton is asked only then."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from modstream.cli import app
from modstream.loop.posts import LOOKBACK, SKEW, posts_by_id, posts_range
from modstream.loop.replay import ReplayError, replay
from modstream.loop.rescore import NGRAM, TEXT, in_process, rescore, stale
from modstream.loop.topics import Range
from schemas import Verdict
from tests.unit.fakes import (
    FakeSink,
    FakeTextModel,
    FakeTextModels,
    event,
    logged_verdict,
    tiny_decision_model,
    write_bundle,
)
from tests.unit.modstream.loop.test_loop import POSTS
from tests.unit.workers.bundle.test_shadow_text import Contrary, cheap_id
from tests.unit.workers.test_moderation import make_worker, msgs, verdicts
from training.text_model.scoring import onnx_spam_scores
from workers.bundle.local_text import LocalText, WrongVersion
from workers.config import Settings
from workers.records import InMsg
from workers.stages.decide import FIRST_STAGE
from workers.text.encoder import TextEncoder
from workers.text.ngram import N_BUCKETS, NgramModel

# The text the worker scores is the post's with its link and media text: "cheap" only in the link text.
BATCH = msgs(*POSTS, event("linked", "hello there", link_text="cheap watches", media_text="a watch"))
SHADOW = Settings().shadow_triton_model


def ngram_model() -> NgramModel:
    rng = np.random.default_rng(0)
    return NgramModel(rng.random(N_BUCKETS, dtype=np.float32), rng.normal(size=N_BUCKETS).astype(np.float32), -0.3)


async def recorded(encoder: TextEncoder) -> dict[str, Verdict]:
    """The worker's verdicts of BATCH: its text model is ``fake-1``, with an n-gram model."""
    w = make_worker(encoder, BATCH)
    w.ngram = ngram_model()
    await w.handle(BATCH)
    return verdicts(w.sink)  # type: ignore[arg-type]


def values(v: Verdict) -> list[float | None]:
    assert v.features is not None
    return v.features.values


async def test_the_same_network_under_another_version_gives_back_the_workers_text_features(
    encoder: TextEncoder,
) -> None:
    logged = await recorded(encoder)
    models = FakeTextModels(FakeTextModel(cheap_id(encoder), version="t2"))
    local = LocalText("t2", encoder, ngram_model())
    out = await rescore(stale(logged.values(), "t2"), posts_by_id(BATCH), local, models, SHADOW, Settings())
    assert len(out.verdicts) == len(logged) and out.no_post_event == 0 and out.triton_model == SHADOW
    assert models.names == [SHADOW]  # one client for the whole range
    for v in out.verdicts:
        assert values(v) == values(logged[v.post_id]) and v.stage_scores == logged[v.post_id].stage_scores
    assert logged["linked"].stage_scores["text"] > 0.9  # the link text was scored, as by the worker


async def test_another_text_model_replaces_the_two_text_features_and_nothing_else(encoder: TextEncoder) -> None:
    logged = await recorded(encoder)
    posts = posts_by_id(BATCH)
    del posts["p0"], posts["p1"]  # their events fell out of the input topic's range
    model = Contrary(cheap_id(encoder), version="t2")
    out = await rescore(
        stale(logged.values(), "t2"), posts, LocalText("t2", encoder, None), FakeTextModels(model), SHADOW, Settings()
    )
    assert {v.post_id for v in out.verdicts} == logged.keys() - {"p0", "p1"} and out.no_post_event == 2
    for v in out.verdicts:
        old, new = values(logged[v.post_id]), values(v)
        assert new[TEXT] == pytest.approx(1 - old[TEXT], abs=1e-6) and v.stage_scores["text"] == new[TEXT]  # type: ignore[operator]
        assert old[NGRAM] is not None and new[NGRAM] is None  # this text model has no n-gram companion
        assert [x for i, x in enumerate(new) if i not in (TEXT, NGRAM)] == [
            x for i, x in enumerate(old) if i not in (TEXT, NGRAM)
        ]
        assert v.decision == logged[v.post_id].decision  # re-deciding is replay's, not this step's


async def test_without_a_post_event_no_client_is_created(encoder: TextEncoder) -> None:
    models = FakeTextModels(FakeTextModel(0, version="t2"))
    todo = [logged_verdict(f"p{i}", i) for i in range(3)]
    out = await rescore(todo, {}, LocalText("t2", encoder, None), models, SHADOW, Settings())
    assert (out.verdicts, out.no_post_event, out.triton_model, models.names) == ([], 3, None, [])


@pytest.mark.parametrize(
    ("model", "error"),
    [
        pytest.param(FakeTextModel(0, version="t3"), WrongVersion, id="another version served"),
        pytest.param(FakeTextModel(0, fail=True, version="t2"), ConnectionError, id="not served"),
    ],
)
async def test_a_text_model_not_served_at_the_bundles_version_raises(
    encoder: TextEncoder, model: FakeTextModel, error: type[Exception]
) -> None:
    logged = await recorded(encoder)
    with pytest.raises(error):
        await rescore(
            stale(logged.values(), "t2"),
            posts_by_id(BATCH),
            LocalText("t2", encoder, None),
            FakeTextModels(model),
            SHADOW,
            Settings(),
        )
    assert model.batches == []  # nothing scored by a model that is not the bundle's


def test_stale_verdicts_are_those_another_text_model_scored_with_a_row_to_redecide() -> None:
    logged = [
        logged_verdict("a", 1),
        logged_verdict("b", 2).model_copy(update={"model_versions": {"text": "t2"}}),
        logged_verdict("c", 3, features=False),
        logged_verdict("d", 4, contract="older"),
        logged_verdict("e", 9),
    ]
    todo = stale(logged, "t2")
    assert [v.post_id for v in todo] == ["a", "e"]
    assert posts_range(todo) == Range(logged[0].decided_at - LOOKBACK, logged[4].decided_at + SKEW)


def test_first_stage_verdicts_are_stale_for_another_decision_model_only() -> None:
    first = logged_verdict("f", 1).model_copy(
        update={"model_versions": {"text": "t2", "decision": "d1"}, "stage_scores": {FIRST_STAGE: 0.001}}
    )
    full = logged_verdict("g", 2).model_copy(update={"model_versions": {"text": "t2", "decision": "d1"}})
    # The bundle that decided them reproduces them as logged: its first stage never reads the transformer.
    assert stale([first, full], "t2", "d1") == []
    # Another decision model's first stage may not be sure of them: its full model needs the score.
    assert [v.post_id for v in stale([first, full], "t2", "d2")] == ["f"]


def fake_topics(monkeypatch: pytest.MonkeyPatch, logged: dict[str, Verdict], posts: list[InMsg]) -> FakeSink:
    """The verdicts and input topics as read_range answers them, and a sink for what replay publishes."""
    s, sink = Settings(), FakeSink()
    records = [
        InMsg(s.output_topic, 0, i, None, v.model_dump_json().encode(), 0.0) for i, v in enumerate(logged.values())
    ]
    by_topic = {s.output_topic: records, s.input_topic: posts}
    monkeypatch.setattr("modstream.loop.replay.read_range", lambda _, topic, *__: by_topic.get(topic, []))
    monkeypatch.setattr("modstream.loop.replay.KafkaSink", lambda _: sink)
    return sink


def bundle(path: Path, tokenizer_json: Path, text_version: str) -> Path:
    write_bundle(path, tokenizer_json, model=tiny_decision_model(), text_version=text_version)
    ngram_model().save(path / "text")
    return path


def test_replay_with_the_serving_text_model_creates_no_client(
    encoder: TextEncoder, tokenizer_json: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logged = asyncio.run(recorded(encoder))  # replay runs its own event loop
    fake_topics(monkeypatch, logged, BATCH)
    models = FakeTextModels(FakeTextModel(0, version="fake-1"))
    report = replay(
        Settings(), bundle(tmp_path / "b", tokenizer_json, "fake-1"), Range(), tmp_path / "out", models=models
    )
    assert models.names == [] and report.reproduced == 1.0 and report.comparison.posts == len(logged)
    body = json.loads((tmp_path / "out" / "replay.json").read_text())
    assert (body["rescored"], body["no_post_event"], body["triton_model"]) == (0, 0, None)


def test_a_triton_model_named_for_a_replay_with_nothing_to_rescore_is_refused(
    encoder: TextEncoder, tokenizer_json: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_topics(monkeypatch, asyncio.run(recorded(encoder)), BATCH)
    served = bundle(tmp_path / "b", tokenizer_json, "fake-1")
    with pytest.raises(ReplayError, match="--triton-model 'spam_text_x' would not be asked"):
        replay(Settings(), served, Range(), tmp_path / "out", triton_model="spam_text_x")
    assert not (tmp_path / "out").exists()


def test_replay_with_another_text_model_rescores_and_names_it(
    encoder: TextEncoder, tokenizer_json: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logged = asyncio.run(recorded(encoder))
    sink = fake_topics(monkeypatch, logged, BATCH[1:])  # p0's event is not in the input topic's range
    models = FakeTextModels(Contrary(cheap_id(encoder), version="t2"))
    b = bundle(tmp_path / "b", tokenizer_json, "t2")
    report = replay(Settings(), b, Range(), tmp_path / "out", "replayed", triton_model="challenger_text", models=models)
    assert models.names == ["challenger_text"]
    body = json.loads((tmp_path / "out" / "replay.json").read_text())
    assert (body["rescored"], body["no_post_event"], body["triton_model"]) == (len(logged) - 1, 1, "challenger_text")
    again = {v.post_id: v for v in (Verdict.model_validate_json(r[2]) for r in sink.records)}
    assert again.keys() == logged.keys() - {"p0"} and report.published == len(again)
    assert {v.model_versions["text"] for v in again.values()} == {"t2"}
    for pid, v in again.items():
        assert values(v)[TEXT] == pytest.approx(1 - values(logged[pid])[TEXT], abs=1e-6)  # type: ignore[operator]
    assert report.comparison.flipped  # the contrary text model turns spam into ham


def test_an_unreachable_triton_is_a_one_line_error(
    tokenizer_json: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logged = {f"p{i}": logged_verdict(f"p{i}", i) for i in range(3)}
    fake_topics(monkeypatch, logged, msgs(*(event(pid) for pid in logged)))
    b = bundle(tmp_path / "b", tokenizer_json, "t2")
    env = {"MODSTREAM_TRITON_URL": "127.0.0.1:1", "MODSTREAM_TRITON_TIMEOUT_S": "2"}
    args = ["replay", "--bundle", str(b), "--out", str(tmp_path / "out"), "--triton-model", "other"]
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert (
        "cannot rescore 3 verdicts with the bundle's text model 't2' as 'other' on Triton at 127.0.0.1:1"
        in " ".join(result.output.split())
    )


async def test_a_retrain_rescores_in_process_as_the_serving_onnx_path_scores(tiny_model_dir: Path) -> None:
    """No Triton: the text model's card's ONNX file through ONNX Runtime, the worker's encoder and scorer."""
    logged = {v.post_id: v for v in [logged_verdict(pid, i) for i, pid in enumerate(("p0", "p1", "linked"))]}
    posts = posts_by_id(BATCH)
    local = LocalText.load(tiny_model_dir)
    out = await rescore(list(logged.values()), posts, local, in_process(tiny_model_dir), "any", Settings())
    assert out.no_post_event == 0 and len(out.verdicts) == 3
    expected = onnx_spam_scores(tiny_model_dir, [posts[v.post_id].text for v in out.verdicts])
    assert [values(v)[TEXT] for v in out.verdicts] == pytest.approx(expected.tolist(), abs=1e-5)


async def test_rescoring_for_a_bundle_that_withholds_a_language_withholds_its_transformer_score(
    encoder: TextEncoder,
) -> None:
    """As the worker serves such a bundle: the Russian post's transformer score is missing, its n-gram
    score kept; the English post beside it, the twin, keeps both."""
    from workers.text.trust import Trust

    batch = msgs(
        event("ru", "Подработка для всех, пишите в личку, оплата каждый день"),
        event("en", "Just finished reading the release notes, the new version looks great"),
    )
    w = make_worker(encoder, batch)
    w.ngram = ngram_model()
    await w.handle(batch)
    logged: dict[str, Verdict] = verdicts(w.sink)  # type: ignore[arg-type]
    models = FakeTextModels(FakeTextModel(cheap_id(encoder), version="t2"))
    local = LocalText("t2", encoder, ngram_model())
    trust = Trust(ngram_only=frozenset({"ru"}))
    out = await rescore(stale(logged.values(), "t2"), posts_by_id(batch), local, models, SHADOW, Settings(), trust)
    got = {v.post_id: values(v) for v in out.verdicts}
    assert got["ru"][TEXT] is None and got["ru"][NGRAM] is not None
    assert got["en"][TEXT] is not None and got["en"][NGRAM] is not None
    assert "text" not in {v.post_id: v for v in out.verdicts}["ru"].stage_scores
