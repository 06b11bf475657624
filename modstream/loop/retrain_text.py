"""The retrain's text stage: fine-tune the text model (and its n-gram companion) on the labelled texts.

The latest posts are held out by time, the gate's slice; the earlier ones are training and
validation. It starts from the serving text model's weights (the HF checkpoint a trained
text dir keeps in ``hf/``) and from the base model's, and keeps whichever validates better:
a platform's first retrain may do better from the general base, later ones from their own.

The decision model must learn from text scores like those it will see on new posts, not from
the text models' scores on their own training texts: those are overconfident (the n-gram model
all but memorises them), and trees split in the gap they leave, where new ham falls. So the
earlier posts are also scored out of fold: ``folds`` more text models, each trained on the
others from the chosen start, score the posts they did not see.
"""

from __future__ import annotations

import contextlib
import csv
import io
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from training.text_model.train import DEFAULT_EPOCHS, DEFAULT_MAX_LENGTH, DEFAULT_SEED, train_text
from workers.config import cache_root
from workers.model_cards import TextModelCard

HF_DIR = "hf"  # where train_text keeps the fine-tuned checkpoint a next retrain starts from


@dataclass(frozen=True)
class Trained:
    dir: Path
    card: TextModelCard
    start: str  # "serving" or "base"
    checkpoint: str | None  # where that start's weights came from (None: the default base)
    val_f1: dict[str, float]  # each start's best validation F1


def write_csv(path: Path, rows: Sequence[tuple[str, str, int]]) -> Path:
    """``id,text,label`` rows as train_text reads them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(("id", "text", "label"))
        writer.writerows(rows)
    return path


def starts(serving_text: Path, base: str | None) -> dict[str, str | None]:
    """The checkpoints to start from: the serving model's when it kept one, and the base."""
    own = serving_text / HF_DIR
    return ({"serving": str(own)} if (own / "config.json").is_file() else {}) | {"base": base}


def better_start(val_f1: dict[str, float]) -> str:
    """The start whose model validates better; the serving one on a tie (nothing to gain by switching)."""
    return max(val_f1, key=lambda name: (val_f1[name], name == "serving"))


def train(
    history: Sequence[tuple[str, str, int]],
    held_out: Sequence[tuple[str, str, int]],
    serving_text: Path,
    base: str | None,
    work: Path,
    *,
    epochs: int = DEFAULT_EPOCHS,
    max_length: int = DEFAULT_MAX_LENGTH,
    seed: int = DEFAULT_SEED,
    progress: Callable[[str], None] = lambda _: None,
) -> Trained:
    """A text model per start in ``work``; the one with the better validation F1 is returned (the
    serving start on a tie), the other removed."""
    data, test = write_csv(work / "history.csv", history), write_csv(work / "held_out.csv", held_out)
    cards: dict[str, TextModelCard] = {}
    checkpoints = starts(serving_text, base)
    for name, checkpoint in checkpoints.items():
        progress(f"text model from the {name} weights ({checkpoint or 'default base'})")
        with contextlib.redirect_stdout(io.StringIO()):  # ONNX Runtime's int8 calibration prints its settings
            cards[name] = train_text(
                data, checkpoint, work / name, epochs, max_length, seed, cache=cache_root(), test=test
            )
    scores = {name: card.best_val_f1 or 0.0 for name, card in cards.items()}
    best = better_start(scores)
    for name in cards.keys() - {best}:
        shutil.rmtree(work / name)
    return Trained(work / best, cards[best], best, checkpoints[best], scores)


def cross_fit(
    history: Sequence[tuple[str, str, int]],
    checkpoint: str | None,
    work: Path,
    folds: int,
    *,
    epochs: int = DEFAULT_EPOCHS,
    max_length: int = DEFAULT_MAX_LENGTH,
    seed: int = DEFAULT_SEED,
    progress: Callable[[str], None] = lambda _: None,
) -> list[tuple[range, Path]]:
    """Per time-contiguous fold of ``history``: its rows, and a text model trained on the other rows."""
    size = -(-len(history) // folds)
    out = []
    for k, first in enumerate(range(0, len(history), size)):
        rows = range(first, min(first + size, len(history)))
        progress(f"out-of-fold text model {k + 1}/{folds} ({len(history) - len(rows)} posts)")
        rest = [r for i, r in enumerate(history) if i not in rows]
        data, test = (
            write_csv(work / f"fold{k}.csv", rest),
            write_csv(work / f"fold{k}-test.csv", history[first : rows.stop]),
        )
        # Scored here only, and a few thousandths of F1 from the served model's int8 copy: calibrating
        # int8 scales took as long as the fine-tuning on 2 cores.
        train_text(
            data, checkpoint, work / f"fold{k}", epochs, max_length, seed, cache=cache_root(), test=test, int8=False
        )
        out.append((rows, work / f"fold{k}"))
    return out
