"""The bench's latency step alone (``modstream bench`` step 6), on the default bundle, with each hop's
share (``modstream.harness.bench.HOPS``).

Usage: ``python tools/perf/latency_probe.py [--bundle DIR] RATE SECONDS [setting=value ...]``: posts at
RATE a second for SECONDS through a worker with the shipped settings and the given overrides, on the
default bundle or DIR's; prints the end-to-end p50 and p99 and each hop's. The posts are the bench's:
spread over a steady pipeline run's (the model-only rate's 20 s). Working files go to
``out/latency-probe``.
"""

import json
import sys
from pathlib import Path

from rich.console import Console

from modstream.harness.bench import Probe, evenly, percentile_ms, percentiles
from modstream.harness.bench_cascade import first_stage_share
from modstream.serving.artifacts import Models, ensure_models
from modstream.serving.triton_repo import build_repo
from modstream.stack.local import LocalStack

args = sys.argv[1:]
bundle = Path(args[1]).resolve() if args[:1] == ["--bundle"] else None
if bundle:
    args = args[2:]
rate, seconds = float(args[0]), float(args[1])
overrides = dict(a.split("=", 1) for a in args[2:])
console = Console(stderr=True)
models = Models(bundle / "text", bundle / "decision", bundle) if bundle else ensure_models(console)
out = Path("out/latency-probe")
out.mkdir(parents=True, exist_ok=True)
repo = build_repo("cpu-embedded", models.text, out / "triton_repo")
stack = LocalStack(out / "stack", repo, console=console)
with stack as ep:
    probe = Probe.on(models, ep, stack, out)
    # Twice: the first run also warms Triton (each new input shape's first run is slow), the second is the figure.
    for run in ("warm-up", "measured"):
        phase = probe.kb.run(evenly(probe.steady, int(rate * seconds), f"lat-{run}"), rate=rate, **overrides)
        e2e = {f"p{q}_ms": percentile_ms(phase, q) for q in (50, 99)}
        cpu = {k: round(v / (rate * seconds) * 1e3, 3) for k, v in phase.cpu_s.items()}
        share = round(first_stage_share(phase.verdicts), 3)
        hops = percentiles(phase.hops_ms)
        # Degraded verdicts too: a figure measured on them (a Triton request refused) is not the pipeline's.
        print(
            json.dumps(
                {
                    "run": run,
                    "e2e": e2e,
                    "by_hop": hops,
                    "cpu_ms_per_post": cpu,
                    "first_stage_share": share,
                    "degraded": phase.degraded,
                }
            )
        )
