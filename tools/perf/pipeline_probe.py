"""The bench's paired pipeline step alone, on any bundle (docs/journal/2026-11-27-performance-rounds.md, eighth round).

Usage: ``python tools/perf/pipeline_probe.py BUNDLE RUNS [setting=value ...]``: RUNS pipeline runs of 20 s
at the model-only rate, each between two model-only ceilings, as ``modstream bench`` step 3 runs them.
Working files go to ``out/probe``.
"""

import json
import sys
from functools import partial
from pathlib import Path

from rich.console import Console

from modstream.harness.bench import Probe, median_pair, paired, relabel
from modstream.serving.artifacts import Models
from modstream.serving.triton_repo import build_repo
from modstream.stack.local import LocalStack
from workers.model_cards import TextModelCard

bundle, runs = Path(sys.argv[1]).resolve(), int(sys.argv[2])
overrides = dict(a.split("=", 1) for a in sys.argv[3:])
models = Models(bundle / "text", bundle / "decision", bundle)
card = TextModelCard.load(models.text)
out = Path("out/probe")
out.mkdir(parents=True, exist_ok=True)
repo = build_repo("cpu-embedded", models.text, out / "triton_repo")
stack = LocalStack(out / "stack", repo, console=Console(stderr=True))
with stack as ep:
    probe = Probe.on(models, ep, stack, out)
    steady = probe.steady
    pairs = paired([partial(probe.kb.run, relabel(steady, f"p{i}-"), **overrides) for i in range(runs)], probe.ceiling)
    for p in pairs:
        per_post_ms = {k: round(v / len(steady) * 1e3, 3) for k, v in p.phase.cpu_s.items()}
        print(json.dumps(p.to_json() | {"cpu_ms_per_post": per_post_ms, "lost": p.phase.lost}))
    print("median ratio", round(median_pair(pairs).ratio, 3), "serving", card.serving_model)
