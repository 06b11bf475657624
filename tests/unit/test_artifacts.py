"""The models' cache keys hash exactly the code their training imports."""

from modstream.artifacts import DECISION_ENTRY, TEXT_ENTRY, code_files


def test_the_decision_key_covers_the_worker_stages_its_rows_go_through() -> None:
    files = code_files(DECISION_ENTRY)
    assert {"training/decision.py", "training/simulator.py", "workers/stages/validate.py", "schemas/events.py"} <= set(
        files
    )
    assert files == sorted(files)


def test_the_text_key_stays_as_narrow_as_the_text_trainer_imports() -> None:
    files = code_files(TEXT_ENTRY)
    assert {"training/text_model.py", "training/text_export.py", "training/corpus.py", "workers/textenc.py"} <= set(
        files
    )
    assert not [f for f in files if f.startswith(("workers/stages/", "modstream/")) or f == "training/decision.py"]
