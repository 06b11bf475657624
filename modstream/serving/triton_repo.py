"""Build the Triton model repository that serves the content model ``spam_text``, and beside it,
under a second name (``spam_text_shadow``), a challenger's text model when it is another one.

The repository is versioned: each text model is a version directory of its own,
``spam_text/<n>/``, whose number is derived from the model card's version
(:func:`triton_version`), so a worker that knows the card asks Triton for exactly that
model with no table to share. The config loads every version present
(``version_policy: all``); promoting a text model adds its directory and asks Triton
to load it (:mod:`modstream.loop.promotion`), retiring one removes its directory.

Three targets share one model name and one I/O contract, so the worker never
knows which one it talks to:

  cpu-embedded  Python backend running ONNX Runtime: the embedded local stack
                (pytriton's tritonserver ships only the Python backend).
  cpu-onnx      Triton's onnxruntime backend: a full Triton container on CPU.
  gpu-tensorrt  a TensorRT plan built by :func:`modstream.serving.engine.build_engine`.

``render_config`` is pure so the configs are unit-tested without files; the
reference configs under ``triton_models/reference`` are its output, checked in.
"""

from __future__ import annotations

import os
import py_compile
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, get_args

from workers.adapters.triton import triton_version
from workers.model_cards import TextModelCard

Target = Literal["cpu-embedded", "cpu-onnx", "gpu-tensorrt"]
TARGETS: tuple[Target, ...] = get_args(Target)

MODEL_NAME = "spam_text"
INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAME = "logits"
NUM_LABELS = 2
PLAN_FILE = "model.plan"  # what Triton's tensorrt_plan platform loads by default
ONNX_FILE = "model.onnx"  # cpu-embedded: the ONNX file next to model.py, whichever file the card serves

TRITON_MODELS_DIR = Path(__file__).resolve().parents[2] / "triton_models"
PYTHON_MODEL_SOURCE = TRITON_MODELS_DIR / "spam_text_python" / "model.py"
REFERENCE_DIR = TRITON_MODELS_DIR / "reference"
DEFAULT_REPO_DIR = Path("build/triton_repo")


# (backend/platform line, file in the version dir, instance kind) per target
_SERVING: dict[Target, tuple[str, str, str]] = {
    "cpu-embedded": ('backend: "python"', "model.py", "KIND_CPU"),
    "cpu-onnx": ('backend: "onnxruntime"', "model.onnx", "KIND_CPU"),
    "gpu-tensorrt": ('platform: "tensorrt_plan"', PLAN_FILE, "KIND_GPU"),
}


# Which target a repository's config was written for: its backend or platform line.
def target_of(config: str) -> Target:
    for target, (line, _, _) in _SERVING.items():
        if line in config:
            return target
    raise ValueError("not a spam_text config of any target (no known backend or platform line)")


@dataclass(frozen=True)
class RepoOptions:
    """Everything ``config.pbtxt`` depends on besides the target."""

    # GPU: what build-engine's default profile accepts (measured, docs/PERFORMANCE.md "GPU").
    max_batch_size: int = 256
    preferred_batch_sizes: tuple[int, ...] = (64, 256)
    max_queue_delay_us: int = 2000
    instances: int = 1
    intra_op_threads: int = 0  # CPU targets; 0 = ONNX Runtime's default
    name: str = MODEL_NAME

    def __post_init__(self) -> None:
        if self.max_batch_size < 1 or self.instances < 1 or self.max_queue_delay_us < 0:
            raise ValueError("max_batch_size and instances must be >= 1, max_queue_delay_us >= 0")
        if self.intra_op_threads < 0:
            raise ValueError("intra_op_threads must be >= 0")
        bad = [b for b in self.preferred_batch_sizes if not 1 <= b <= self.max_batch_size]
        if bad:
            raise ValueError(f"preferred batch sizes {bad} are outside [1, max_batch_size={self.max_batch_size}]")

    @classmethod
    def for_target(cls, target: Target, cores: int | None = None) -> RepoOptions:
        """Measured defaults (docs/PERFORMANCE.md). On CPU: one single-threaded instance per core,
        one 16-text request per execution. Separate sessions need no intra-op barrier, so a core
        taken by the worker or the broker stalls one instance instead of all of them, and batches
        of 16 run faster per text than 32 or 64."""
        if target == "gpu-tensorrt":
            return cls()
        # No queue delay: the worker already sends full requests, and waiting would only merge
        # a small batch's requests back onto one instance.
        return cls(
            max_batch_size=16,
            preferred_batch_sizes=(16,),
            max_queue_delay_us=0,
            instances=cores or os.cpu_count() or 1,
            intra_op_threads=1,
        )


def _tensor(name: str, data_type: str, dims: str, *, ragged: bool = False) -> str:
    extra = "\n    allow_ragged_batch: true" if ragged else ""
    return f'  {{\n    name: "{name}"\n    data_type: {data_type}\n    dims: [ {dims} ]{extra}\n  }}'


def _parameter(key: str, value: str) -> str:
    return f'parameters {{\n  key: "{key}"\n  value: {{ string_value: "{value}" }}\n}}'


def render_config(target: Target, opts: RepoOptions) -> str:
    """The ``config.pbtxt`` of ``spam_text`` for a target (pure: no files)."""
    serving, _, kind = _SERVING[target]
    # Triton batches only same-shape requests, unless inputs are ragged; the Python model pads
    # mixed lengths itself, so there requests of any length are batched together.
    ragged = target == "cpu-embedded"
    inputs = ",\n".join(_tensor(name, "TYPE_INT64", "-1", ragged=ragged) for name in INPUT_NAMES)
    preferred = ", ".join(str(b) for b in opts.preferred_batch_sizes)
    parameters: dict[str, str] = {}
    if target == "cpu-embedded":
        parameters["intra_op_threads"] = str(opts.intra_op_threads)
    elif target == "cpu-onnx" and opts.intra_op_threads:
        parameters["intra_op_thread_count"] = str(opts.intra_op_threads)  # onnxruntime backend's key
    lines = [
        f'name: "{opts.name}"',
        serving,
        f"max_batch_size: {opts.max_batch_size}",
        "version_policy: { all { } }",  # every text model whose directory is present: old and new during a swap
        f"input [\n{inputs}\n]",
        f"output [\n{_tensor(OUTPUT_NAME, 'TYPE_FP32', str(NUM_LABELS))}\n]",
        "dynamic_batching {"
        + (f"\n  preferred_batch_size: [ {preferred} ]" if preferred else "")
        + f"\n  max_queue_delay_microseconds: {opts.max_queue_delay_us}\n}}",
        f"instance_group [\n  {{\n    count: {opts.instances}\n    kind: {kind}\n  }}\n]",
        *(_parameter(key, value) for key, value in parameters.items()),
    ]
    return "\n".join(lines) + "\n"


def write_model_config(target: Target, opts: RepoOptions, model_root: Path) -> Path:
    """Write ``<model_root>/config.pbtxt`` (``model_root`` is the ``spam_text`` dir)."""
    model_root.mkdir(parents=True, exist_ok=True)
    path = model_root / "config.pbtxt"
    path.write_text(render_config(target, opts))
    return path


def _source(target: Target, text_dir: Path, card: TextModelCard, plan: Path | None, onnx_file: str | None) -> Path:
    """The file a target serves for the text model in ``text_dir``."""
    served = onnx_file or card.serving_model
    source = (plan or text_dir / PLAN_FILE) if target == "gpu-tensorrt" else text_dir / served
    if not source.is_file():
        hint = " (build it with modstream build-engine)" if target == "gpu-tensorrt" else ""
        raise FileNotFoundError(f"{source} not found{hint}")
    return source


def add_version(
    target: Target, text_dir: Path, model_root: Path, *, plan: Path | None = None, onnx_file: str | None = None
) -> Path:
    """Write the text model of ``text_dir`` as a version directory of ``model_root`` (a model dir with its
    ``config.pbtxt``): its serving file, and its card, which says which text model the number stands for.
    Written beside and renamed into place, so Triton never loads half a directory. Returns the directory."""
    card = TextModelCard.load(text_dir)
    source = _source(target, text_dir, card, plan, onnx_file)
    _, model_file, _ = _SERVING[target]
    version_dir = model_root / str(triton_version(card.version))
    tmp = model_root / f".{version_dir.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if target == "cpu-embedded":
        if not PYTHON_MODEL_SOURCE.is_file():
            raise FileNotFoundError(f"{PYTHON_MODEL_SOURCE} not found: the repository needs the modstream source tree")
        shutil.copy2(PYTHON_MODEL_SOURCE, tmp / model_file)
        # Compiled here, or the Python stub writes the bytecode into the version directory after Triton
        # has stamped it, and the next load request (a promotion, a retirement) reloads this version too.
        # The stub runs this environment's python3 (LocalStack puts it first on PATH), so the cache tag
        # matches; the stub ignores PYTHONDONTWRITEBYTECODE.
        py_compile.compile(str(tmp / model_file), doraise=True)
        shutil.copy2(source, tmp / ONNX_FILE)
    else:
        shutil.copy2(source, tmp / model_file)
    card.save(tmp)
    shutil.rmtree(version_dir, ignore_errors=True)  # the same text model written again: same files
    tmp.rename(version_dir)
    return version_dir


def versions(model_root: Path) -> dict[int, str]:
    """Triton version number -> text model version, for every version directory of ``model_root``."""
    return {
        int(d.name): TextModelCard.load(d).version
        for d in model_root.iterdir()
        if d.is_dir() and d.name.isdigit() and (d / "card.json").is_file()
    }


def ensure_model(repo: Path, name: str, like: str = MODEL_NAME) -> Path:
    """``<repo>/<name>``, made from ``like``'s config when it does not exist yet (a challenger's model,
    configured as the champion's). Returns the model directory."""
    root = repo / name
    if not (root / "config.pbtxt").is_file():
        config = (repo / like / "config.pbtxt").read_text()
        root.mkdir(parents=True, exist_ok=True)
        (root / "config.pbtxt").write_text(config.replace(f'name: "{like}"', f'name: "{name}"', 1))
    return root


def build_repo(
    target: Target,
    model_dir: Path,
    out: Path = DEFAULT_REPO_DIR,
    options: RepoOptions | None = None,
    *,
    plan: Path | None = None,
    name: str = MODEL_NAME,
    onnx_file: str | None = None,
) -> Path:
    """Write ``out/<name>/{config.pbtxt,<n>/...}`` from a trained model dir; returns ``out``.

    ``model_dir`` holds ``card.json`` and the ONNX file it names. For
    ``gpu-tensorrt`` the engine is ``plan`` or ``model_dir/model.plan``; its profile must
    allow ``max_batch_size`` (``build_engine`` writes a config matching its profile). Only
    ``out/<name>`` is replaced; other models in ``out`` are left alone, so a second call with
    another ``name`` adds a model (a challenger's text model, served beside). ``options``
    defaults to :meth:`RepoOptions.for_target`; the ONNX file is the card's serving model
    unless ``onnx_file`` names another (the benchmark's naive baseline serves the fp32
    ``model.onnx`` beside the int8 one). More text models are added by :func:`add_version`.
    """
    model_root = out / name
    # The build is replaced wholesale: it must not live among the sources nor contain the model dir.
    if model_root.resolve().is_relative_to(TRITON_MODELS_DIR) or model_dir.resolve().is_relative_to(
        model_root.resolve()
    ):
        raise ValueError(f"refusing to build into {model_root}: it would overwrite sources")
    _source(target, model_dir, TextModelCard.load(model_dir), plan, onnx_file)  # fail before removing anything
    shutil.rmtree(model_root, ignore_errors=True)  # no stale files from an earlier build or target
    write_model_config(target, replace(options or RepoOptions.for_target(target), name=name), model_root)
    add_version(target, model_dir, model_root, plan=plan, onnx_file=onnx_file)
    return out


def served_models(repo: Path) -> tuple[str, ...]:
    """The model names of a repository: every directory with a ``config.pbtxt`` (tritonserver loads them all)."""
    return tuple(sorted(p.parent.name for p in repo.glob("*/config.pbtxt")))


def reference_configs() -> dict[str, str]:
    """The checked-in reference configs: file name -> content, from each target's defaults (CPU: 2 cores)."""
    targets: tuple[Target, ...] = ("gpu-tensorrt", "cpu-onnx")
    return {f"{t}.config.pbtxt": render_config(t, RepoOptions.for_target(t, cores=2)) for t in targets}


def write_reference_configs(directory: Path = REFERENCE_DIR) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in reference_configs().items():
        (directory / name).write_text(text)


if __name__ == "__main__":  # regenerate triton_models/reference after changing render_config
    write_reference_configs()
