"""The models' cache keys hash exactly the code their training imports; the cache's ``current``
link follows the code when the code can no longer serve it."""

import json
from pathlib import Path

from modstream.serving.artifacts import DECISION_ENTRY, TEXT_ENTRY, _normalised_alike, code_files
from workers.model_cards import CARD_FILE
from workers.text.normalise import NORMALISER_VERSION


def test_the_decision_key_covers_the_worker_stages_its_rows_go_through() -> None:
    files = code_files(DECISION_ENTRY)
    assert {
        "training/decision_model.py",
        "training/simulator.py",
        "workers/stages/validate.py",
        "schemas/events.py",
    } <= set(files)
    assert files == sorted(files)


def test_the_text_key_stays_as_narrow_as_the_text_trainer_imports() -> None:
    files = code_files(TEXT_ENTRY)
    assert {
        "training/text_model/train.py",
        "training/text_model/export.py",
        "training/corpora/spamassassin.py",
        "workers/text/encoder.py",
    } <= set(files)
    assert not [
        f for f in files if f.startswith(("workers/stages/", "modstream/")) or f == "training/decision_model.py"
    ]


def test_current_is_relinked_only_when_this_code_cannot_serve_its_text_model(tmp_path: Path) -> None:
    def text_dir(name: str, **card: str) -> Path:
        d = tmp_path / name
        d.mkdir()
        (d / CARD_FILE).write_text(json.dumps({"serving_model": "model.onnx", "version": name, **card}))
        return d

    assert _normalised_alike(text_dir("this", normaliser=NORMALISER_VERSION))
    assert _normalised_alike(text_dir("unpinned"))  # trained before the pin: served with a warning
    assert not _normalised_alike(text_dir("older", normaliser="0123456789ab"))
    assert not _normalised_alike(tmp_path / "missing")
