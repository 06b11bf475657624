"""Export of the fine-tuned model to the ONNX serving contract, its parity check and int8 weights."""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process
from transformers import PreTrainedModel

from workers.text.encoder import IntArray, TextEncoder

ONNX_OPSET = 17


class _LogitsOnly(torch.nn.Module):
    """The serving contract: two int64 inputs, one ``logits`` output."""

    def __init__(self, model: PreTrainedModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.model(input_ids=input_ids, attention_mask=attention_mask).logits
        return logits


def export_onnx(model: PreTrainedModel, path: Path, opset: int = ONNX_OPSET) -> Path:
    """Export with dynamic batch and sequence axes (TorchScript exporter: stable for BERTs)."""
    model.eval()
    # A padded row keeps the attention-mask path in the trace (no "all ones" shortcut).
    ids = torch.tensor([[101, 7592, 2088, 999, 102], [101, 7592, 102, 0, 0]], dtype=torch.int64)
    mask = (ids != 0).to(torch.int64)
    axes = {0: "batch", 1: "seq"}
    with torch.no_grad(), warnings.catch_warnings():
        # Tracer notes on shape checks that are constant for this model; parity checks catch real issues.
        warnings.simplefilter("ignore", torch.jit.TracerWarning)  # type: ignore[attr-defined]  # not in torch.jit.__all__
        warnings.filterwarnings("ignore", message="Exporting aten::index", category=UserWarning)
        torch.onnx.export(
            # eval() on the wrapper too: the exporter restores the wrapper's mode afterwards,
            # which would otherwise flip the model back into training mode (dropout on).
            _LogitsOnly(model).eval(),
            (ids, mask),
            str(path),
            input_names=["input_ids", "attention_mask"],
            output_names=["logits"],
            dynamic_axes={"input_ids": axes, "attention_mask": axes, "logits": {0: "batch"}},
            opset_version=opset,
            dynamo=False,
        )
    return Path(path)


def parity(model: PreTrainedModel, sess: ort.InferenceSession, encoder: TextEncoder, texts: Sequence[str]) -> float:
    """Max abs logit difference PyTorch vs ONNX Runtime on one padded batch."""
    ids, mask = encoder.encode(texts)
    model.eval()
    with torch.no_grad():
        expected = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits.numpy()
    (actual,) = sess.run(["logits"], {"input_ids": ids, "attention_mask": mask})
    return float(np.abs(expected - actual).max())


def _full_length(encoder: TextEncoder, texts: Sequence[str]) -> tuple[IntArray, IntArray]:
    ids, mask = encoder.encode(texts)
    width = ((0, 0), (0, encoder.max_length - ids.shape[1]))
    return np.pad(ids, width), np.pad(mask, width)


class _Calibration(CalibrationDataReader):  # type: ignore[misc]  # onnxruntime ships no type hints
    """Encoded batches of calibration texts, in the serving contract's inputs."""

    def __init__(self, encoder: TextEncoder, texts: Sequence[str], batch: int = 16) -> None:
        # Every batch padded to max_length and of one size: the percentile calibrater stacks the
        # activations of all batches, so their shapes must agree (padding does not move a row's
        # activations). A ragged last batch is left out; fewer texts than a batch are one batch.
        size = min(batch, len(texts))
        self._batches = iter(
            [_full_length(encoder, texts[i : i + size]) for i in range(0, len(texts) - size + 1, size)]
        )

    def get_next(self) -> dict[str, IntArray] | None:
        ids_mask = next(self._batches, None)
        return None if ids_mask is None else {"input_ids": ids_mask[0], "attention_mask": ids_mask[1]}


# The feed-forward output projections of the first layers stay fp32: the GELU outputs they read have
# outliers that one static uint8 scale either clips or blurs. Keeping layers 0 and 1 halved the int8
# copy's mean score error on validation (0.0151 → 0.0087) for about 14% of its CPU
# (docs/journal/2026-11-29-int8-served.md).
FP32_PROJECTIONS = re.compile(r"/layer\.[01]/ffn/lin2/")


def quantize_int8(src: Path, dst: Path, encoder: TextEncoder, calibration: Sequence[str]) -> Path:
    """int8 MatMul/Gemm with **static** activation scales calibrated on ``calibration`` texts.

    Dynamic quantization computes each activation scale over the whole batch tensor, so a text's
    score moved (by up to 0.006) with its batch neighbours and padding; fixed scales make every
    row's score independent of the rest of the batch. Weights keep per-channel scales (per-tensor
    ones cost ~0.006 test F1)."""
    prepared = dst.with_suffix(".pre.onnx")
    quant_pre_process(str(src), str(prepared), skip_symbolic_shape=True)
    graph = onnx.load(str(prepared), load_external_data=False).graph
    fp32 = [node.name for node in graph.node if FP32_PROJECTIONS.search(node.name)]
    if not fp32:  # the exporter named the layers otherwise: every projection would be quantized, unnoticed
        raise RuntimeError(f"no MatMul matches {FP32_PROJECTIONS.pattern} in {src}")
    try:
        quantize_static(
            str(prepared),
            str(dst),
            _Calibration(encoder, calibration),
            # QOperator (QLinearMatMul) and weights-only MatMuls, as dynamic quantization did: the
            # QDQ form and quantized attention products cost 0.006 test F1 and ~20% more CPU.
            quant_format=QuantFormat.QOperator,
            op_types_to_quantize=["MatMul", "Gemm"],
            per_channel=True,
            weight_type=QuantType.QInt8,
            activation_type=QuantType.QUInt8,
            calibrate_method=CalibrationMethod.Percentile,
            nodes_to_exclude=fp32,
            extra_options={"MatMulConstBOnly": True},
        )
    finally:
        prepared.unlink(missing_ok=True)
    return dst
