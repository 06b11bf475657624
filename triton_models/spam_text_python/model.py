"""Triton Python-backend model ``spam_text``: the content model on ONNX Runtime (CPU).

Used by the embedded local stack, where tritonserver has only the Python backend.
``modstream build-repo --target cpu-embedded`` copies this file into each version directory,
``<repo>/spam_text/<n>/model.py``, with that text model's ``model.onnx`` next to it.

Config parameters (``config.pbtxt``):
  intra_op_threads  ONNX Runtime intra-op threads (0 = ORT default)

Dynamic batching hands ``execute`` several requests at once. Each row runs at its own width,
its length (the last unmasked token) rounded up to ``WIDTH_MULTIPLE`` tokens, and the rows of one
width, from every request, run as one ONNX Runtime call. So a row's logits hang on its tokens
alone, never on the requests it was merged with or how wide the worker padded it: a post read
again after a crash scores the same bits in any batch, and no row pays for a longer neighbour's
padding (at half load, rows run at their request's longest cost Triton a fifth more CPU:
docs/journal/2026-11-29-rows-at-their-own-width.md). Triton's rule is kept: exactly
one response per request, in order, errors as ``TritonError`` responses, and nothing raised
out of ``execute``.
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
# At 8 the burst cost 4% more Triton CPU than with the worker's own cut, at 4 the same; both saved as
# much at half load (docs/journal/2026-11-29-rows-at-their-own-width.md).
WIDTH_MULTIPLE = 4


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


def _lengths(mask: np.ndarray) -> np.ndarray:
    """Each row's length up to its last unmasked token (0 for a row with none)."""
    unmasked = mask != 0
    return np.where(unmasked.any(axis=1), mask.shape[1] - np.argmax(unmasked[:, ::-1], axis=1), 0)


def _infer(session: ort.InferenceSession, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    (logits,) = session.run([OUTPUT], {"input_ids": ids, "attention_mask": mask})
    return logits


def _lone_rows_agree(session: ort.InferenceSession) -> bool:
    """Whether a row run alone reads the bits it reads among others. ONNX Runtime's CPU kernels
    compute rows apart, but some take another path for one row (a one-row Gemm, for one)."""
    ids = np.random.default_rng(0).integers(100, 1000, size=(3, 8), dtype=np.int64)
    mask = np.ones_like(ids)
    mask[1, 5:] = 0
    together = _infer(session, ids, mask)
    return all(np.array_equal(_infer(session, ids[i : i + 1], mask[i : i + 1])[0], together[i]) for i in range(3))


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
        # Where a lone row reads other bits, it runs beside a copy of itself, as it would among others.
        self.pair_lone = not _lone_rows_agree(self.session)

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
            logits = self._logits([ids for _, ids, _ in batch], [mask for _, _, mask in batch])
        except Exception as exc:
            for i, _, _ in batch:
                responses[i] = pb_utils.InferenceResponse(error=pb_utils.TritonError(f"inference failed: {exc}"))
            return
        offsets = np.cumsum([0] + [ids.shape[0] for _, ids, _ in batch])
        for (i, _, _), start, end in zip(batch, offsets[:-1], offsets[1:], strict=True):
            out = pb_utils.Tensor(OUTPUT, np.ascontiguousarray(logits[start:end], dtype=np.float32))
            responses[i] = pb_utils.InferenceResponse(output_tensors=[out])

    def _logits(self, ids: list[np.ndarray], masks: list[np.ndarray]) -> np.ndarray:
        """The requests' rows, in order, each run at its own width."""
        m = WIDTH_MULTIPLE
        seq = -(-max(a.shape[1] for a in ids) // m) * m  # no row's width rounds up past this
        all_ids, all_mask = _pad_concat(ids, seq), _pad_concat(masks, seq)
        widths = np.maximum(-(-_lengths(all_mask) // m), 1) * m
        logits: np.ndarray | None = None
        for width in np.unique(widths):
            rows = np.flatnonzero(widths == width)
            paired = self.pair_lone and len(rows) == 1
            run = np.repeat(rows, 2) if paired else rows
            out = _infer(self.session, all_ids[run, :width], all_mask[run, :width])
            if logits is None:
                logits = np.empty((len(widths), *out.shape[1:]), dtype=np.float32)
            logits[rows] = out[:1] if paired else out
        assert logits is not None  # every request has a row: Triton refuses empty batches
        return logits
