"""``modstream retrain``: the weekly retrain, one stage after another, into one self-contained bundle.

1. dataset: the range's moderator-labelled posts joined with their texts from the input topic;
2. text: the text model fine-tuned on them (the latest share held out by time), and out-of-fold
   text models for the earlier posts (modstream/loop/retrain_text.py says why);
3. rescore and decide: every labelled row's two text features scored again in process, the
   held-out posts by the new text model, the earlier ones by the model that did not see them;
   per language, the transformer's score kept unless the decision model reads that language's earlier
   rows better without it (modstream/loop/languages.py); then the decision model trained on the rescored rows;
4. gate: challenger (rescored rows) against champion (rows as logged) on the latest posts;
5. report: ``report.json`` and ``report.png``.

The bundle is ``<out>/text`` and ``<out>/decision``, with the report beside them.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modstream.loop.champion import load_serving
from modstream.loop.config import Retraining
from modstream.loop.dataset import Texts, labelled_texts, matrix
from modstream.loop.gate import Gate
from modstream.loop.join import DatasetError
from modstream.loop.languages import choose, trust_line, withhold
from modstream.loop.rescore import in_process, rescore
from modstream.loop.retrain_decision import HOLDOUT, Decided, decide, holdout_split
from modstream.loop.retrain_text import Trained, cross_fit
from modstream.loop.retrain_text import train as train_text
from modstream.loop.topics import Range
from schemas import Verdict
from training.corpora.labelled import DataError
from workers.bundle.load import ScorerSettings
from workers.bundle.local_text import LocalText
from workers.records import Post
from workers.text.trust import languages_of

TEXT_FOLDS = 5
# A new platform's history is small: 1,600 labels give two epochs of about 70 steps, where the text
# model had not settled (docs/LOOP.md); early stopping still ends it once validation stops gaining.
TEXT_EPOCHS = 4
WORK_DIR = "work"  # the text stage's files and its candidates, removed once the bundle is written


@dataclass(frozen=True)
class Options:
    gate: Gate
    holdout: float = HOLDOUT
    base: str | None = None  # the base checkpoint (None: the default base)
    epochs: int = TEXT_EPOCHS
    text_folds: int = TEXT_FOLDS  # 0: the earlier posts scored by the final text model, in sample
    dead_letter: bool = True


@dataclass(frozen=True)
class Retrained:
    report: dict[str, Any]
    decided: Decided

    @property
    def better(self) -> bool:
        return self.decided.judgement.better


def retrain(
    settings: Retraining,
    rng: Range,
    serving_bundle: Path,
    out: Path,
    options: Options,
    progress: Callable[[str], None] = lambda _: None,
) -> Retrained:
    """Run every stage into ``out``; raises a one-line DatasetError (or RangeError) on bad input."""
    champion, _ = load_serving(serving_bundle)
    seconds: dict[str, float] = {}
    started = time.perf_counter()

    def lap(stage: str) -> None:
        seconds[stage] = round(time.perf_counter() - started - sum(seconds.values()), 1)

    progress("1/5 dataset: labelled posts and their texts")
    texts = labelled_texts(settings, rng, dead_letter=options.dead_letter)
    progress(
        f"1/5 dataset: {len(texts.labels)} labelled posts ({texts.spam} spam) with their text; "
        f"{texts.no_text} labelled posts left out, their text no longer on {settings.input_topic!r}"
    )
    if not texts.labels:
        raise DatasetError(f"none of the {texts.no_text} labelled posts has its text on {settings.input_topic!r}")
    lap("dataset")
    trained, scorers = _text(texts, serving_bundle, out, options, progress)
    lap("text")
    progress(f"3/5 rescore: {len(texts.verdicts)} rows by {len(scorers)} text model(s), in process")
    again = {
        v.post_id: v
        for part, model in scorers
        for v in _rescore([texts.verdicts[i] for i in part], texts.posts, model, settings)
    }
    shutil.rmtree(out / WORK_DIR)
    lap("rescore")
    logged = matrix(texts.verdicts, texts.labels, texts.times)
    rescored = matrix([again[v.post_id] for v in texts.verdicts], texts.labels, texts.times)
    found = languages_of([texts.posts[v.post_id].text for v in texts.verdicts])
    trust = choose(found, rescored, holdout_split(len(rescored.y), options.holdout)[0])
    progress(f"3/5 languages: {trust_line(trust)}")
    rescored = withhold(rescored, found, trust)
    progress(f"3/5 decide: the decision model on {len(rescored.y)} rescored rows, thresholds out of fold")
    decided = decide(rescored, logged.x, champion, out, options.gate, trained.card.version, options.holdout, trust)
    lap("decide")
    reading = decided.trust.spam_reading
    never = "never: where the two disagree, the labels side with the other signals"
    held = never if reading is None else f"from {reading:.2f}"
    sure = decided.trust.spam_confirmed
    blocks = "never" if sure is None else f"from {sure:.2f}"
    progress(f"3/5 decide: a text model's spam reading keeps a post out of allow {held}, blocks one in review {blocks}")
    doubted = {label: len(ids) for label, ids in decided.recheck.items()}
    if any(doubted.values()):
        progress(
            f"  labels to check again, set aside from the cuts and the gate (report.json, decision.labels_to_recheck): "
            f"{doubted['labelled_ham']} labelled ham and {doubted['labelled_spam']} labelled spam that the models "
            "that did not see them contradict"
        )
    j = decided.judgement
    progress(f"4/5 gate: {j.line()}")
    precision = "int8" if "int8" in trained.card.serving_model else "fp32"
    report = {
        "range": {"from": rng.from_time, "to": rng.to_time},
        "serving_bundle": str(serving_bundle),
        "dataset": {**texts.counts.as_dict(), "with_text": len(texts.labels), "no_text": texts.no_text},
        "text": {
            "version": trained.card.version,
            "start": trained.start,
            "out_of_fold_models": options.text_folds,
            "best_val_f1": trained.val_f1,
            "held_out": (trained.card.metrics or {}).get(precision, {}).get("test"),
            "fused_held_out": (trained.card.fusion or {}).get("metrics", {}).get("test"),
            "languages": decided.trust.model_dump(mode="json"),
        },
        "decision": decided.as_dict(),
        "better": decided.judgement.better,
        "seconds": seconds,
    }
    seconds["total"] = round(time.perf_counter() - started, 1)
    decided.write_report(out, options.gate.confidence, report)
    progress(f"5/5 report: {out / 'report.json'}, {out / 'report.png'}; the bundle is {out}")
    return Retrained(report, decided)


Scorers = list[tuple[range, Path]]  # rows (by index) and the text model dir that scores them


def _text(
    texts: Texts, serving_bundle: Path, out: Path, options: Options, progress: Callable[[str], None]
) -> tuple[Trained, Scorers]:
    """The new text model, moved to ``out/text``, and which text model scores which rows."""
    early, late = holdout_split(len(texts.labels), options.holdout)
    rows = [(v.post_id, texts.posts[v.post_id].text, y) for v, y in zip(texts.verdicts, texts.labels, strict=True)]
    progress(f"2/5 text: fine-tuning on {early.stop} posts, the latest {late.stop - late.start} held out")
    try:
        trained = train_text(rows[early], rows[late], serving_bundle / "text", options.base, out / WORK_DIR,
                             epochs=options.epochs, progress=progress)  # fmt: skip
        progress(f"2/5 text: version {trained.card.version}, from the {trained.start} weights ({trained.val_f1})")
        text_dir = out / "text"
        shutil.rmtree(text_dir, ignore_errors=True)
        trained.dir.rename(text_dir)  # the bundle keeps its own copy: promote serves it from here
        if not options.text_folds:
            return trained, [(range(len(rows)), text_dir)]
        folds = cross_fit(rows[early], trained.checkpoint, out / WORK_DIR, options.text_folds,
                          epochs=options.epochs, progress=progress)  # fmt: skip
    except DataError as exc:
        raise DatasetError(str(exc)) from None
    return trained, [(range(late.start, late.stop), text_dir), *folds]


def _rescore(
    verdicts: list[Verdict], posts: dict[str, Post], text_dir: Path, settings: ScorerSettings
) -> list[Verdict]:
    """``verdicts`` with their two text features scored by the text model in ``text_dir``."""
    local, models = LocalText.load(text_dir), in_process(text_dir)
    done = asyncio.run(rescore(verdicts, posts, local, models, "in-process", settings))
    assert done.no_post_event == 0  # every verdict kept has its post
    return done.verdicts
