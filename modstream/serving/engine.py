"""Build the TensorRT engine for the ``gpu-tensorrt`` Triton target (GPU machines only).

The ONNX model has dynamic batch and sequence axes; TensorRT needs their range up
front as one optimization profile (min/opt/max), applied to both inputs alike.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modstream.serving.triton_repo import INPUT_NAMES, PLAN_FILE, RepoOptions, write_model_config

GPU_HINT = "GPU only: install modstream[gpu] on a machine with an NVIDIA GPU"

Shape = tuple[int, int]


class EngineUnavailable(RuntimeError):
    """TensorRT or a CUDA GPU is missing."""


@dataclass(frozen=True)
class EngineProfile:
    """The shape range the engine accepts: batch and sequence length, each min <= opt <= max."""

    # Measured on an H200 (docs/PERFORMANCE.md, "GPU"): a batch of 64 still costs what one of 16
    # does, and 256 doubles 64's throughput; posts average 30 tokens (p50 27, p90 59).
    min_batch: int = 1
    opt_batch: int = 64
    max_batch: int = 256
    min_seq: int = 8
    opt_seq: int = 32
    max_seq: int = 128  # room for a text model of up to 128 tokens; the default one stops at 64

    def __post_init__(self) -> None:
        for axis, (low, opt, high) in {
            "batch": (self.min_batch, self.opt_batch, self.max_batch),
            "seq": (self.min_seq, self.opt_seq, self.max_seq),
        }.items():
            if low < 1:
                raise ValueError(f"min {axis} must be >= 1, got {low}")
            if not low <= opt <= high:
                raise ValueError(f"{axis} needs min <= opt <= max, got {low}, {opt}, {high}")

    def shapes(self) -> dict[str, tuple[Shape, Shape, Shape]]:
        """(min, opt, max) ``[batch, seq]`` shapes per input, as ``IOptimizationProfile.set_shape`` takes them."""
        low, opt, high = (
            (self.min_batch, self.min_seq),
            (self.opt_batch, self.opt_seq),
            (self.max_batch, self.max_seq),
        )
        return {name: (low, opt, high) for name in INPUT_NAMES}

    def repo_options(self) -> RepoOptions:
        """Triton options matching the engine: Triton must never batch beyond the profile's max."""
        return RepoOptions(
            max_batch_size=self.max_batch,
            preferred_batch_sizes=tuple(sorted({self.opt_batch, self.max_batch})),
        )


def _tensorrt() -> Any:
    try:
        return importlib.import_module("tensorrt")
    except ImportError as exc:
        raise EngineUnavailable(f"tensorrt is not importable ({exc}); {GPU_HINT}") from exc


def build_engine(
    onnx_path: Path,
    out_dir: Path,
    profile: EngineProfile,
    fp16: bool = True,
    int8: bool = False,
    timing_cache: Path | None = None,
) -> Path:
    """Build ``out_dir/model.plan`` from the ONNX model and write the matching ``config.pbtxt`` next to it.

    ``int8`` expects an explicitly quantized (Q/DQ) ONNX: there is no calibrator.
    ``timing_cache`` is loaded when it exists and saved afterwards, so rebuilds
    skip kernel timing. Returns the plan's path.
    """
    trt = _tensorrt()
    logger = trt.Logger(trt.Logger.WARNING)
    try:
        builder = trt.Builder(logger)
    except Exception as exc:  # TensorRT fails to construct without a usable CUDA device
        raise EngineUnavailable(f"TensorRT found no usable CUDA GPU ({exc}); {GPU_HINT}") from exc

    network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = "\n".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise RuntimeError(f"TensorRT could not parse {onnx_path}:\n{errors}")

    config = builder.create_builder_config()
    optimization_profile = builder.create_optimization_profile()
    for name, (low, opt, high) in profile.shapes().items():
        optimization_profile.set_shape(name, low, opt, high)
    config.add_optimization_profile(optimization_profile)
    if fp16:
        config.set_flag(trt.BuilderFlag.FP16)
    if int8:
        config.set_flag(trt.BuilderFlag.INT8)
    if timing_cache is not None:
        cached = timing_cache.read_bytes() if timing_cache.exists() else b""
        config.set_timing_cache(config.create_timing_cache(cached), ignore_mismatch=False)

    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise RuntimeError(f"TensorRT failed to build an engine from {onnx_path} (see its log above)")
    out_dir.mkdir(parents=True, exist_ok=True)
    plan = out_dir / PLAN_FILE
    plan.write_bytes(bytes(serialized))
    if timing_cache is not None:
        timing_cache.parent.mkdir(parents=True, exist_ok=True)
        timing_cache.write_bytes(bytes(config.get_timing_cache().serialize()))
    write_model_config("gpu-tensorrt", profile.repo_options(), out_dir)
    return plan
