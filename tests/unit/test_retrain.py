"""Retraining on the platform's labels: split by time, compared with the serving model, a clear exit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from modstream.cli import app
from tests.unit.fakes import logged_verdict, tiny_decision_model, write_bundle
from training.dataset import DatasetError, build, write_parquet
from training.retrain import Bar, retrain, time_split
from workers.features import FEATURES
from workers.records import InMsg
from workers.startup import EXIT_MISCONFIGURED

TEXT = FEATURES.index("text_spam_prob")
USER_REPORTS = FEATURES.index("user_reports")


def labelled_set(path: Path, n: int = 800, seed: int = 3) -> Path:
    """Posts whose label the text score explains partly and user reports explain the rest: a model
    trained on them beats the tiny serving model, which reads the text score only."""
    rng = np.random.default_rng(seed)
    verdicts, feedback = [], []
    for i in range(n):
        spam = bool(rng.random() < 0.4)
        values: list[float | None] = list(rng.random(len(FEATURES)))
        values[TEXT] = float(np.clip(rng.normal(0.65 if spam else 0.35, 0.25), 0, 1))
        values[USER_REPORTS] = float(rng.poisson(3 if spam else 0.3))
        values[1] = None  # missing values travel as null
        verdicts.append(logged_verdict(f"p{i}", i, values=values))
        feedback.append(
            json.dumps(
                {
                    "kind": "moderator_label",
                    "post_id": f"p{i}",
                    "user_id": "u1",
                    "actor_id": "m",
                    "label": "spam" if spam else "ham",
                    "created_at": "2026-12-01T00:00:00Z",
                }
            ).encode()
        )
    data = build(
        [InMsg("verdicts", 0, i, None, v.model_dump_json().encode(), 0.0) for i, v in enumerate(verdicts)],
        [InMsg("feedback", 0, i, None, f, 0.0) for i, f in enumerate(feedback)],
    )
    write_parquet(data, path)
    return path


def one_line(output: str) -> str:
    """The CLI's error with the console's wrapping undone; it must be the only thing printed."""
    assert output.startswith("error:") and "Traceback" not in output
    return " ".join(output.split())


@pytest.fixture
def serving(tmp_path: Path) -> Path:
    return write_bundle(tmp_path / "serving")


def test_the_split_is_by_time() -> None:
    assert time_split(100) == (slice(0, 80), slice(80, 90), slice(90, 100))


def test_a_better_model_is_trained_compared_and_bundled(tmp_path: Path, serving: Path) -> None:
    out = tmp_path / "new"
    report = retrain(labelled_set(tmp_path / "set.parquet"), serving, out, Bar())
    assert report.rows == {"train": 640, "validation": 80, "test": 80}
    # The test rows are the latest posts: every split starts after the one before.
    assert report.split_times["train"] < report.split_times["validation"] < report.split_times["test"]
    assert report.new.n == report.serving.n == 80
    assert report.new.roc_auc > report.serving.roc_auc and report.at_least_as_good
    assert (out / "decision" / "model.txt").exists() and (out / "text" / "card.json").exists()
    assert (out / "comparison.png").stat().st_size > 1000
    assert json.loads((out / "report.json").read_text())["at_least_as_good"] is True


def test_the_bar_decides_the_exit_code(tmp_path: Path, serving: Path) -> None:
    data = labelled_set(tmp_path / "set.parquet")
    runner = CliRunner()
    base = ["train-decision", "--data", str(data), "--serving", str(serving), "--out", str(tmp_path / "o")]
    assert runner.invoke(app, base).exit_code == 0
    result = runner.invoke(app, [*base, "--min-auc-delta", "0.9"])
    assert result.exit_code == 1, result.output
    assert "not as good" in result.output


def test_a_serving_bundle_of_another_contract_is_a_one_line_error(tmp_path: Path, serving: Path) -> None:
    card = serving / "decision" / "card.json"
    card.write_text(json.dumps(json.loads(card.read_text()) | {"features": ["a"], "feature_version": "x"}))
    result = CliRunner().invoke(
        app, ["train-decision", "--data", str(labelled_set(tmp_path / "s.parquet")), "--serving", str(serving)]
    )
    assert result.exit_code == EXIT_MISCONFIGURED
    assert "feature contract" in one_line(result.output)


@pytest.mark.parametrize("content", [b"garbage", b""])
def test_a_corrupt_or_empty_file_is_a_one_line_error(tmp_path: Path, serving: Path, content: bytes) -> None:
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(content)
    result = CliRunner().invoke(app, ["train-decision", "--data", str(bad), "--serving", str(serving)])
    assert result.exit_code == EXIT_MISCONFIGURED and "Parquet" in one_line(result.output), result.output


def test_too_few_labels_to_split_are_refused(tmp_path: Path, serving: Path) -> None:
    with pytest.raises(DatasetError, match="split has"):
        retrain(labelled_set(tmp_path / "s.parquet", n=60), serving, tmp_path / "o", Bar())


def test_a_set_scored_by_another_text_model_is_refused(tmp_path: Path) -> None:
    other = write_bundle(tmp_path / "other", model=tiny_decision_model(), text_version="t2")
    with pytest.raises(DatasetError, match="text model"):
        retrain(labelled_set(tmp_path / "s.parquet"), other, tmp_path / "o", Bar())
