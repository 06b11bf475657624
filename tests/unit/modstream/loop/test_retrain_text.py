"""A retrain's text model starts from the serving model's weights when it kept them, and from the
base; the one that validates better is kept."""

from __future__ import annotations

from pathlib import Path

from modstream.loop.retrain_text import HF_DIR, better_start, starts


def test_the_serving_checkpoint_is_a_start_only_when_the_text_dir_kept_one(tmp_path: Path) -> None:
    assert starts(tmp_path, None) == {"base": None}  # ONNX only: nothing to fine-tune from
    (tmp_path / HF_DIR).mkdir()
    (tmp_path / HF_DIR / "config.json").write_text("{}")
    assert starts(tmp_path, "minilm") == {"serving": str(tmp_path / HF_DIR), "base": "minilm"}


def test_the_better_validation_f1_wins_and_a_tie_keeps_the_serving_weights() -> None:
    assert better_start({"serving": 0.91, "base": 0.93}) == "base"
    assert better_start({"serving": 0.93, "base": 0.93}) == "serving"
    assert better_start({"base": 0.5}) == "base"
