"""A worker that starts cleanly: one-line errors (exit 2) for misconfiguration, quiet retries for dependencies."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from modstream.cli import app
from tests.unit.fakes import write_bundle
from workers.bundle.load import load_models
from workers.config import Settings
from workers.errors import Misconfigured
from workers.runtime.startup import EXIT_MISCONFIGURED, until_up


@pytest.fixture
def bundle(tmp_path: Path, tokenizer_json: Path) -> Path:
    """A model bundle with a real decision model and tokenizer (no Triton model needed to load)."""
    return write_bundle(tmp_path, tokenizer_json)


def test_a_good_bundle_loads(bundle: Path) -> None:
    loaded = load_models(Settings(model_dir=bundle))
    assert loaded.decision.version == "d1" and loaded.text.encoder.max_length == 128
    assert loaded.text.version == "t1" and loaded.challenger is None


def test_a_challenger_bundle_loads_beside_the_champion(bundle: Path, tmp_path: Path) -> None:
    challenger = tmp_path / "challenger"
    shutil.copytree(bundle, challenger, ignore=shutil.ignore_patterns("challenger"))
    loaded = load_models(Settings(model_dir=bundle, shadow_model_dir=challenger))
    assert loaded.challenger is not None and loaded.challenger.version == "d1"
    assert loaded.challenger_text is None  # the served text model: it reads the champion's scores


def test_a_challenger_with_another_text_model_loads_its_own_tokenizer(bundle: Path, tmp_path: Path) -> None:
    challenger = tmp_path / "challenger"
    shutil.copytree(bundle, challenger, ignore=shutil.ignore_patterns("challenger"))
    card = {"serving_model": "model.onnx", "version": "t2", "max_length": 64}
    (challenger / "text" / "card.json").write_text(json.dumps(card))
    loaded = load_models(Settings(model_dir=bundle, shadow_model_dir=challenger, max_tokens=32))
    assert loaded.challenger_text is not None and loaded.challenger_text.version == "t2"
    # max_tokens tunes the served model; the challenger's text model reads the length it was trained with.
    assert (loaded.text.encoder.max_length, loaded.challenger_text.encoder.max_length) == (32, 64)
    assert loaded.challenger_text.ngram is None and loaded.text.version == "t1"


def test_a_challenger_text_model_that_cannot_load_is_refused(bundle: Path, tmp_path: Path) -> None:
    challenger = tmp_path / "challenger"
    shutil.copytree(bundle, challenger, ignore=shutil.ignore_patterns("challenger"))
    (challenger / "text" / "card.json").write_text(json.dumps({"serving_model": "model.onnx", "version": "t2"}))
    (challenger / "text" / "tokenizer.json").write_text("{}")
    with pytest.raises(Misconfigured, match="cannot shadow"):
        load_models(Settings(model_dir=bundle, shadow_model_dir=challenger))


def test_a_missing_model_dir_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(Misconfigured, match="modstream models"):
        load_models(Settings(model_dir=tmp_path / "nope"))


@pytest.mark.parametrize(
    ("path", "content", "expected"),
    [
        ("decision/card.json", '{"features": [], "feature_version": "x", "version": "d", "thresholds": {}}', "block"),
        ("decision/card.json", "{not json", "card.json"),
        ("text/tokenizer.json", "{}", "cannot load"),
    ],
)
def test_broken_models_are_one_line_errors(bundle: Path, path: str, content: str, expected: str) -> None:
    (bundle / path).write_text(content)
    with pytest.raises(Misconfigured, match=expected) as err:
        load_models(Settings(model_dir=bundle))
    assert "\n" not in str(err.value)


def test_a_contract_mismatch_is_misconfiguration(bundle: Path) -> None:
    card = json.loads((bundle / "decision" / "card.json").read_text())
    (bundle / "decision" / "card.json").write_text(json.dumps(card | {"features": ["a"], "feature_version": "x"}))
    with pytest.raises(Misconfigured, match="feature contract"):
        load_models(Settings(model_dir=bundle))


async def test_until_up_retries_quietly_then_succeeds(caplog: pytest.LogCaptureFixture) -> None:
    attempts: list[int] = []

    async def check() -> None:
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError("connection refused\n(a multi-line\nmessage)")

    caplog.set_level(logging.INFO)
    assert await until_up("redis", check, asyncio.Event(), max_delay_s=0.01)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and all("\n" not in w and "redis not reachable" in w for w in warnings)
    assert not any(r.exc_info for r in caplog.records)


async def test_until_up_gives_up_when_stopped() -> None:
    async def check() -> None:
        raise ConnectionError("down")

    stop = asyncio.Event()
    stop.set()
    assert not await until_up("kafka", check, stop)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"MODSTREAM_BATCH_MAX_SIZE": "0"}, "batch_max_size"),
        ({"MODSTREAM_MODEL_DIR": "/nonexistent/bundle"}, "modstream models"),
    ],
)
def test_the_worker_command_exits_2_with_one_line(env: dict[str, str], expected: str) -> None:
    result = CliRunner().invoke(app, ["worker"], env={"MODSTREAM_METRICS_PORT": "0", **env})
    assert result.exit_code == EXIT_MISCONFIGURED
    assert expected in result.output and "Traceback" not in result.output


def test_the_worker_starts_without_importing_what_it_never_uses() -> None:
    code = (
        "import sys; from workers.runtime.startup import without\n"
        "with without():\n    import workers.main\n"
        "import pandas\n"  # importable again afterwards
        "print(sorted(m for m in ('sklearn', 'scipy.stats') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
