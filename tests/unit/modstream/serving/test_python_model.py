"""The embedded stack's Triton Python model (triton_models/spam_text_python/model.py) without a
tritonserver: its backend utilities are stood in for, its ONNX session faked."""

from __future__ import annotations

import importlib.util
import sys
import types
from typing import Any

import numpy as np
import pytest

from modstream.serving.triton_repo import PYTHON_MODEL_SOURCE


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", types.ModuleType("triton_python_backend_utils"))
    spec = importlib.util.spec_from_file_location("spam_text_python_model", PYTHON_MODEL_SOURCE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Session:
    """Logits that name each row by its first token, and the widths it was run at."""

    def __init__(self) -> None:
        self.widths: list[int] = []

    def run(self, _: list[str], feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        ids = feed["input_ids"]
        self.widths.append(ids.shape[1])
        return [np.stack([ids[:, 0], ids.shape[1] * np.ones(len(ids))], axis=1).astype(np.float32)]


def rows(lengths: list[int], width: int) -> tuple[np.ndarray, np.ndarray]:
    mask = np.array([[1] * n + [0] * (width - n) for n in lengths], dtype=np.int64)
    ids = mask * np.arange(1, len(lengths) + 1)[:, None]
    return ids, mask


def test_merged_requests_of_short_and_long_texts_run_apart_each_row_in_its_place(model: Any) -> None:
    """Triton merged a request of short texts with one of long texts: the short ones are not padded to
    the long ones' width (they were a third of the model's work in half-load batches), and every row
    gets its own logits back."""
    ids, mask = rows([5, 60, 4, 5, 61, 5], 61)
    inst = model.TritonPythonModel()
    inst.session = Session()

    logits = inst._logits(ids, mask)

    assert sorted(inst.session.widths) == [5, 61]
    assert logits[:, 0].tolist() == [1, 2, 3, 4, 5, 6]  # each row's own
    assert logits[:, 1].tolist() == [5, 61, 5, 5, 61, 5]  # and run at its group's width


def test_rows_of_near_lengths_run_together(model: Any) -> None:
    """A request's rows the worker cut together, and texts of one length, are not run one by one."""
    lengths = np.array([9, 10, 10, 11, 12, 12])
    order = np.arange(len(lengths))

    assert [g.tolist() for g in model.groups(order, lengths)] == [order.tolist()]
    assert [len(g) for g in model.groups(order[:1], lengths[:1])] == [1]
