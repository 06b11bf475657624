"""TensorRT engine profile and config (TensorRT itself needs a GPU: not run here)."""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from modstream.serving.engine import EngineProfile, EngineUnavailable, build_engine
from modstream.serving.triton_repo import INPUT_NAMES, RepoOptions, render_config


def test_profile_shapes_cover_both_inputs() -> None:
    profile = EngineProfile(min_batch=1, opt_batch=16, max_batch=32, min_seq=4, opt_seq=64, max_seq=256)

    assert profile.shapes() == {name: ((1, 4), (16, 64), (32, 256)) for name in INPUT_NAMES}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_batch": 0},
        {"min_seq": 0},
        {"opt_batch": 512},  # above max_batch
        {"min_batch": 64, "opt_batch": 32},
        {"opt_seq": 4, "min_seq": 8},
        {"max_seq": 16},  # below opt_seq
    ],
)
def test_profile_validation(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        EngineProfile(**kwargs)


def test_profile_repo_options_match_the_engine() -> None:
    profile = EngineProfile(opt_batch=24, max_batch=48)
    config = text_format.Parse(render_config("gpu-tensorrt", profile.repo_options()), model_config_pb2.ModelConfig())

    assert config.platform == "tensorrt_plan"
    assert config.max_batch_size == 48
    assert list(config.dynamic_batching.preferred_batch_size) == [24, 48]


def test_gpu_repo_defaults_fit_the_default_engine() -> None:
    """build-repo --target gpu-tensorrt must never let Triton batch beyond build-engine's profile."""
    assert EngineProfile().repo_options() == RepoOptions.for_target("gpu-tensorrt")


@pytest.mark.skipif(find_spec("tensorrt") is not None, reason="tensorrt is installed")
def test_build_engine_without_tensorrt(tmp_path: Path) -> None:
    with pytest.raises(EngineUnavailable, match=r"modstream\[gpu\]"):
        build_engine(tmp_path / "model.onnx", tmp_path / "engine", EngineProfile())
