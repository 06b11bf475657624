"""A promotion's cost to the run that holds it, with and without model.py compiled into its version
directory (docs/journal/2026-11-27-performance-rounds.md, tenth round).

Usage: ``python tools/perf/swap_probe.py BUNDLE PAIRS [--stub-writes-bytecode]``: PAIRS of 20 s pipeline runs at the
model-only rate, a plain run then one that promotes a copy of the text model a quarter of the way in,
each between two model-only ceilings, as ``modstream bench`` runs its hot-swap lever.
``--stub-writes-bytecode`` brings back what the ninth round measured: no bytecode in the version
directories, so the Python stub writes its own after Triton has stamped the version.
"""

import json
import py_compile
import shutil
import sys
from functools import partial
from pathlib import Path

from rich.console import Console

from modstream.harness.bench import HotSwap, Probe, paired, relabel
from modstream.serving.artifacts import Models
from modstream.serving.triton_repo import build_repo
from modstream.stack.local import LocalStack

bundle, pairs_n = Path(sys.argv[1]).resolve(), int(sys.argv[2])
old = "--stub-writes-bytecode" in sys.argv[3:]
models = Models(bundle / "text", bundle / "decision", bundle)
out = Path("out/swap-probe")
shutil.rmtree(out, ignore_errors=True)
out.mkdir(parents=True)
repo = build_repo("cpu-embedded", models.text, out / "triton_repo")
if old:
    py_compile.compile = lambda *args, **kwargs: None  # type: ignore[assignment]  # add_version compiles nothing
    for cache in repo.rglob("__pycache__"):
        shutil.rmtree(cache)
stack = LocalStack(out / "stack", repo, console=Console(stderr=True))
with stack as ep:
    probe = Probe.on(models, ep, stack, out)
    swap = HotSwap.prepare(models, repo, ep, out)
    at_s = len(probe.steady) / probe.rate / 4
    run = partial(probe.kb.run, model_dir=swap.link, triton_repo=repo)
    runs = []
    for i in range(pairs_n):
        runs.append(partial(run, relabel(probe.steady, f"plain{i}-")))
        runs.append(partial(run, relabel(probe.steady, f"swap{i}-"), during=swap.promote_other, at_s=at_s))
    for n, p in enumerate(paired(runs, probe.ceiling)):
        print(json.dumps({"run": "swap" if n % 2 else "plain", "ratio": round(p.ratio, 3), "lost": p.phase.lost}))
    starts = (out / "stack" / "triton.log").read_text().count("TRITONBACKEND_ModelInstanceInitialize")
    print("python stub instances started", starts, "bytecode by the stub" if old else "bytecode compiled in advance")
