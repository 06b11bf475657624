"""A bundle with another text model is served hot: Triton loads its version first, the link is swapped,
the worker switches between batches, and the old version is retired once no worker asks for it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from modstream.loop.promotion import PromotionError, TextServing, history_file, promote, rollback
from modstream.serving.triton_repo import build_repo, versions
from tests.conftest import minilm_tokenizer
from tests.unit.fakes import FakeSink, FakeTextModel, event, tiny_decision_model, write_bundle
from tests.unit.modstream.loop.test_loop import Clock, GatedSource
from tests.unit.workers.test_moderation import make_worker, msgs, verdicts
from workers.adapters.triton import triton_version
from workers.bundle.local_text import LocalText
from workers.bundle.reload import BundleReloader
from workers.metrics import MODEL_RELOADS
from workers.stages.decide import DecisionModel
from workers.stages.score import ScoreCache, TextScorer
from workers.text.encoder import TextEncoder


class FakeControl:
    """Triton's repository API over a repository directory: loads what the directory holds."""

    def __init__(self, model_root: Path, fail: bool = False) -> None:
        self.model_root, self.fail = model_root, fail
        self.loaded = set(versions(model_root))
        self.last: dict[int, float] = {}  # number -> epoch ms of its last request
        self.events: list[str] = []

    def load(self, model: str) -> None:
        if self.fail:
            raise RuntimeError("failed to load 'spam_text' version 7: onnx runtime error")
        self.loaded = set(versions(self.model_root))
        self.events.append(f"load {sorted(self.loaded)}")

    def ready(self, model: str, number: int) -> bool:
        return number in self.loaded

    def last_inference_ms(self, model: str, number: int) -> int:
        return int(self.last.get(number, 0))


def bundle(path: Path, text_version: str, decision: str) -> Path:
    b = write_bundle(path, model=tiny_decision_model(version=decision), text_version=text_version)
    (b / "text" / "model.onnx").write_bytes(b"onnx " + text_version.encode())
    return b


@pytest.fixture
def served(tmp_path: Path) -> tuple[Path, Path, Path, TextServing, FakeControl]:
    """The link serving bundle a (text t1), bundle b with text t2, Triton's repository serving t1."""
    a, b = bundle(tmp_path / "a", "t1", "va"), bundle(tmp_path / "b", "t2", "vb")
    link = tmp_path / "current"
    link.symlink_to(a)
    root = build_repo("cpu-onnx", a / "text", tmp_path / "repo") / "spam_text"
    control = FakeControl(root)
    serving = TextServing(root, control, idle_s=1.0, drain_min_s=0.0, drain_max_s=0.0, sleep=lambda _: None)
    return link, a, b, serving, control


def test_the_text_model_is_served_before_the_link_is_swapped(
    served: tuple[Path, Path, Path, TextServing, FakeControl],
) -> None:
    link, a, b, serving, control = served
    seen_at_load: list[Path] = []
    load = control.load
    control.load = lambda model: (seen_at_load.append(link.resolve()), load(model))[1]  # type: ignore[method-assign]

    switch = promote(link, b, serving)

    assert seen_at_load[0] == a.resolve()  # Triton loaded t2 while t1 was still the one linked
    assert link.resolve() == b.resolve() and switch.text_changed
    assert switch.retired == ["t1"] and switch.still_in_use == []  # no worker asked for t1 since
    assert versions(serving.model_root) == {triton_version("t2"): "t2"}
    assert control.loaded == {triton_version("t2")}


def test_a_version_still_asked_for_stays_loaded(served: tuple[Path, Path, Path, TextServing, FakeControl]) -> None:
    link, _, b, serving, control = served
    control.last[triton_version("t1")] = time.time() * 1000  # a worker that has not switched yet
    switch = promote(link, b, serving)
    assert switch.retired == [] and switch.still_in_use == ["t1"]
    assert set(versions(serving.model_root).values()) == {"t1", "t2"}


def test_rollback_loads_the_earlier_text_model_again(
    served: tuple[Path, Path, Path, TextServing, FakeControl],
) -> None:
    link, a, b, serving, control = served
    promote(link, b, serving)
    switch = rollback(link, serving)
    assert link.resolve() == a.resolve() and switch.text == "t1" and switch.retired == ["t2"]
    assert control.loaded == {triton_version("t1")}
    assert [line.count('"text_changed": true') for line in history_file(link).read_text().splitlines()] == [1, 1]


def test_a_text_model_triton_cannot_load_is_never_linked(
    served: tuple[Path, Path, Path, TextServing, FakeControl],
) -> None:
    link, a, b, serving, control = served
    control.fail = True
    with pytest.raises(PromotionError, match=r"did not load text model t2.*onnx runtime error"):
        promote(link, b, serving)
    assert link.resolve() == a.resolve()
    assert versions(serving.model_root) == {triton_version("t1"): "t1"}  # the repository as it was


def test_the_shadows_text_model_is_kept(served: tuple[Path, Path, Path, TextServing, FakeControl]) -> None:
    link, a, b, serving, _ = served
    from dataclasses import replace

    switch = promote(link, b, replace(serving, keep=[a]))
    assert switch.retired == [] and set(versions(serving.model_root).values()) == {"t1", "t2"}


async def test_the_worker_switches_text_models_between_batches(encoder: TextEncoder, tmp_path: Path) -> None:
    tokenizer = minilm_tokenizer()
    a = write_bundle(tmp_path / "a", tokenizer, tiny_decision_model(version="va"), text_version="t1")
    b = write_bundle(tmp_path / "b", tokenizer, tiny_decision_model(seed=1, version="vb"), text_version="t2")
    link = tmp_path / "current"
    link.symlink_to(a)
    first, second = msgs(event("x1", "cheap"), event("x2", "cheap"))
    sink = FakeSink()
    cheap = encoder.tokenize(["cheap"])[0][1]
    old_model = FakeTextModel(cheap, version="t1")
    w = make_worker(encoder, [first], sink=sink, model=old_model)
    w.source = GatedSource([[first]], [[second]])
    w.decision = DecisionModel.load(a / "decision")
    clock = Clock()
    w.reloader = BundleReloader(link, "t1", 1.0, clock)
    attempts: list[str] = []

    async def connect_text(text: LocalText) -> TextScorer:
        attempts.append(text.version)
        if len(attempts) == 1:
            raise ConnectionError("Triton serves no version of spam_text for t2 yet")
        return TextScorer(text.encoder, FakeTextModel(cheap, version=text.version), 2, 2, ScoreCache(100))

    w.connect_text = connect_text
    pending = MODEL_RELOADS.labels("pending")._value.get()
    stop = asyncio.Event()

    async def promote_after_first_batch() -> None:
        while not sink.records:
            await asyncio.sleep(0.01)
        link.unlink()
        link.symlink_to(b)
        clock.now = 2.0  # the first look finds t2 not served yet...
        while not attempts:
            await asyncio.sleep(0.01)
        clock.now = 4.0  # ...the next one switches
        while len(attempts) < 2:
            await asyncio.sleep(0.01)
        w.source.gate.set()  # type: ignore[attr-defined]
        while len(sink.records) < 2:
            await asyncio.sleep(0.01)
        stop.set()

    await asyncio.gather(w.run(stop), promote_after_first_batch())
    out = verdicts(sink)
    assert (out["x1"].model_versions["text"], out["x1"].model_versions["decision"]) == ("t1", "va")
    assert (out["x2"].model_versions["text"], out["x2"].model_versions["decision"]) == ("t2", "vb")
    assert MODEL_RELOADS.labels("pending")._value.get() == pending + 1
    assert old_model.closed  # once no batch used it
