"""The embedded stack's Triton Python model (``triton_models/spam_text_python/model.py``), run in process
with a stand-in for the stub's ``triton_python_backend_utils``: tritonserver itself is in the
integration tests."""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from modstream.serving.triton_repo import PYTHON_MODEL_SOURCE


@dataclass
class Tensor:
    name: str
    data: npt.NDArray[Any]

    def as_numpy(self) -> npt.NDArray[Any]:
        return self.data


@dataclass
class TritonError:
    message: str


@dataclass
class Response:
    output_tensors: list[Tensor] | None = None
    error: TritonError | None = None


def _get_input(request: dict[str, Tensor], name: str) -> Tensor | None:
    return request.get(name)


@pytest.fixture
def model(version_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    utils = ModuleType("triton_python_backend_utils")
    utils.Tensor = Tensor  # type: ignore[attr-defined]
    utils.TritonError = TritonError  # type: ignore[attr-defined]
    utils.InferenceResponse = Response  # type: ignore[attr-defined]
    utils.get_input_tensor_by_name = _get_input  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", utils)
    spec = importlib.util.spec_from_file_location("spam_text_model", PYTHON_MODEL_SOURCE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    instance = module.TritonPythonModel()
    config = {"parameters": {"intra_op_threads": {"string_value": "1"}}}
    instance.initialize(
        {"model_config": json.dumps(config), "model_repository": str(version_dir.parent), "model_version": "x"}
    )
    return instance


@pytest.fixture
def version_dir(tiny_model_dir: Path, tmp_path: Path) -> Path:
    """The tiny model as a version directory, ``<repo>/x/model.onnx``."""
    version = tmp_path / "repo" / "x"
    version.mkdir(parents=True)
    (version / "model.onnx").write_bytes((tiny_model_dir / "model.onnx").read_bytes())
    return version


def request(rows: list[list[int]], width: int) -> dict[str, Tensor]:
    """A request as the worker pads it: right-padded to ``width`` with mask 0."""
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, : len(row)], mask[i, : len(row)] = row, 1
    return {"input_ids": Tensor("input_ids", ids), "attention_mask": Tensor("attention_mask", mask)}


def logits(responses: list[Response]) -> list[npt.NDArray[Any]]:
    out: list[npt.NDArray[Any]] = []
    for r in responses:
        assert r.error is None and r.output_tensors is not None
        out.extend(r.output_tensors[0].as_numpy())
    return out


def test_a_row_reads_the_same_bits_in_any_batch(model: Any) -> None:
    """A redelivered post must score the same bits whatever it is batched with: alone, in a request
    the worker padded wider, or merged by the dynamic batcher with other requests in any order."""
    rng = np.random.default_rng(3)
    texts = [list(rng.integers(100, 30_000, size=n)) for n in (3, 7, 8, 9, 12, 16, 17, 31, 33, 64)]
    alone = [logits(model.execute([request([t], len(t))]))[0] for t in texts]

    together = logits(model.execute([request(texts, 70)]))
    order = rng.permutation(len(texts))
    merged = model.execute([request([texts[i]], len(texts[i]) + int(rng.integers(0, 9))) for i in order])

    assert model.pair_lone  # the tiny model's one-row Gemm reads other bits: lone rows run paired
    assert all(np.array_equal(a, b) for a, b in zip(alone, together, strict=True))
    assert all(np.array_equal(alone[i], got) for i, got in zip(order, logits(merged), strict=True))


def test_a_malformed_request_fails_alone(model: Any) -> None:
    good = request([[101, 2023, 102]], 3)
    bad = {"input_ids": Tensor("input_ids", np.zeros((2, 3), dtype=np.int64))}  # no attention_mask

    responses = model.execute([good, bad, good])

    assert [r.error is None for r in responses] == [True, False, True]
    assert responses[1].error is not None and "attention_mask" in responses[1].error.message
    assert np.array_equal(logits([responses[0]])[0], logits([responses[2]])[0])
