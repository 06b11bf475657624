"""A promotion as the settings configure it: the drain policy follows the workers' reload interval, and
the commands name the link and the Triton model the settings do."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from modstream.cli import app
from modstream.loop.promotion import PromotionError, TextServing, shadow_configured, text_serving
from tests.unit.fakes import tiny_decision_model, write_bundle
from workers.config import Settings


def repo(tmp_path: Path) -> Path:
    """A Triton repository holding the served text model's config (what `stack up` writes)."""
    root = tmp_path / "triton_repo"
    (root / "spam_text").mkdir(parents=True)
    (root / "spam_text" / "config.pbtxt").write_text('name: "spam_text"\nbackend: "onnxruntime"\n')
    return root


def test_without_tritons_repository_there_is_no_text_serving(tmp_path: Path) -> None:
    assert text_serving(Settings(model_dir=tmp_path)) is None


@pytest.mark.parametrize(
    ("reload_s", "idle_s", "drain_min_s", "drain_max_s"),
    [(5.0, 5.0, 10.0, 60.0), (20.0, 20.0, 40.0, 120.0), (0.0, TextServing.idle_s, 2 * TextServing.idle_s, 60.0)],
)
def test_a_retired_text_model_drains_over_the_workers_reload_interval(
    tmp_path: Path, reload_s: float, idle_s: float, drain_min_s: float, drain_max_s: float
) -> None:
    settings = Settings(model_dir=tmp_path / "current", triton_repo=repo(tmp_path), model_reload_s=reload_s)
    serving = text_serving(settings)
    assert serving is not None
    assert (serving.idle_s, serving.drain_min_s, serving.drain_max_s) == (idle_s, drain_min_s, drain_max_s)
    assert serving.model_root == tmp_path / "triton_repo" / "spam_text" and list(serving.keep) == []


def test_the_challenger_s_model_is_made_like_the_served_one_and_the_shadow_bundle_kept(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    settings = Settings(model_dir=tmp_path / "current", triton_repo=repo(tmp_path), shadow_model_dir=shadow)
    serving = text_serving(settings, settings.shadow_triton_model)
    assert serving is not None and serving.name == settings.shadow_triton_model
    assert f'name: "{settings.shadow_triton_model}"' in (serving.model_root / "config.pbtxt").read_text()
    assert list(serving.keep) == [shadow]


def test_shadowing_needs_the_challenger_s_link(tmp_path: Path) -> None:
    with pytest.raises(PromotionError, match="MODSTREAM_SHADOW_MODEL_DIR is unset"):
        shadow_configured(Settings(model_dir=tmp_path / "current"), tmp_path)
    result = CliRunner().invoke(app, ["models", "shadow", str(tmp_path)], env={"MODSTREAM_MODEL_DIR": str(tmp_path)})
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert result.output.startswith("error: MODSTREAM_SHADOW_MODEL_DIR is unset")


def test_a_promotion_from_the_command_line_says_what_is_served_now(tmp_path: Path) -> None:
    a = write_bundle(tmp_path / "a", model=tiny_decision_model(version="va"))
    b = write_bundle(tmp_path / "b", model=tiny_decision_model(seed=1, version="vb"))
    link = tmp_path / "current"
    link.symlink_to(a)
    runner = CliRunner()
    result = runner.invoke(app, ["models", "promote", str(b)], env={"MODSTREAM_MODEL_DIR": str(link)})
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert said.startswith(f"promote: now serving {b.resolve()} (decision model vb, text model ")
    assert said.endswith(f"was {a.resolve()}") and "Triton loaded" not in said
    result = runner.invoke(app, ["models", "rollback"], env={"MODSTREAM_MODEL_DIR": str(link)})
    assert result.exit_code == 0 and " ".join(result.output.split()).startswith(f"rollback: now serving {a.resolve()}")
