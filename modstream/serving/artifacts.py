"""Trained models, cached under ``~/.cache/modstream`` by content hash.

A model directory's key hashes the code and settings that produce it, so editing
the training code retrains once, and every later run (CI included) reuses the result.
The code is every project file the training entry module imports, directly or not,
so the key can neither miss a file nor retrain for one training never reads.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock
from rich.console import Console

from modstream.import_graph import ROOT, import_graph, module_files, reachable
from workers.config import cache_root, default_model_dir
from workers.model_cards import CARD_FILE, DecisionModelCard, TextModelCard
from workers.text.ngram import NgramModel
from workers.text.normalise import NORMALISER_VERSION

if TYPE_CHECKING:  # pandas and the corpora load only where a model is trained
    from training.corpora.labelled import Splits

# The packages training code can import (modstream/ sits above training).
CODE_PACKAGES = ("schemas", "workers", "training")
TEXT_ENTRY = "training.text_model.train"
DECISION_ENTRY = "training.decision_model"
TRAINING_DATA = "training/data"
WORKER_DATA = "workers/data"  # the domain lists the signals and the decide stage (so the simulator) read
DATA_SUFFIXES = (".csv", ".jsonl")
CHITCHAT_PACKAGE = "chitchat-dataset"  # the default posts' ham (training.corpora.posts)


@dataclass(frozen=True)
class Models:
    text: Path  # tokenizer.json, card.json, model.onnx, model.int8.onnx
    decision: Path  # model.txt, card.json
    bundle: Path  # text/ and decision/ side by side: what MODSTREAM_MODEL_DIR points at


def code_files(entry: str) -> list[str]:
    """The project files (relative to the repository root) that importing ``entry`` runs, sorted."""
    files = module_files(CODE_PACKAGES)
    return sorted(str(files[name].relative_to(ROOT)) for name in reachable(import_graph(CODE_PACKAGES), [entry]))


def data_files() -> list[str]:
    """Every data file committed beside the training code (training/data): no source can be missed."""
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / TRAINING_DATA).rglob("*") if p.suffix in DATA_SUFFIXES)


def content_key(files: Iterable[str], *extra: str) -> str:
    digest = hashlib.sha256()
    for rel in files:
        digest.update(rel.encode() + b"\0" + (ROOT / rel).read_bytes() + b"\0")
    for item in extra:
        digest.update(item.encode() + b"\0")
    return digest.hexdigest()[:16]


def _build(target: Path, build: Callable[[Path], None], console: Console, what: str) -> None:
    """Build into a scratch dir and rename, so an interrupted run never leaves a half model."""
    if (target / CARD_FILE).exists():
        console.print(f"[green]✓[/] {what}: cached at {target}")
        return
    scratch = target.with_name(target.name + ".partial")
    shutil.rmtree(scratch, ignore_errors=True)
    console.print(f"[bold]{what}[/]: training into {target} (first run only)")
    build(scratch)
    shutil.rmtree(target, ignore_errors=True)
    scratch.rename(target)


def _normalised_alike(text_dir: Path) -> bool:
    """Whether ``text_dir`` holds a model trained with this code's normaliser (or one that names none)."""
    if not (text_dir / CARD_FILE).is_file():
        return False
    pinned = TextModelCard.load(text_dir).normaliser
    return pinned is None or pinned == NORMALISER_VERSION


def ensure_models(console: Console | None = None) -> Models:
    """The default models, trained into the cache where missing. One process at a time: commands
    run together (a demo beside a test run) wait for the one that trains instead of training it twice."""
    console = console or Console(stderr=True)
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(root / ".models.lock"):
        return _ensure_models(root, console)


def _ensure_models(root: Path, console: Console) -> Models:
    # The key follows the data too: the SpamAssassin package is pinned in training/corpora/spamassassin.py (hashed
    # with the code); the chat corpus is an installed package, so its version is added here.
    data = f"{CHITCHAT_PACKAGE}=={version(CHITCHAT_PACKAGE)}"
    text_dir = root / "text-model" / content_key(code_files(TEXT_ENTRY) + data_files(), "defaults", data)

    def build_text(out: Path) -> None:
        from training.text_model.train import train_text

        with contextlib.redirect_stdout(io.StringIO()):  # ONNX Runtime's int8 calibration prints its settings
            train_text(data=None, base=None, out=out, cache=root)

    _build(text_dir, build_text, console, "content model")
    text_version = TextModelCard.load(text_dir).version
    worker_data = sorted(str(p.relative_to(ROOT)) for p in (ROOT / WORKER_DATA).glob("*.txt"))
    decision_dir = root / "decision-model" / content_key(code_files(DECISION_ENTRY) + worker_data, text_version)

    def build_decision(out: Path) -> None:
        from training.corpora.posts import post_splits

        train_on_simulator(text_dir, out, post_splits(root), ngram=NgramModel.load(text_dir).spam_prob)

    _build(decision_dir, build_decision, console, "decision model")
    bundle = root / "bundles" / f"{text_dir.name}-{decision_dir.name}"
    bundle.mkdir(parents=True, exist_ok=True)
    for name, target in (("text", text_dir), ("decision", decision_dir)):
        link = bundle / name
        if not link.is_symlink():
            link.symlink_to(target)
    current = default_model_dir()
    # A fresh cache, or a bundle this code refuses (its text model saw another normaliser, so it was
    # trained by older code): link what `modstream worker` serves by default. A servable bundle that
    # was promoted stays.
    if not current.exists() or not _normalised_alike(current / "text"):
        current.unlink(missing_ok=True)
        current.symlink_to(bundle)
        console.print(f"[green]✓[/] linked {current} -> {bundle}")
    return Models(text_dir, decision_dir, bundle)


def train_on_simulator(text_dir: Path, out: Path, splits: Splits, **options: Any) -> DecisionModelCard:
    """The decision model on the platform simulator around ``splits``' texts, scored by the text model in
    ``text_dir`` (its ONNX serving file), into ``out``; ``options`` go to :func:`train_decision`."""
    from training.decision_model import train_decision
    from training.text_model.scoring import onnx_spam_scores

    version = TextModelCard.load(text_dir).version
    return train_decision(
        splits.val, splits.test, lambda texts: onnx_spam_scores(text_dir, texts), out, text_version=version, **options
    )
