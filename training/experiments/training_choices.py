"""The training choices that matter, measured: each variant trained on the same data, one change
from the default at a time, and compared on the same held-out posts and evaluation sets.

``python -m training.experiments.training_choices --out out/choices [--data FILE --test FILE] [--only NAME ...]``
trains every variant into ``out/<name>`` (a variant already there is reused), then writes
``choices.json``, ``choices.md`` (a table) and ``choices.png``. On 2 cores a variant takes
3 to 5 minutes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from rich.console import Console

from training.text_model.train import DEFAULT_EPOCHS, DEFAULT_LR, DEFAULT_MAX_LENGTH, train_text
from workers.config import cache_root
from workers.model_cards import CARD_FILE, TextModelCard

# One change from the default each; the names are the table's rows.
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    f"epochs {DEFAULT_EPOCHS + 1}": {"epochs": DEFAULT_EPOCHS + 1},
    f"max length {DEFAULT_MAX_LENGTH * 2}": {"max_length": DEFAULT_MAX_LENGTH * 2},
    f"lr {DEFAULT_LR / 2:g}": {"lr": DEFAULT_LR / 2},
    f"lr {DEFAULT_LR * 2:g}": {"lr": DEFAULT_LR * 2},
    "unfrozen embeddings": {"freeze_embeddings": False},
    "balanced classes": {"balanced": True},
}


def _dir_name(variant: str) -> str:
    return variant.replace(" ", "-")


def row(name: str, card: TextModelCard) -> dict[str, Any]:
    """What the table shows of one trained variant: F1 on the held-out split for each signal,
    casual posts scored as spam, reference examples right, and the training time."""
    assert card.metrics is not None and card.fusion is not None and card.ngram is not None
    served = card.metrics["int8" if card.serving_model.endswith(".int8.onnx") else "fp32"]
    held_out = "test" if "test" in served else "val"

    def wrong(metrics: dict[str, Any]) -> int:
        return round(float(metrics["n"]) * (1 - float(metrics["accuracy"])))

    return {
        "variant": name,
        "transformer_f1": served[held_out]["f1"],
        "transformer_auc": served[held_out]["roc_auc"],
        "ngram_f1": card.ngram["metrics"][held_out]["f1"],
        "fused_f1": card.fusion["metrics"][held_out]["f1"],
        "casual_flagged": wrong(served["casual"]),
        "casual_flagged_fused": wrong(card.fusion["metrics"]["casual"]),
        "reference_wrong": wrong(served["reference"]),
        "best_val_f1": card.best_val_f1,
        "train_seconds": card.train_seconds,
    }


COLUMNS = {
    "variant": "variant",
    "transformer_f1": "transformer F1",
    "transformer_auc": "ROC-AUC",
    "ngram_f1": "n-gram F1",
    "fused_f1": "fused F1",
    "casual_flagged": "casual ≥ 0.5",
    "casual_flagged_fused": "casual ≥ 0.5, fused",
    "reference_wrong": "reference wrong",
    "train_seconds": "train s",
}


def table(rows: list[dict[str, Any]]) -> str:
    def cell(v: Any) -> str:
        return f"{v:.4f}" if isinstance(v, float) and v <= 1 else f"{v:.0f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(COLUMNS.values()) + " |", "|" + " --- |" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(r[c]) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    fig = Figure(figsize=(9, 4.5))
    ax = fig.add_subplot()
    width = 0.27
    for i, (key, label) in enumerate(
        (("transformer_f1", "transformer"), ("ngram_f1", "n-gram"), ("fused_f1", "fused"))
    ):
        ax.bar([j + (i - 1) * width for j in range(len(rows))], [r[key] for r in rows], width, label=label)
    ax.set_xticks(range(len(rows)), [r["variant"] for r in rows], rotation=20, ha="right")
    low = min(min(r["ngram_f1"], r["transformer_f1"]) for r in rows)
    ax.set(ylabel="F1 on held-out posts", ylim=(max(0.0, low - 0.03), 1.0), title="Text model: one choice at a time")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper center", ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("out/choices"))
    parser.add_argument("--data", type=Path, help="a labelled file (default: the built-in posts)")
    parser.add_argument("--test", type=Path, help="an external labelled test file (with --data)")
    parser.add_argument("--only", nargs="*", choices=list(VARIANTS), help="train only these variants")
    args = parser.parse_args()
    console = Console(stderr=True)
    rows = []
    for name, kwargs in VARIANTS.items():
        target = args.out / _dir_name(name)
        if not (target / CARD_FILE).exists():
            if args.only is not None and name not in args.only:
                continue
            console.rule(f"variant: {name}")
            train_text(args.data, None, target, cache=cache_root(), test=args.test, **kwargs)
        rows.append(row(name, TextModelCard.load(target)))
    (args.out / "choices.json").write_text(json.dumps(rows, indent=2) + "\n")
    (args.out / "choices.md").write_text(table(rows) + "\n")
    plot(rows, args.out / "choices.png")
    print(table(rows))


if __name__ == "__main__":
    main()
