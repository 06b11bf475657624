"""The retrain's text stage: fine-tune the text model (and its n-gram companion) on the labelled texts.

The latest posts are held out by time, the gate's slice; the earlier ones are training and
validation. It starts from the serving text model's weights (the HF checkpoint a trained
text dir keeps in ``hf/``) and from the base model's, and keeps whichever validates better:
a platform's first retrain may do better from the general base, later ones from their own.
"""

from __future__ import annotations

import csv
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from training.text_model import DEFAULT_EPOCHS, DEFAULT_MAX_LENGTH, DEFAULT_SEED, train_text
from workers.cards import TextModelCard
from workers.config import cache_root

HF_DIR = "hf"  # where train_text keeps the fine-tuned checkpoint a next retrain starts from


@dataclass(frozen=True)
class Trained:
    dir: Path
    card: TextModelCard
    start: str  # "serving" or "base"
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
    for name, checkpoint in starts(serving_text, base).items():
        progress(f"text model from the {name} weights ({checkpoint or 'default base'})")
        cards[name] = train_text(data, checkpoint, work / name, epochs, max_length, seed, cache=cache_root(), test=test)
    scores = {name: card.best_val_f1 or 0.0 for name, card in cards.items()}
    best = max(scores, key=lambda name: (scores[name], name == "serving"))
    for name in cards.keys() - {best}:
        shutil.rmtree(work / name)
    return Trained(work / best, cards[best], best, scores)
