"""``modstream bench-redis``: the enrichment round trip per batch on one Redis against a Redis Cluster.

Both servers are started here on loopback (one ``redis-server``; six for the cluster), so
the numbers compare the client and server work, not a network. Each batch is what the
worker's enrich stage sends: the profile hashes of its posts and the stream-kept signals
script (one call on one node; one per slot the batch touches on the cluster).
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis
from redis.cluster import RedisCluster

from modstream.stack.local import HOST, REDIS_HINT, StackError, free_port
from modstream.stack.redis_cluster import LocalRedisCluster
from workers.adapters.redis_layout import Layout
from workers.adapters.redis_store import RedisStore, signal_calls
from workers.records import InMsg, Post
from workers.stages.enrich import profile_keys
from workers.stages.validate import validate
from workers.state import signals
from workers.state.keyspace import Keyspace

KS = Keyspace("bench:")
USERS, DOMAINS, IPS = 5000, 500, 2000
WARMUP = 5  # batches before timing: connections made, the script loaded


def posts(n: int, rng: random.Random, start: float) -> list[Post]:
    """``n`` posts from a platform-like mix: repeat users, shared domains and IPs, some campaigns."""
    raw = []
    for i in range(n):
        user, domain = rng.randrange(USERS), rng.randrange(DOMAINS)
        text = f"offer {rng.randrange(50)} buy now" if rng.random() < 0.3 else f"post {rng.random()} about my day"
        event = {
            "post_id": f"b{start:.0f}-{i}",
            "user_id": f"u{user}",
            "created_at": datetime.fromtimestamp(start + i, UTC).isoformat(),
            "text": f"{text} https://s{domain % 7}.d{domain}.example/p/{rng.randrange(10_000)}",
            "ip": f"10.{rng.randrange(8)}.{rng.randrange(250)}.{rng.randrange(IPS) % 250}",
            "platform": "web",
        }
        raw.append(InMsg("posts", 0, i, None, json.dumps(event).encode(), 0.0))
    valid, failures = validate(raw)
    assert not failures
    return valid


async def measure(store: RedisStore, batches: int, size: int, warmup: int = WARMUP) -> dict[str, float]:
    rng = random.Random(7)
    start = datetime(2026, 11, 23, tzinfo=UTC).timestamp()
    wall, cpu = [], []
    for b in range(warmup + batches):
        batch = posts(size, rng, start + b * size)
        keys = list(dict.fromkeys(k for p in batch for k in profile_keys(p, KS) if k is not None))
        plans = signals.plans(batch, KS, 600)
        t, c = time.perf_counter(), time.process_time()
        await store.enrich(keys, plans)
        if b >= warmup:
            wall.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
    wall.sort()
    return {
        "p50_ms": 1000 * statistics.median(wall),
        "p90_ms": 1000 * wall[int(0.9 * (len(wall) - 1))],
        "mean_ms": 1000 * statistics.fmean(wall),
        "client_cpu_ms": 1000 * statistics.fmean(cpu),
    }


def _single_node(state: Path) -> tuple[subprocess.Popen[bytes], str]:
    server = shutil.which("redis-server")
    if server is None:
        raise StackError(REDIS_HINT)
    port = free_port()
    argv = [server, "--bind", HOST, "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(state)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    client = redis.Redis(host=HOST, port=port)
    deadline = time.monotonic() + 20
    while True:
        try:
            client.ping()
            break
        except (redis.RedisError, OSError):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise StackError("redis-server did not start") from None
            time.sleep(0.05)
    client.close()
    return proc, f"redis://{HOST}:{port}/0"


def run(batches: int, size: int, shards: int) -> dict[str, Any]:
    """Per-batch enrichment timings on one node and on a three-primary cluster."""
    results: dict[str, Any] = {"batch_size": size, "batches": batches, "signal_shards": shards}
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = _single_node(Path(tmp))
        try:
            results["single_node"] = asyncio.run(_measure(url, Layout(), batches, size))
        finally:
            proc.terminate()
            proc.wait(10)
        with LocalRedisCluster(Path(tmp) / "cluster") as cluster_url:
            results["cluster"] = asyncio.run(_measure(cluster_url, Layout(shards), batches, size))
            results["cluster_script_calls_per_batch"] = _calls_per_batch(Layout(shards), size)
    return results


async def _measure(url: str, layout: Layout, batches: int, size: int) -> dict[str, float]:
    store = RedisStore(url, 5.0, layout)
    before = used_memory(url, layout)
    try:
        timings = await measure(store, batches, size)
    finally:
        await store.close()
    # What the signal state costs per post counted (warm-up batches included; no profiles seeded).
    return timings | {"bytes_per_post": (used_memory(url, layout) - before) / ((batches + WARMUP) * size)}


def used_memory(url: str, layout: Layout) -> int:
    """Bytes in use over every primary."""
    if not layout.cluster:
        with redis.Redis.from_url(url) as client:
            return int(client.info("memory")["used_memory"])
    cluster = RedisCluster.from_url(url)
    try:
        per_node = cluster.info("memory", target_nodes=RedisCluster.PRIMARIES)
        return sum(int(info["used_memory"]) for info in per_node.values())
    finally:
        cluster.close()


def _calls_per_batch(layout: Layout, size: int) -> int:
    batch = posts(size, random.Random(7), 0)
    plans = signals.plans(batch, KS, 600)
    return len(signal_calls(plans, layout).by_group)


def plot(results: dict[str, Any], out: Path) -> None:
    """``redis_cluster.png``: per-batch wall time and client CPU, one node against the cluster."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 3.4))
    ax = fig.add_subplot()
    metrics = [("p50_ms", "round trip p50"), ("p90_ms", "round trip p90"), ("client_cpu_ms", "client CPU")]
    width = 0.38
    for offset, (server, label, color) in enumerate(
        (("single_node", "one node", "#48c"), ("cluster", f"cluster ({results['signal_shards']} shards)", "#c44"))
    ):
        values = [results[server][m] for m, _ in metrics]
        xs = [i + (offset - 0.5) * width for i in range(len(metrics))]
        ax.bar(xs, values, width, label=label, color=color)
        for x, v in zip(xs, values, strict=True):
            ax.text(x, v, f"{v:.0f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(metrics)), [name for _, name in metrics])
    ax.set_ylabel(f"ms per {results['batch_size']}-post batch")
    ax.set_title("Enrichment per batch: one Redis vs a three-primary cluster", fontsize=10)
    ax.legend()
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "redis_cluster.png", dpi=120)
