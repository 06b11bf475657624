"""`train-text --data FILE --test FILE` end to end on a tiny random DistilBERT: all of the
platform's data is used (train + validation), the external test file is only scored, and
the card and `eval-text` report the transformer, the n-gram model and their fusion."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, DistilBertConfig, DistilBertForSequenceClassification
from typer.testing import CliRunner

from modstream.cli import app
from training.corpora.templates import template_posts
from training.text_model.base import minilm_dir
from workers.model_cards import TextModelCard

pytestmark = pytest.mark.integration


def write_csv(path: Path, rows: list[tuple[str, int]]) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows(rows)
    return path


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer DistilBERT with the MiniLM tokenizer, saved as a local base checkpoint."""
    torch.manual_seed(0)
    config = DistilBertConfig(
        vocab_size=30522, dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=64, num_labels=2
    )
    out = tmp_path_factory.mktemp("base")
    DistilBertForSequenceClassification(config).save_pretrained(out)
    AutoTokenizer.from_pretrained(minilm_dir()).save_pretrained(out)
    return out


def test_train_on_own_data_with_an_external_test_file(tiny_base: Path, tmp_path: Path) -> None:
    posts = [(e.text, e.label) for e in template_posts(160, seed=3)]
    data = write_csv(tmp_path / "posts.csv", posts[:120])
    test = write_csv(tmp_path / "held_out.csv", posts[120:])
    out = tmp_path / "model"
    runner = CliRunner()
    args = ["--data", str(data), "--test", str(test), "--base", str(tiny_base), "--out", str(out)]
    result = runner.invoke(app, ["train-text", *args, "--epochs", "1", "--max-length", "32", "--balanced"])
    assert result.exit_code == 0, result.output

    card = TextModelCard.load(out)
    assert card.balanced_loss is True
    assert card.split_sizes is not None and card.split_sizes["test"] == 40
    assert card.split_sizes["train"] + card.split_sizes["val"] == 120  # nothing thrown away
    assert card.fusion is not None and card.ngram is not None
    assert card.fusion["metrics"]["test"]["n"] == 40
    assert {"transformer", "ngram", "bias"} <= card.fusion.keys()
    assert (out / "pr_curve.png").is_file() and (out / "confusion_fused.png").is_file()

    evaluated = runner.invoke(app, ["eval-text", "--data", str(test), "--model", str(out), "--json"])
    assert evaluated.exit_code == 0, evaluated.output
    report = json.loads(evaluated.stdout.strip().splitlines()[-1])
    assert report["n"] == 40 and report["ngram"]["n"] == 40 and report["fused"]["n"] == 40
    # The fused score of the card's own test split is what eval-text computes for the same file.
    assert report["fused"]["f1"] == pytest.approx(card.fusion["metrics"]["test"]["f1"])
