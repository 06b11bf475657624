"""Time the text model on a CUDA GPU (docs/PERFORMANCE.md, "GPU").

Two steps, because the GPU machine holds PyTorch and transformers but not this project's
other dependencies:

- ``prepare`` runs here: it writes the serving text model's weights (fp16, to travel light),
  its config, and the token ids of the bench's post texts into one folder.
- ``run`` runs on the GPU machine with nothing but torch, transformers, numpy and matplotlib.
  It times the model by batch size and sequence length (fp32, fp16, bf16; eager and replayed
  as a CUDA graph), on the posts' real lengths, and checks half precision against fp32.

    python -m training.experiments.gpu_bench prepare --model ~/.cache/modstream/current/text --out .gpu
    python -m training.experiments.gpu_bench run --bundle .gpu --out results/
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
SEQS = (16, 32, 64, 128)
POST_BATCHES = (16, 64, 256, 512)
PAD_MULTIPLE = 16
TIMED_S = 0.25  # per shape: enough replays for a stable p99 at batch 1, short at batch 512
MATMUL_N = 8192

IntArray = npt.NDArray[np.int64]


def prepare(model_dir: Path, out: Path) -> None:
    """Weights (fp16), config and post token ids, for ``run`` on a machine without this project."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from training.corpora.posts import post_splits
    from workers.config import cache_root
    from workers.model_cards import TextModelCard
    from workers.text.encoder import TextEncoder

    card = TextModelCard.load(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir / "hf", dtype=torch.float16)
    model.save_pretrained(out / "hf")
    splits = post_splits(cache_root())  # the bench's post texts (modstream.harness.bench.post_texts), in its order
    texts = [e.text for e in (*splits.test, *splits.val, *splits.train)]
    ids = TextEncoder(model_dir / "tokenizer.json", card.max_length).tokenize(texts)
    np.savez_compressed(
        out / "posts.npz",
        ids=np.concatenate([np.asarray(i, dtype=np.int32) for i in ids]),
        lengths=np.array([len(i) for i in ids], dtype=np.int32),
    )
    (out / "source.json").write_text(json.dumps({"model": card.version, "max_length": card.max_length}) + "\n")


def _percentiles(samples: Sequence[float]) -> dict[str, float]:
    ms = np.array(samples) * 1e3
    return {"p50_ms": round(float(np.percentile(ms, 50)), 4), "p99_ms": round(float(np.percentile(ms, 99)), 4)}


def _time(step: Callable[[], None], sync: Callable[[], None]) -> list[float]:
    """Per-call wall times, each call synchronised, after a warm-up."""
    for _ in range(3):
        step()
    sync()
    samples: list[float] = []
    started = time.perf_counter()
    while time.perf_counter() - started < TIMED_S or len(samples) < 20:
        t0 = time.perf_counter()
        step()
        sync()
        samples.append(time.perf_counter() - t0)
    return samples


def run(bundle: Path, out: Path, device_name: str = "cuda") -> dict[str, Any]:
    import torch
    from transformers import AutoModelForSequenceClassification

    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32
    device = torch.device(device_name)
    cuda = device.type == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    posts = np.load(bundle / "posts.npz")
    lengths = posts["lengths"].astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    post_ids = [posts["ids"][s : s + n].astype(np.int64) for s, n in zip(starts, lengths, strict=True)]

    def load(dtype: torch.dtype) -> Any:
        m = AutoModelForSequenceClassification.from_pretrained(bundle / "hf", dtype=dtype, attn_implementation="sdpa")
        return m.to(device).eval()

    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if cuda else device_name,
        "torch": torch.__version__,
        "source": json.loads((bundle / "source.json").read_text()),
        "post_tokens": {q: int(np.percentile(lengths, q)) for q in (50, 90, 99, 100)} | {"mean": float(lengths.mean())},
    }
    try:
        import onnxruntime

        result["onnxruntime_providers"] = onnxruntime.get_available_providers()
    except ImportError:
        result["onnxruntime_providers"] = None

    # The GPU's own matrix rate, the ceiling's denominator.
    peak: dict[str, float] = {}
    for name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16), ("fp32", torch.float32)):
        a = torch.randn(MATMUL_N, MATMUL_N, device=device, dtype=dtype)
        samples = _time(lambda a=a: a @ a, sync)  # type: ignore[misc]
        peak[name] = round(2 * MATMUL_N**3 / float(np.median(samples)) / 1e12, 1)
    result["matmul_tflops"] = peak

    models = {"fp32": load(torch.float32), "fp16": load(torch.float16), "bf16": load(torch.bfloat16)}
    config = models["fp32"].config
    dim, layers, hidden = config.dim, config.n_layers, config.hidden_dim
    # Multiply-adds per token: QKV and output projections, the feed-forward pair, attention over seq.
    result["gflop_per_token_at_seq"] = {
        seq: round(2 * layers * (4 * dim * dim + 2 * dim * hidden + 2 * seq * dim) / 1e9, 5) for seq in SEQS
    }

    def forward(model: Any, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            logits: torch.Tensor = model(input_ids=ids, attention_mask=mask).logits
        return logits

    def graphed(model: Any, ids: torch.Tensor, mask: torch.Tensor) -> Callable[[], None]:
        """One shape's forward captured as a CUDA graph: replays skip the per-kernel launch cost."""
        stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                forward(model, ids, mask)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph), torch.inference_mode():
            model(input_ids=ids, attention_mask=mask)
        return graph.replay

    grid: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    errors: dict[str, str] = {}
    for precision, model in models.items():
        for mode in ("eager", "graph") if cuda else ("eager",):
            key = f"{precision}/{mode}"
            grid[key] = {}
            for seq in SEQS:
                grid[key][str(seq)] = {}
                for batch in BATCHES:
                    ids = torch.randint(1000, 30000, (batch, seq), device=device)
                    mask = torch.ones_like(ids)
                    try:
                        step = graphed(model, ids, mask) if mode == "graph" else (lambda: forward(model, ids, mask))  # noqa: B023
                        samples = _time(step, sync)  # type: ignore[arg-type]
                    except Exception as exc:  # a capture that fails is a finding, not the end of the run
                        errors[f"{key}/{seq}/{batch}"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                        continue
                    stats = _percentiles(samples)
                    grid[key][str(seq)][str(batch)] = stats | {"seq_per_s": round(batch / float(np.mean(samples)), 1)}
                print(key, seq, {b: v["seq_per_s"] for b, v in grid[key][str(seq)].items()}, flush=True)
    result["grid"] = grid
    result["errors"] = errors

    # The posts' own lengths: sorted, cut into batches, each padded to a multiple of 16.
    order = np.argsort(lengths, kind="stable")

    def post_batches(size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        out_batches = []
        for s in range(0, len(order), size):
            chunk = [post_ids[i] for i in order[s : s + size]]
            width = PAD_MULTIPLE * math.ceil(max(len(c) for c in chunk) / PAD_MULTIPLE)
            ids = np.zeros((len(chunk), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            for row, c in enumerate(chunk):
                ids[row, : len(c)] = c
                mask[row, : len(c)] = 1
            out_batches.append((torch.from_numpy(ids).to(device), torch.from_numpy(mask).to(device)))
        return out_batches

    posts_per_s: dict[str, dict[str, float]] = {}
    for precision in ("fp32", "fp16", "bf16"):
        posts_per_s[precision] = {}
        for size in POST_BATCHES:
            batches = post_batches(size)
            for ids, mask in batches[:3]:
                forward(models[precision], ids, mask)
            sync()
            started = time.perf_counter()
            for ids, mask in batches:
                forward(models[precision], ids, mask)
            sync()
            posts_per_s[precision][str(size)] = round(len(order) / (time.perf_counter() - started), 1)
        print("posts/s", precision, posts_per_s[precision], flush=True)
    result["posts_per_s_eager"] = posts_per_s

    # Half precision against fp32 on every post (same fp16-stored weights in both).
    probs: dict[str, npt.NDArray[np.float64]] = {}
    for precision, model in models.items():
        chunks = [
            torch.softmax(forward(model, ids, mask).float(), -1)[:, 1].cpu().numpy() for ids, mask in post_batches(256)
        ]
        probs[precision] = np.concatenate(chunks).astype(np.float64)
    result["parity_vs_fp32"] = {
        p: {
            "max_abs_diff": float(np.abs(probs[p] - probs["fp32"]).max()),
            "flips_at_0.5": int(((probs[p] >= 0.5) != (probs["fp32"] >= 0.5)).sum()),
            "posts": len(order),
        }
        for p in ("fp16", "bf16")
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, out / "gpu_throughput.png")
    return result


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    half = "fp16/graph" if result["grid"].get("fp16/graph") else "fp16/eager"
    for ax, key in zip(axes, ("fp32/eager", half), strict=True):
        for seq, by_batch in result["grid"][key].items():
            batches = [int(b) for b in by_batch]
            ax.plot(batches, [v["seq_per_s"] for v in by_batch.values()], marker="o", label=f"seq {seq}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.set_title(f"{key}, {result['device']}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("sequences / s")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("run")
    r.add_argument("--bundle", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--device", default="cuda", help="torch device (cpu only to rehearse)")
    args = parser.parse_args(argv)
    if args.command == "prepare":
        prepare(args.model, args.out)
    else:
        run(args.bundle, args.out, args.device)


if __name__ == "__main__":
    main()
