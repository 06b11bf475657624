"""Triton Python-backend model ``spam_text``: the content model on ONNX Runtime (CPU).

Used by the embedded local stack, where tritonserver has only the Python backend.
``modstream build-repo --target cpu-embedded`` copies this file into each version directory,
``<repo>/spam_text/<n>/model.py``, with that text model's ``model.onnx`` next to it.

Config parameters (``config.pbtxt``):
  intra_op_threads  ONNX Runtime intra-op threads (0 = ORT default)

Dynamic batching hands ``execute`` several requests at once. They are run as one
ONNX Runtime call, right-padded to the longest sequence with attention_mask 0
(what the tokenizer's padding would produce), and split back. Triton's rule is
kept: exactly one response per request, in order, errors as ``TritonError``
responses, and nothing raised out of ``execute``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

INPUTS = ("input_ids", "attention_mask")
OUTPUT = "logits"


def _parameter(config: dict[str, Any], key: str, default: str) -> str:
    value = config.get("parameters", {}).get(key, {}).get("string_value")
    return default if value in (None, "") else str(value)


def _read_request(request: Any) -> tuple[np.ndarray, np.ndarray]:
    ids, mask = (pb_utils.get_input_tensor_by_name(request, name) for name in INPUTS)
    if ids is None or mask is None:
        raise ValueError(f"inputs {INPUTS} are required")
    ids_np, mask_np = ids.as_numpy(), mask.as_numpy()
    if ids_np.ndim != 2 or ids_np.shape != mask_np.shape:
        raise ValueError(
            f"input_ids {ids_np.shape} and attention_mask {mask_np.shape} must have the same [batch, seq] shape"
        )
    return ids_np.astype(np.int64, copy=False), mask_np.astype(np.int64, copy=False)


def _pad_concat(arrays: list[np.ndarray], seq: int) -> np.ndarray:
    return np.concatenate([np.pad(a, ((0, 0), (0, seq - a.shape[1]))) for a in arrays])


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        version_dir = Path(args["model_repository"]) / args["model_version"]
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(_parameter(config, "intra_op_threads", "0"))
        # Triton runs the instances in parallel; ORT's own inter-op pool would oversubscribe the cores.
        options.inter_op_num_threads = 1
        # Idle ORT threads spin by default; on a shared CPU that spinning starves the worker
        # and Triton's own threads. Measured in docs/PERFORMANCE.md.
        options.add_session_config_entry("session.intra_op.allow_spinning", _parameter(config, "ort_spinning", "0"))
        self.session = ort.InferenceSession(
            str(version_dir / "model.onnx"),
            sess_options=options,
            providers=["CPUExecutionProvider"],
        )

    def execute(self, requests: list[Any]) -> list[Any]:
        responses: list[Any] = [None] * len(requests)
        batch: list[tuple[int, np.ndarray, np.ndarray]] = []
        for i, request in enumerate(requests):
            try:
                batch.append((i, *_read_request(request)))
            except Exception as exc:  # a malformed request fails alone, not the batch
                responses[i] = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
        if batch:
            self._run(batch, responses)
        return responses

    def _run(self, batch: list[tuple[int, np.ndarray, np.ndarray]], responses: list[Any]) -> None:
        try:
            seq = max(ids.shape[1] for _, ids, _ in batch)
            (logits,) = self.session.run(
                [OUTPUT],
                {
                    "input_ids": _pad_concat([ids for _, ids, _ in batch], seq),
                    "attention_mask": _pad_concat([mask for _, _, mask in batch], seq),
                },
            )
        except Exception as exc:
            for i, _, _ in batch:
                responses[i] = pb_utils.InferenceResponse(error=pb_utils.TritonError(f"inference failed: {exc}"))
            return
        offsets = np.cumsum([0] + [ids.shape[0] for _, ids, _ in batch])
        for (i, _, _), start, end in zip(batch, offsets[:-1], offsets[1:], strict=True):
            out = pb_utils.Tensor(OUTPUT, np.ascontiguousarray(logits[start:end], dtype=np.float32))
            responses[i] = pb_utils.InferenceResponse(output_tensors=[out])
