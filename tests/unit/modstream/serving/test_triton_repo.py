"""Triton repository layout and config rendering (no servers)."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from modstream.serving.triton_repo import (
    INPUT_NAMES,
    MODEL_NAME,
    OUTPUT_NAME,
    PYTHON_MODEL_SOURCE,
    REFERENCE_DIR,
    TARGETS,
    TRITON_MODELS_DIR,
    RepoOptions,
    Target,
    add_version,
    build_repo,
    reference_configs,
    render_config,
    served_models,
    target_of,
    versions,
)
from workers.adapters.triton import triton_version
from workers.config import Settings


def parse(text: str) -> model_config_pb2.ModelConfig:
    """Parse with Triton's own schema: a typo in the rendered text fails here."""
    return text_format.Parse(text, model_config_pb2.ModelConfig())


@pytest.mark.parametrize("target", TARGETS)
def test_render_config_contract(target: Target) -> None:
    opts = RepoOptions(max_batch_size=32, preferred_batch_sizes=(8, 32), instances=2)
    config = parse(render_config(target, opts))

    assert config.name == MODEL_NAME
    assert config.max_batch_size == 32
    assert [(i.name, i.data_type, list(i.dims)) for i in config.input] == [
        (name, model_config_pb2.TYPE_INT64, [-1]) for name in INPUT_NAMES
    ]
    assert [(o.name, o.data_type, list(o.dims)) for o in config.output] == [
        (OUTPUT_NAME, model_config_pb2.TYPE_FP32, [2])
    ]
    assert list(config.dynamic_batching.preferred_batch_size) == [8, 32]
    assert config.dynamic_batching.max_queue_delay_microseconds == 2000
    assert config.instance_group[0].count == 2
    # Every text model whose version directory is present: the old and the new one during a swap.
    assert config.version_policy.WhichOneof("policy_choice") == "all"
    assert target_of(render_config(target, opts)) == target


def test_render_config_per_target() -> None:
    opts = RepoOptions(intra_op_threads=2)
    embedded, onnx, tensorrt = (parse(render_config(t, opts)) for t in ("cpu-embedded", "cpu-onnx", "gpu-tensorrt"))
    gpu, cpu = model_config_pb2.ModelInstanceGroup.KIND_GPU, model_config_pb2.ModelInstanceGroup.KIND_CPU

    assert (embedded.backend, embedded.instance_group[0].kind) == ("python", cpu)
    assert all(i.allow_ragged_batch for i in embedded.input)
    assert not any(i.allow_ragged_batch for i in (*onnx.input, *tensorrt.input))
    assert embedded.parameters["intra_op_threads"].string_value == "2"
    assert (onnx.backend, onnx.instance_group[0].kind) == ("onnxruntime", cpu)
    assert onnx.parameters["intra_op_thread_count"].string_value == "2"
    assert (tensorrt.platform, tensorrt.instance_group[0].kind) == ("tensorrt_plan", gpu)
    assert set(tensorrt.parameters) == set()


def test_reference_configs_do_not_drift() -> None:
    expected = reference_configs()
    assert set(expected) == {"gpu-tensorrt.config.pbtxt", "cpu-onnx.config.pbtxt"}
    for name, text in expected.items():
        assert (REFERENCE_DIR / name).read_text() == text, (
            f"regenerate: python -m modstream.serving.triton_repo ({name})"
        )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_batch_size": 0},
        {"instances": 0},
        {"max_queue_delay_us": -1},
        {"preferred_batch_sizes": (16, 512)},  # above max_batch_size
        {"intra_op_threads": -1},
    ],
)
def test_repo_options_validation(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        RepoOptions(**kwargs)  # type: ignore[arg-type]


def test_build_repo_cpu_embedded(tiny_model_dir: Path, tmp_path: Path) -> None:
    repo = build_repo(
        "cpu-embedded", tiny_model_dir, tmp_path / "repo", RepoOptions(max_batch_size=8, preferred_batch_sizes=(8,))
    )

    version_dir = repo / MODEL_NAME / str(triton_version("tiny0001"))
    assert sorted(p.name for p in version_dir.iterdir()) == ["__pycache__", "card.json", "model.onnx", "model.py"]
    assert (version_dir / "model.py").read_text() == PYTHON_MODEL_SOURCE.read_text()
    # Compiled in advance: a stub that wrote it later would make Triton reload this version on every load.
    assert Path(importlib.util.cache_from_source(str(version_dir / "model.py"))).is_file()
    assert versions(repo / MODEL_NAME) == {triton_version("tiny0001"): "tiny0001"}
    config = parse((repo / MODEL_NAME / "config.pbtxt").read_text())
    assert config.max_batch_size == 8


def test_triton_versions_are_derived_from_the_card_alone() -> None:
    assert triton_version("cfa140904afd") == triton_version("cfa140904afd")
    assert triton_version("cfa140904afd") != triton_version("cfa140904afe")
    assert 0 < triton_version("x") < 2**63  # a Triton version is a positive int64


def test_a_text_model_is_added_beside_the_served_one(tiny_model_dir: Path, tmp_path: Path) -> None:
    repo = build_repo("cpu-embedded", tiny_model_dir, tmp_path / "repo")
    other = shutil.copytree(tiny_model_dir, tmp_path / "other")
    (other / "card.json").write_text(json.dumps({"serving_model": "model.onnx", "version": "tiny0002"}))
    config = (repo / MODEL_NAME / "config.pbtxt").read_text()

    added = add_version("cpu-embedded", other, repo / MODEL_NAME)
    assert added.name == str(triton_version("tiny0002"))
    assert set(versions(repo / MODEL_NAME).values()) == {"tiny0001", "tiny0002"}
    assert (repo / MODEL_NAME / "config.pbtxt").read_text() == config  # Triton reloads nothing else
    assert not [p for p in (repo / MODEL_NAME).iterdir() if p.name.startswith(".")]  # no half-written dirs


def test_build_repo_replaces_an_earlier_build(tiny_model_dir: Path, tmp_path: Path) -> None:
    build_repo("cpu-embedded", tiny_model_dir, tmp_path)
    build_repo("cpu-onnx", tiny_model_dir, tmp_path)

    version_dir = tmp_path / MODEL_NAME / str(triton_version("tiny0001"))
    assert sorted(p.name for p in version_dir.iterdir()) == ["card.json", "model.onnx"]
    assert parse((tmp_path / MODEL_NAME / "config.pbtxt").read_text()).backend == "onnxruntime"


def test_build_repo_tensorrt_takes_the_plan(tmp_path: Path) -> None:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "card.json").write_text(json.dumps({"serving_model": "model.onnx", "version": "v1"}))
    with pytest.raises(FileNotFoundError, match="build-engine"):
        build_repo("gpu-tensorrt", model_dir, tmp_path / "repo")

    plan = tmp_path / "engine.plan"
    plan.write_bytes(b"plan")
    repo = build_repo("gpu-tensorrt", model_dir, tmp_path / "repo", plan=plan)
    assert (repo / MODEL_NAME / str(triton_version("v1")) / "model.plan").read_bytes() == b"plan"


def test_build_repo_guards_sources(tiny_model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="overwrite sources"):
        build_repo("cpu-onnx", tiny_model_dir, TRITON_MODELS_DIR)
    inside = shutil.copytree(tiny_model_dir, tmp_path / MODEL_NAME / "trained")
    with pytest.raises(ValueError, match="overwrite sources"):
        build_repo("cpu-onnx", inside, tmp_path)
    assert (inside / "card.json").is_file()


def test_build_repo_needs_a_card(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"card\.json"):
        build_repo("cpu-onnx", tmp_path, tmp_path / "repo")


def test_cpu_defaults_are_one_single_threaded_instance_per_core() -> None:
    cpu = RepoOptions.for_target("cpu-embedded", cores=6)
    assert (cpu.instances, cpu.intra_op_threads, cpu.max_batch_size) == (6, 1, 16)
    assert RepoOptions.for_target("gpu-tensorrt") == RepoOptions()
    config = parse(render_config("cpu-embedded", cpu))
    assert config.instance_group[0].count == 6
    assert config.parameters["intra_op_threads"].string_value == "1"


def test_build_repo_cli_overrides_the_target_defaults(tiny_model_dir: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from modstream.cli import app

    args = ["build-repo", "--model", str(tiny_model_dir), "--out", str(tmp_path), "--max-batch-size", "8"]
    result = CliRunner().invoke(app, [*args, "--instances", "3"])
    assert result.exit_code == 0, result.output
    config = parse((tmp_path / MODEL_NAME / "config.pbtxt").read_text())
    assert (config.max_batch_size, config.instance_group[0].count) == (8, 3)
    assert list(config.dynamic_batching.preferred_batch_size) == []  # 16 no longer fits


def test_a_challengers_text_model_is_served_beside_under_the_shadow_name(tiny_model_dir: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from modstream.cli import app

    challenger = shutil.copytree(tiny_model_dir, tmp_path / "challenger")
    (challenger / "card.json").write_text(json.dumps({"serving_model": "model.onnx", "version": "tiny0002"}))
    args = ["build-repo", "--model", str(tiny_model_dir), "--out", str(tmp_path / "repo")]
    result = CliRunner().invoke(app, [*args, "--shadow-model", str(challenger)])
    assert result.exit_code == 0, result.output
    assert served_models(tmp_path / "repo") == (MODEL_NAME, Settings().shadow_triton_model)
    shadow = parse((tmp_path / "repo" / Settings().shadow_triton_model / "config.pbtxt").read_text())
    assert shadow.name == "spam_text_shadow"
    assert list(versions(tmp_path / "repo" / Settings().shadow_triton_model).values()) == ["tiny0002"]
    assert list(versions(tmp_path / "repo" / MODEL_NAME).values()) == ["tiny0001"]
