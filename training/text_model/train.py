"""The content model: fine-tune a small DistilBERT on CPU, export to ONNX, evaluate.

The saved model is always a DistilBERT sequence classifier with the fixed serving
contract: inputs ``input_ids``/``attention_mask`` (int64 ``[batch, seq]``, dynamic
axes), output ``logits`` (float32 ``[batch, 2]``, index 1 = spam). Tokenisation for
training, evaluation and scoring goes through ``workers.text.encoder.TextEncoder``, the
worker's own encoder, so what is measured here is what production computes.

This module is the training run; the base model comes from :mod:`training.text_model.base`,
the export from :mod:`training.text_model.export` and scoring from :mod:`training.text_model.scoring`.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
import shutil
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from rich.progress import TaskID
from transformers import PreTrainedModel, get_linear_schedule_with_warmup

from training import plots
from training.calibration import ece, fit_temperature
from training.corpora.labelled import Example, Splits, data_hash, load_labeled, split
from training.corpora.posts import data_card, post_splits
from training.text_model.base import init_model
from training.text_model.export import export_onnx, parity, quantize_int8
from training.text_model.fusion import Fusion
from training.text_model.ngram import train_ngram
from training.text_model.scoring import (
    SCORE_BATCH,
    THRESHOLD,
    Encoded,
    FloatArray,
    cpu_count,
    length_batches,
    metrics,
    progress_bar,
    score_texts,
    session,
)
from workers.model_cards import CARD_FILE, TextModelCard
from workers.text.encoder import TextEncoder, spam_prob
from workers.text.language import judged_languages, language_counts
from workers.text.ngram import NGRAM_FILE, NgramModel
from workers.text.normalise import NORMALISER_VERSION

# Defaults for the stock run on the default posts (training.corpora.posts): about 10 min on 2 idle cores.
DEFAULT_EPOCHS = 2
DEFAULT_MAX_LENGTH = 64
DEFAULT_SEED = 13
DEFAULT_BATCH_SIZE = 32
DEFAULT_LR = 1e-4

PARITY_TOLERANCE = 1e-3
INT8_MAX_F1_DROP = 0.005
TRAIN_EVAL_SAMPLE = 1000
CALIBRATION_TEXTS = 256  # training texts that set the int8 activation scales
DATA_CARD_FILE = "data_card.json"
# Evaluated with every model, never trained on: the reference examples and casual posts.
EVAL_SETS = {name: Path(__file__).parents[1] / "data" / f"{name}.csv" for name in ("reference", "casual")}


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
            scores[idx] = spam_prob(model(input_ids=ids, attention_mask=mask).logits.float().numpy())
    model.train()
    return scores


def _files_hash(*paths: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
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
    balanced: bool = False,
) -> dict[str, Any]:
    """AdamW + linear warmup/decay; evaluates val F1 ``evals_per_epoch`` times an epoch and
    restores the best weights. Stops after ``patience`` evaluations without improvement.
    ``balanced``: each class's loss weighted by the inverse of its frequency."""
    rng = np.random.default_rng(seed)
    steps_per_epoch = -(-len(train_labels) // batch_size)
    total = steps_per_epoch * epochs
    eval_every = max(1, steps_per_epoch // evals_per_epoch)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=lr, weight_decay=0.01)
    schedule = get_linear_schedule_with_warmup(optimizer, int(0.06 * total), total)

    counts = np.bincount(train_labels, minlength=2)
    weight = torch.tensor(len(train_labels) / (2 * counts), dtype=torch.float32) if balanced else None

    def autocast() -> Any:
        return torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else nullcontext()

    best: dict[str, Any] = {"f1": -1.0, "step": 0, "state": None}
    history: list[dict[str, float]] = []
    stale = 0
    step = 0
    model.train()

    with progress_bar() as progress:
        task: TaskID = progress.add_task("Fine-tuning", total=total, info="")
        running = None
        for idx in (b for _ in range(epochs) for b in length_batches(train.lengths, batch_size, rng)):
            ids, mask = map(torch.from_numpy, train.batch(idx))
            with autocast():
                logits = model(input_ids=ids, attention_mask=mask).logits
            loss: torch.Tensor = torch.nn.functional.cross_entropy(
                logits.float(), torch.from_numpy(train_labels[idx]), weight=weight
            )
            loss.backward()  # type: ignore[no-untyped-call]
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


def scale_classifier(model: PreTrainedModel, factor: float) -> None:
    """Multiply the classifier's output logits by ``factor`` (1/T) by scaling its last linear layer."""
    head = model.get_submodule("classifier")
    assert isinstance(head, torch.nn.Linear)
    with torch.no_grad():
        head.weight.mul_(factor)
        if head.bias is not None:
            head.bias.mul_(factor)


def _calibrate(model: PreTrainedModel, val: Encoded, labels: npt.NDArray[np.int64]) -> dict[str, float]:
    """Temperature-scale the classifier on the validation split (fp32, as served); returns the card's report."""
    before = _torch_scores(model, val, nullcontext)
    temperature = fit_temperature(before, labels)
    scale_classifier(model, 1 / temperature)
    after = _torch_scores(model, val, nullcontext)
    return {"temperature": temperature, "val_ece_before": ece(labels, before), "val_ece_after": ece(labels, after)}


def eval_sets() -> dict[str, list[Example]]:
    return {name: load_labeled(path, min_per_class=0) for name, path in EVAL_SETS.items()}


def _export_and_evaluate(
    model: PreTrainedModel, encoder: TextEncoder, splits: Splits, out: Path, seed: int, int8: bool = True
) -> dict[str, Any]:
    """Export fp32 (and, with ``int8``, int8) ONNX, check parity, score every split and evaluation set
    with each and pick the serving file; returns the card's evaluation fields."""
    fp32_path = export_onnx(model, out / "model.onnx")
    sessions = {"fp32": session(fp32_path, threads=2)}
    held_out = "test" if splits.test else "val"  # without --test, --data keeps no test split
    # Parity on texts spread over the length range, so the batch really contains padding.
    by_length = sorted((e.text for e in getattr(splits, held_out)), key=len)
    max_diff = parity(model, sessions["fp32"], encoder, by_length[:: max(1, len(by_length) // SCORE_BATCH)])
    if max_diff > PARITY_TOLERANCE:
        raise RuntimeError(f"ONNX export mismatch: max |logit diff| {max_diff:.2e} > {PARITY_TOLERANCE:.0e}")
    int8_path = out / "model.int8.onnx"
    if int8:
        calibration = random.Random(seed).sample(splits.train, min(len(splits.train), CALIBRATION_TEXTS))
        quantize_int8(fp32_path, int8_path, encoder, [e.text for e in calibration])
        sessions["int8"] = session(int8_path, threads=2)

    # Train metrics on a sample: scoring all of it twice would add ~100 s to a 10-minute run.
    # Test comes last, so its timing (for the int8 speedup) runs on a warmed-up session.
    named = {
        "train": random.Random(seed).sample(splits.train, min(len(splits.train), TRAIN_EVAL_SAMPLE)),
        "val": splits.val,
        **eval_sets(),
        **({"test": splits.test} if splits.test else {}),
    }
    split_metrics: dict[str, dict[str, Any]] = {precision: {} for precision in sessions}
    seconds: dict[str, float] = {}
    test_scores: dict[str, FloatArray] = {}
    for precision, sess in sessions.items():
        for name, part in named.items():
            texts = [e.text for e in part]
            started = time.perf_counter()
            scores = score_texts(sess, encoder, texts, show_progress=True)
            if name == held_out:
                seconds[precision] = time.perf_counter() - started
            test_scores[f"{precision}/{name}"] = scores
            split_metrics[precision][name] = metrics([e.label for e in part], scores)

    kept = None
    if int8:
        f1_drop = split_metrics["fp32"][held_out]["f1"] - split_metrics["int8"][held_out]["f1"]
        kept = {
            "test_f1_fp32": split_metrics["fp32"][held_out]["f1"],
            "test_f1_int8": split_metrics["int8"][held_out]["f1"],
            "f1_drop": f1_drop,
            "max_f1_drop": INT8_MAX_F1_DROP,
            "kept": f1_drop <= INT8_MAX_F1_DROP,
            "speedup": seconds["fp32"] / seconds["int8"],
            "test_seconds_fp32": seconds["fp32"],
            "test_seconds_int8": seconds["int8"],
            "ort_threads": 2,
        }
    serving, precision = (int8_path, "int8") if kept and kept["kept"] else (fp32_path, "fp32")
    file_bytes = {path.name: path.stat().st_size for path in (fp32_path, int8_path) if path.exists()}
    if serving != int8_path:
        int8_path.unlink(missing_ok=True)

    # The fusion learns from validation scores; test and the evaluation sets only measure it.
    ngram = NgramModel.load(out)
    ngram_scores = {name: ngram.spam_prob([e.text for e in part]) for name, part in named.items()}
    labels = {name: [e.label for e in part] for name, part in named.items()}
    fusion = Fusion.fit(test_scores[f"{precision}/val"], ngram_scores["val"], labels["val"])
    fused = {name: fusion.spam_prob(test_scores[f"{precision}/{name}"], ngram_scores[name]) for name in named}

    # The plots cover everything held out: the test split and the evaluation sets.
    shown = [held_out, *EVAL_SETS]
    y = [label for name in shown for label in labels[name]]
    scores = np.concatenate([test_scores[f"{precision}/{name}"] for name in shown])
    title = f"Text model, {' + '.join(shown)}"
    plots.pr_curve(
        y,
        scores,
        out / "pr_curve.png",
        title=f"{title} ({serving.name})",
        name="transformer",
        others={
            "n-gram": np.concatenate([ngram_scores[name] for name in shown]),
            "fused": np.concatenate([fused[name] for name in shown]),
        },
    )
    plots.confusion(y, (scores >= THRESHOLD).astype(int), out / "confusion.png", title=title)
    fused_shown = np.concatenate([fused[name] for name in shown])
    plots.confusion(y, (fused_shown >= THRESHOLD).astype(int), out / "confusion_fused.png", title=f"{title}, fused")
    held = labels[held_out]
    curves: dict[str, npt.NDArray[Any]] = {
        "transformer": test_scores[f"{precision}/{held_out}"],
        "n-gram": ngram_scores[held_out],
        "fused": fused[held_out],
    }
    plots.reliability(
        {name: (held, p) for name, p in curves.items()},
        out / "reliability.png",
        title=f"Calibration on the {held_out} split",
    )
    return {
        # Both text signals the decision model reads: a new n-gram model is a new text model version.
        "version": _files_hash(serving, out / NGRAM_FILE)[:12],
        "serving_model": serving.name,
        "file_bytes": file_bytes,
        "metrics": split_metrics,
        "int8": kept,
        "parity_max_abs_diff": max_diff,
        "fusion": fusion.model_dump() | {"metrics": {name: metrics(labels[name], fused[name]) for name in named}},
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
    balanced: bool = False,
    test: Path | None = None,
    int8: bool = True,
) -> TextModelCard:
    """Fine-tune, export and evaluate the content model into ``out``; returns the card.

    ``data``: a labelled CSV/JSONL/Parquet file, split 90/10 into train and validation
    (early stopping) when ``test`` (an external labelled file) is given, else 80/10/10;
    or None for the default posts (:mod:`training.corpora.posts`, fetched into ``cache``).
    ``bf16``: bfloat16 autocast for training (None = when the CPU supports it natively;
    ~1.5x faster on AVX512-BF16/AMX). Exports are always float32.
    ``freeze_embeddings``: keep the word-embedding matrix fixed. It is half the
    parameters; its dense gradient and AdamW update cost ~25% of a CPU step, and a
    few thousand examples barely move it anyway.
    ``balanced``: weight the loss by inverse class frequency.
    ``int8``: also quantize, and serve the int8 copy where it loses at most INT8_MAX_F1_DROP of F1;
    False serves fp32 without trying (a model only scored in process, where calibrating the int8
    scales would take as long as the fine-tuning).
    """
    started = time.perf_counter()
    out = Path(out)
    _seed_everything(seed)
    torch.set_num_threads(cpu_count())
    if data is None:
        splits = post_splits(cache, seed)
    elif test is None:
        splits = split(load_labeled(data), seed)
    else:
        own = split(load_labeled(data), seed, test_fraction=0.0)
        splits = Splits(own.train, own.val, load_labeled(test, min_per_class=0))
    examples = splits.train + splits.val + splits.test
    languages = language_counts((e.text, e.label) for e in splits.train)
    init = init_model(base)
    model = init.model
    bf16 = _bf16_supported() if bf16 is None else bf16

    out.mkdir(parents=True, exist_ok=True)
    (out / CARD_FILE).unlink(missing_ok=True)  # the card marks a complete model dir; written last
    hf_dir = out / "hf"
    init.tokenizer.save_pretrained(hf_dir)
    shutil.copyfile(hf_dir / "tokenizer.json", out / "tokenizer.json")
    encoder = TextEncoder(out / "tokenizer.json", max_length)
    if data is None:
        (out / DATA_CARD_FILE).write_text(json.dumps(data_card(splits), indent=2) + "\n")
    ngram_started = time.perf_counter()
    ngram = train_ngram(splits, out, seed) | {"train_seconds": time.perf_counter() - ngram_started}

    model.get_input_embeddings().weight.requires_grad_(not freeze_embeddings)
    train_started = time.perf_counter()
    val, val_labels = Encoded.of(encoder, [e.text for e in splits.val]), np.array([e.label for e in splits.val])
    loop = _train_loop(
        model,
        Encoded.of(encoder, [e.text for e in splits.train]),
        np.array([e.label for e in splits.train], dtype=np.int64),
        val,
        val_labels,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        seed=seed,
        evals_per_epoch=evals_per_epoch,
        patience=patience,
        bf16=bf16,
        balanced=balanced,
    )
    train_seconds = time.perf_counter() - train_started
    calibration = _calibrate(model, val, val_labels)
    model.save_pretrained(hf_dir)
    evaluation = _export_and_evaluate(model, encoder, splits, out, seed, int8)
    evaluation["file_bytes"]["hf"] = _dir_size(hf_dir)

    card = TextModelCard(
        version=evaluation.pop("version"),
        serving_model=evaluation.pop("serving_model"),
        base=init.name,
        architecture=type(model).__name__,
        data=str(data) if data else "posts (see data_card.json)",
        data_hash=data_hash(examples),
        split_sizes={"train": len(splits.train), "val": len(splits.val), "test": len(splits.test)},
        ngram=ngram,
        param_count=sum(p.numel() for p in model.parameters()),
        max_length=max_length,
        normaliser=NORMALISER_VERSION,
        languages=judged_languages(languages),
        language_counts=languages,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        seed=seed,
        bf16_training=bf16,
        frozen_word_embeddings=freeze_embeddings,
        balanced_loss=balanced,
        threshold=THRESHOLD,
        **loop,
        calibration=calibration,
        **evaluation,
        train_seconds=train_seconds,
        total_seconds=time.perf_counter() - started,
        created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    )
    card.save(out)
    return card
