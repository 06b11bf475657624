"""``modstream bench``: the pipeline measured against the hardware limit, in one run.

Every phase uses the same texts on the same machine:

1. model-only   the serving ONNX model in-process, best layout and batch size: the ceiling
2. triton-only  the same model through Triton gRPC, several requests in flight
3. pipeline     Kafka -> worker process -> Kafka on the embedded stack, three steady runs
                (STEADY_S, each post its own text); again with a
                challenger decision model in shadow (the serving one, so both decide alike: its
                cost only). Each run sits between two model-only runs at the best layout and batch
                size, and its ratio is over their mean, so the VM's drift cancels (Ceiling)
4. naive        every lever off, as the reference article served its model: the fp32 model
                (one instance using every core), one post per batch, one Triton request
                per post, a synchronous produce per verdict; also reported with the int8 model
5. short-circuit posts with banned domains only
6. latency      end-to-end p50/p99 at 50% of the measured pipeline maximum
7. exactly-once the pipeline and latency phases with one Kafka transaction per batch; a bundle
                with another text model promoted mid-run, throughput (a run long enough to hold the
                whole promotion, between two model-only runs) and latency
8. signals      what counting the stream-kept signals and logging the feature row cost per
                post (modstream/harness/bench_signals.py)
9. cascade      the cascade as shipped against the full pipeline (every post scored) on the same
                labelled posts, a social mix (10% spam) and a spam-heavy one (50%): throughput, the
                share that reached the transformer, the judgement and the flips, between two runs
                and on the very same rows (modstream/harness/bench_cascade.py)

The pipeline phases run the worker as shipped: with the cascade, whose first stage decides what it
is sure of without the transformer (the share is ``details.pipeline_first_stage_share``).

The text-score cache is off (every post is scored) except in the campaign lever, and the throughput
runs never repeat a text (copies in one batch are scored once).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from confluent_kafka import Producer
from pydantic import SecretStr
from rich.console import Console

from modstream.harness.bench_cascade import MIXES, REAL, MixResult, first_stage_share, run_mix
from modstream.harness.bench_cascade import plot as cascade_plot
from modstream.harness.bench_signals import SignalCost, signal_cost
from modstream.harness.demo import seeded
from modstream.harness.traffic import Collector, Record, produce_all
from modstream.loop.promotion import TextServing, promote
from modstream.serving.artifacts import Models, ensure_models
from modstream.serving.triton_repo import MODEL_NAME, RepoOptions, build_repo
from modstream.stack.local import EMBEDDED_SESSION_TIMEOUT_S, Endpoints, LocalStack, create_topics, group_members
from schemas import Verdict
from training.corpora.labelled import Example
from training.corpora.posts import post_splits
from training.corpora.spamassassin import load_spamassassin
from training.simulator import Simulator, World
from workers.adapters.triton import TritonControl, TritonTextModel
from workers.config import Settings, cache_root
from workers.model_cards import TextModelCard
from workers.stages.decide import DecisionModel
from workers.stages.score import ScoreCache, TextScorer
from workers.state.keyspace import Keyspace
from workers.text.encoder import IntArray, TextEncoder, pad
from workers.text.ngram import NgramModel

CLK = os.sysconf("SC_CLK_TCK")
BATCH_SIZES = (1, 8, 16, 32, 64, 128)
PIPELINE_RUNS = 3  # the pipeline ratio is their median
# A throughput run lasts this long at the ceiling's rate (at least ``posts``, at most one post per
# corpus text): what a steady stream sees, the first batch (validated and tokenised before Triton
# has work) and the last (fewer requests than cores) once, not every 4 s as in a 2,000-post run
# (docs/journal/2026-11-27-performance-rounds.md, sixth round). Every post has its own text:
# copies in one batch would be scored once, and the model would look cheaper than it is.
STEADY_S = 20.0
LATENCY_S = 15.0  # each paced latency run
# The latency phase's figures are its median run's by p99: one 15 s run's p99 read 216–328 ms at one
# rate on one machine (docs/journal/2026-11-29-requests-cut-at-jumps.md).
LATENCY_RUNS = 3
NAIVE_MODEL = "spam_text_naive"
REDIS_PREFIX = "modstream-bench:"  # the keys the bench seeds and its workers read; a run's own below it


CpuSeconds = dict[str, float]  # service -> CPU seconds spent during a phase


@dataclass
class BenchDetails:
    """``bench.json``'s ``details``: what each phase measured beyond the headline rates."""

    serving_model: str
    max_length: int
    cpus: int | None
    model_only_best: dict[str, str | int] = field(default_factory=dict)  # layout and batch size
    steady_run_posts: int = 0  # the pipeline, shadow and exactly-once throughput runs' length (STEADY_S)
    model_only_by_batch: dict[str, dict[str, float]] = field(default_factory=dict)
    model_only_fp32_posts_per_s: float | None = None  # measured when the serving model is int8
    model_only_email_posts_per_s: float | None = None  # the same model on e-mail-length texts
    ngram_posts_per_s_one_core: float | None = None  # the worker-side n-gram model's own cost
    triton_in_flight: dict[int, float] = field(default_factory=dict)  # written as triton_in_flight_<n>
    pipeline_cpu_s: CpuSeconds = field(default_factory=dict)
    pipeline_first_stage_share: float = 0.0  # of the pipeline's verdicts, decided without the transformer
    # Each pipeline run with the model-only ceiling measured around it (Paired.to_json).
    pipeline_runs: list[dict[str, float]] = field(default_factory=list)
    pipeline_with_shadow_posts_per_s: float = 0.0
    pipeline_with_shadow_cpu_s: CpuSeconds = field(default_factory=dict)
    naive_int8_posts_per_s: float = 0.0
    short_circuit_cpu_s: CpuSeconds = field(default_factory=dict)
    latency_offered_posts_per_s: float = 0.0
    latency_runs: list[dict[str, float]] = field(default_factory=list)  # each run's p50_ms, p99_ms
    # These two: the run with the median p99 (LATENCY_RUNS), whose p50 and p99 are the headline ones.
    latency_cpu_s: CpuSeconds = field(default_factory=dict)
    latency_by_hop: dict[str, dict[str, float]] = field(default_factory=dict)  # HOPS: p50_ms, p99_ms each
    # Exactly-once: the pipeline and the latency phases again with one transaction per batch.
    exactly_once_posts_per_s: float = 0.0
    exactly_once_p50_ms: float = 0.0
    exactly_once_p99_ms: float = 0.0
    exactly_once_latency_by_hop: dict[str, dict[str, float]] = field(default_factory=dict)
    # A bundle with another text model promoted mid-run (Triton loads it, the worker switches
    # between batches): throughput, p99 at the latency phase's load, and the verdicts per text model.
    hot_swap_posts: int = 0  # the throughput run's length: a steady run (STEADY_S)
    hot_swap_posts_per_s: float = 0.0
    hot_swap_p99_ms: float = 0.0
    hot_swap_promote_s: list[float] = field(default_factory=list)  # each promotion's wall time, load and drain
    hot_swap_verdicts_by_text: list[dict[str, int]] = field(default_factory=list)
    lost_by_phase: dict[str, int] = field(default_factory=dict)
    degraded_by_phase: dict[str, int] = field(default_factory=dict)  # Phase.degraded
    signals: SignalCost | None = None
    cascade: dict[str, MixResult] = field(default_factory=dict)  # by mix (bench_cascade.MIXES, REAL)
    ratios: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for key, value in asdict(self).items():
            if key == "triton_in_flight":
                out |= {f"triton_in_flight_{n}": rate for n, rate in value.items()}
            elif value is not None:
                out[key] = value
        return out


@dataclass
class BenchResult:
    posts: int
    lost: int = 0
    model_only_posts_per_s: float = 0.0
    triton_posts_per_s: float = 0.0
    pipeline_posts_per_s: float = 0.0
    naive_posts_per_s: float = 0.0
    short_circuit_posts_per_s: float = 0.0
    cascade_social_posts_per_s: float = 0.0  # the cascade on the social mix; the full pipeline's beside it
    full_social_posts_per_s: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    details: BenchDetails | None = None

    def summary(self) -> dict[str, object]:
        return {k: v for k, v in self.__dict__.items() if k != "details"}


def cpu_seconds(pgid: int) -> float:
    total = 0
    for pid in group_members(pgid):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime + stime of this process
    return total / CLK


def redis_cpu_seconds(url: str) -> float:
    """Redis's CPU seconds: every node's, for a cluster."""
    import redis
    from redis.cluster import RedisCluster

    client = redis.Redis.from_url(url)
    if client.info("cluster").get("cluster_enabled"):
        nodes = RedisCluster.from_url(url).info("cpu", target_nodes=RedisCluster.ALL_NODES)
        return sum(float(i["used_cpu_user"]) + float(i["used_cpu_sys"]) for i in nodes.values())
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


# -- 1. model only ------------------------------------------------------------------------------
LAYOUTS = ((1, 0), (0, 1))  # (sessions, intra-op threads); 0 = one per core


def model_only(
    models: Models,
    texts: Sequence[str],
    max_len: int,
    serving: str | None = None,
    layouts: Sequence[tuple[int, int]] = LAYOUTS,
    batch_sizes: Sequence[int] = BATCH_SIZES,
) -> dict[str, dict[int, float]]:
    """posts/s by layout and batch size; length-sorted batches padded to their own longest text.

    Two layouts: one session using every core, and one single-threaded session per core
    (what Triton's CPU instances do). The ceiling is the best of both.
    """
    card = TextModelCard.load(models.text)
    cores = os.cpu_count() or 1
    seqs = TextEncoder(models.text / "tokenizer.json", max_len).tokenize(texts)
    seqs.sort(key=len)
    out: dict[str, dict[int, float]] = {}
    for n_sessions, threads in layouts:
        n_sessions, threads = n_sessions or cores, threads or cores
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        model_path = str(models.text / (serving or card.serving_model))
        sessions = [
            ort.InferenceSession(model_path, opts, providers=["CPUExecutionProvider"]) for _ in range(n_sessions)
        ]
        by_batch = out[f"{n_sessions}x{threads}"] = {}
        for bs in batch_sizes:
            batches = [pad(seqs[i : i + bs]) for i in range(0, len(seqs), bs)]
            for sess in sessions:
                sess.run(["logits"], {"input_ids": batches[0][0], "attention_mask": batches[0][1]})
            start = time.perf_counter()
            with ThreadPoolExecutor(n_sessions) as pool:  # ORT releases the GIL while it runs
                list(pool.map(_run_all, sessions, [batches[k::n_sessions] for k in range(n_sessions)]))
            by_batch[bs] = len(seqs) / (time.perf_counter() - start)
    return out


def _run_all(sess: ort.InferenceSession, batches: Sequence[tuple[IntArray, IntArray]]) -> None:
    for ids, mask in batches:
        sess.run(["logits"], {"input_ids": ids, "attention_mask": mask})


def best(sweep: dict[str, dict[int, float]]) -> tuple[str, int, float]:
    return max(((layout, bs, v) for layout, d in sweep.items() for bs, v in d.items()), key=lambda t: t[2])


@dataclass(frozen=True)
class Ceiling:
    """The model-only rate at the sweep's best layout and batch size, measured again on demand:
    the VM's speed drifts by ±10% from minute to minute, so a phase is compared with the
    ceiling measured just before and just after it, not with the sweep's (lucky) best."""

    models: Models
    texts: Sequence[str]
    max_len: int
    layout: str  # "<sessions>x<threads>", as the sweep names it
    batch: int

    def __call__(self) -> float:
        sessions, threads = (int(n) for n in self.layout.split("x"))
        sweep = model_only(self.models, self.texts, self.max_len, None, ((sessions, threads),), (self.batch,))
        return next(iter(sweep.values()))[self.batch]


@dataclass(frozen=True)
class Paired:
    """A phase and the model-only ceiling around it (the mean of the runs just before and after)."""

    phase: Phase
    ceiling: float

    @property
    def ratio(self) -> float:
        return self.phase.rate / self.ceiling

    def to_json(self) -> dict[str, float]:
        return {
            "posts_per_s": round(self.phase.rate, 1),
            "model_only_posts_per_s": round(self.ceiling, 1),
            "ratio": round(self.ratio, 3),
        }


def paired(runs: Sequence[Callable[[], Phase]], ceiling: Callable[[], float]) -> list[Paired]:
    """Each run between two ceiling measurements, alternating: c p c p c (a ceiling run is shared)."""
    rates, out = [ceiling()], []
    for run in runs:
        phase = run()
        rates.append(ceiling())
        out.append(Paired(phase, (rates[-2] + rates[-1]) / 2))
    return out


def median_pair(pairs: Sequence[Paired]) -> Paired:
    """The pair with the median ratio (an odd count: a real run, not an average of two)."""
    return sorted(pairs, key=lambda p: p.ratio)[len(pairs) // 2]


# -- 2. triton only -----------------------------------------------------------------------------
def triton_only(
    ep: Endpoints, models: Models, texts: Sequence[str], max_len: int, in_flight: int, sub_batch: int
) -> float:
    async def run() -> float:
        model = TritonTextModel(ep.triton_grpc, "spam_text", 30, TextModelCard.load(models.text).version)
        await model.connect()
        scorer = TextScorer(
            TextEncoder(models.text / "tokenizer.json", max_len), model, sub_batch, in_flight, ScoreCache(0)
        )
        await scorer.score(texts[:64])
        start = time.perf_counter()
        await scorer.score(texts)
        rate = len(texts) / (time.perf_counter() - start)
        await model.close()
        return rate

    return asyncio.run(run())


# -- 3-6. through Kafka, with the worker in its own process -------------------------------------
def worker_env(s: Settings) -> dict[str, str]:
    """This environment with every setting of ``s`` as its ``MODSTREAM_*`` variable, so the worker
    process runs with exactly ``s``."""
    env = dict(os.environ)
    for name in Settings.model_fields:
        value = getattr(s, name)
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if value is None:
            env.pop(f"MODSTREAM_{name.upper()}", None)  # unset is how a setting says None
        else:  # pydantic-settings parses complex values (dicts) as JSON
            env[f"MODSTREAM_{name.upper()}"] = json.dumps(value) if isinstance(value, dict) else str(value)
    return env


@contextmanager
def worker_process(s: Settings, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "modstream.cli", "worker", "--log-level", "WARNING"],
            env=worker_env(s),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(30)


def relabel(records: Sequence[Record], prefix: str) -> list[Record]:
    """Copies with new post ids: verdicts are keyed by post_id, so replays must not reuse one."""
    out = []
    for r in records:
        event = json.loads(r.value)
        event["post_id"] = f"{prefix}{event['post_id']}"
        out.append(Record(event["post_id"], json.dumps(event).encode(), r.label))
    return out


def repeated(records: Sequence[Record], n: int, prefix: str) -> list[Record]:
    """``n`` records: ``records`` over and over, each pass relabelled ``<prefix><start>-``."""
    return [r for i in range(0, n, len(records)) for r in relabel(records, f"{prefix}{i}-")][:n]


def evenly(records: Sequence[Record], n: int, prefix: str) -> list[Record]:
    """``n`` records taken evenly over ``records``, so they mix its texts as the whole does, relabelled
    ``<prefix>``: each once while there are enough, then over and over (:func:`repeated`)."""
    if n >= len(records):
        return repeated(records, n, prefix)
    return relabel([records[i * len(records) // n] for i in range(n)], prefix)


# Where a verdict's time goes, from the producer's send to the collector's read, by what each post
# carries: the input's send time, the verdict's ``decided_at`` and ``latency_ms`` (from the worker's
# poll to its decision), the verdict record's timestamp (the worker's produce) and its arrival.
HOPS = (
    "broker_in",  # send -> the worker's poll returns it: linger, the broker, the fetch wait, the poll
    "worker",  # the poll -> its verdict decided: validate, enrich, first stage, Triton, decide
    "render",  # decided -> produced: the rest of its publish decided (at-least-once, the first stage's go first)
    "broker_out",  # produced -> read by the collector: linger, the broker, the reader's fetch
)


def hop_latencies(
    sent: dict[str, float], verdicts: dict[str, Verdict], published: dict[str, float], arrived: dict[str, float]
) -> dict[str, list[float]]:
    """ms per post by hop (:data:`HOPS`): the intervals between the five instants each post
    carries, which add up to its end-to-end latency."""
    out: dict[str, list[float]] = {hop: [] for hop in HOPS}
    for key, v in verdicts.items():
        if key in sent and key in published:
            decided = v.decided_at.timestamp()
            instants = (sent[key], decided - v.latency_ms / 1000, decided, published[key], arrived[key])
            for hop, (start, end) in zip(HOPS, pairwise(instants), strict=True):
                out[hop].append((end - start) * 1000)
    return out


def percentiles(by_hop: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    return {
        hop: {f"p{q}_ms": round(float(np.percentile(ms, q)), 1) for q in (50, 99)} for hop, ms in by_hop.items() if ms
    }


@dataclass
class Phase:
    rate: float
    lost: int
    latencies_ms: list[float]
    cpu_s: dict[str, float]
    by_text: dict[str, int] = field(default_factory=dict)  # verdicts per text model version
    verdicts: dict[str, Verdict] = field(default_factory=dict)  # by post id
    hops_ms: dict[str, list[float]] = field(default_factory=dict)  # by HOPS, per post

    @property
    def degraded(self) -> int:
        """Verdicts decided without a dependency (a Triton request refused or late, Redis away): a
        rate or latency measured on them is not the pipeline's."""
        return sum(v.degraded for v in self.verdicts.values())


@dataclass(frozen=True)
class HotSwap:
    """Two bundles that differ in their text model (the served one's weights under another card version,
    so Triton loads a real second model) and the link workers serve from, promoted back and forth."""

    link: Path
    bundles: tuple[Path, Path]
    serving: TextServing

    @classmethod
    def prepare(cls, models: Models, repo: Path, ep: Endpoints, work: Path) -> HotSwap:
        other = work / "swap_bundle"
        shutil.rmtree(other, ignore_errors=True)
        shutil.copytree(models.text, other / "text", symlinks=True)
        card = TextModelCard.load(models.text)
        card.model_copy(update={"version": f"{card.version}-swap"}).save(other / "text")
        (other / "decision").symlink_to(models.decision.resolve())
        link = work / "current"
        link.unlink(missing_ok=True)
        link.symlink_to(models.bundle.resolve())
        serving = TextServing(repo / MODEL_NAME, TritonControl(ep.triton_grpc, 120.0))
        return cls(link, (models.bundle.resolve(), other), serving)

    def promote_other(self) -> float:
        """Promote the bundle not served now; returns the promotion's wall time."""
        started = time.perf_counter()
        promote(self.link, self.bundles[self.link.resolve() == self.bundles[0]], self.serving)
        return round(time.perf_counter() - started, 2)


class KafkaBench:
    """Runs of a worker on the stack. With a ``world`` (the simulated platform the posts were made
    in), each run reads it from a keyspace of its own, seeded before and cleared after: a run counts
    its own stream's signals, as a platform's new posts would, not the copies of the same texts every
    earlier run posted (by the latency phase each had been posted five times, and the short-circuit
    phase's world had replaced the senders' profiles). Without one, every run reads REDIS_PREFIX,
    which the caller fills (gpu_host restores a dump there)."""

    def __init__(self, ep: Endpoints, stack: LocalStack, models: Models, work: Path, world: World | None) -> None:
        self.ep, self.stack, self.models, self.work, self.world = ep, stack, models, work, world
        self.n = 0
        self.during_s: float | None = None  # what the last run's ``during`` returned

    def settings(self, **overrides: object) -> Settings:
        self.n += 1
        run = f"bench{self.n}-{os.getpid()}"
        base: dict[str, object] = {
            "kafka_bootstrap": self.ep.kafka_bootstrap,
            "redis_url": self.ep.redis_url,
            "triton_url": self.ep.triton_grpc,
            "model_dir": self.models.bundle,
            "redis_prefix": REDIS_PREFIX,
            "group_id": run,
            "input_topic": f"posts-{run}",
            "output_topic": f"verdicts-{run}",
            "dlq_topic": f"dlq-{run}",
            "shadow_topic": f"shadow-{run}",
            "metrics_port": 0,
            "text_cache_size": 0,
            "session_timeout_s": EMBEDDED_SESSION_TIMEOUT_S,  # as `stack up` prints: each worker joins in about 1 s
        }
        return Settings(**{**base, **overrides})  # type: ignore[arg-type]

    def _cpu(self, worker_pids: Sequence[int]) -> dict[str, float]:
        pids = {s.name: s.pid for s in self.stack.status().services if s.pid}
        out = {name: cpu_seconds(pid) for name, pid in pids.items() if name != "redis"}
        out["redis"] = redis_cpu_seconds(self.ep.redis_url)
        out["worker"] = sum(cpu_seconds(pid) for pid in worker_pids)
        # The bench's own producer and verdict reader share the cores: CPU it takes is queueing for the rest.
        out["harness"] = time.process_time()
        return out

    def run(
        self,
        records: Sequence[Record],
        rate: float | None = None,
        during: Callable[[], float] | None = None,
        at_s: float = 0.0,
        workers: int = 1,
        world: World | None = None,
        **overrides: object,
    ) -> Phase:
        """Throughput runs (``rate`` None) time each output by its producer timestamp and read
        them with a lazy consumer; paced runs time outputs by when they are read. ``during`` is
        called ``at_s`` after the timed records start (a promotion mid-run). ``workers`` processes
        share the input topic's partitions in one group (a GPU host's, docs/PERFORMANCE.md). ``world``:
        the records' platform where it is not the bench's; a ``redis_prefix`` override, one the
        caller seeded (bench_cascade's)."""
        own = None if "redis_prefix" in overrides else world or self.world  # seeded here, for this run alone
        s = self.settings(**overrides)
        if own is not None:
            s = s.model_copy(update={"redis_prefix": f"{REDIS_PREFIX}{s.group_id}:"})
        partitions = max(4, workers)
        shadow = {s.shadow_topic: partitions} if s.shadow_model_dir else {}
        create_topics(
            s.kafka_bootstrap, {s.input_topic: partitions, s.output_topic: partitions, s.dlq_topic: 1, **shadow}
        )
        collector = Collector(s, f"collector-{s.group_id}", fetch_wait_s=0.5 if rate is None else None)
        log = self.work / "worker.log"
        try:
            with contextlib.ExitStack() as running:
                if own is not None:
                    running.enter_context(seeded(self.ep.redis_url, Keyspace(s.redis_prefix), own))
                pids = [running.enter_context(worker_process(s, log)).pid for _ in range(workers)]
                producer = Producer(s.producer_conf())  # warmed up with the workers, then timed
                # Twice with several workers: the group's last rebalance is over before the timed records.
                for n in range(1 if workers == 1 else 2):
                    warm = relabel(records[: 16 * workers], f"warm{n}-")
                    produce_all(s, warm, producer=producer)
                    if not collector.wait_for([r.key for r in warm], 120):
                        raise RuntimeError(f"the workers never answered; see {log}")
                before = self._cpu(pids)
                with ThreadPoolExecutor(1) as pool:
                    midway = pool.submit(_after, at_s, during) if during else None
                    sent = produce_all(s, records, rate=rate, producer=producer)
                    collector.wait_for([r.key for r in records], 60 + len(records) / 20)
                    self.during_s = midway.result() if midway else None  # raises what the promotion raised
                after = self._cpu(pids)
        finally:
            collector.close()
        out = collector.outcomes
        verdicts = out.verdicts
        keys = [r.key for r in records]
        done = [k for k in keys if k in out.arrived]
        finished = out.arrived if rate is not None else out.published
        span = max(finished[k] for k in done) - min(sent.values()) if done else float("inf")
        return Phase(
            rate=len(done) / span,
            lost=len(keys) - len(done),
            latencies_ms=out.latencies_ms({k: sent[k] for k in keys}),
            cpu_s={k: round(after[k] - before.get(k, 0.0), 3) for k in after},
            by_text=dict(Counter(v.model_versions["text"] for v in verdicts.values())) if during else {},
            verdicts=verdicts,
            hops_ms=hop_latencies({k: sent[k] for k in keys}, verdicts, out.published, out.arrived),
        )


def percentile_ms(phase: Phase, q: float) -> float:
    """The ``q``-th percentile of a paced run's end-to-end latencies, in ms as ``bench.json`` rounds them."""
    return round(float(np.percentile(phase.latencies_ms, q)), 1)


def _after(delay_s: float, action: Callable[[], float]) -> float:
    time.sleep(delay_s)
    return action()


def post_texts() -> list[Example]:
    """The post-length texts, held-out ones first."""
    splits = post_splits(cache_root())
    return [*splits.test, *splits.val, *splits.train]


def build_posts(n: int, seed: int, banned: bool = False) -> tuple[list[Record], World]:
    """Held-out post-length texts (each post its own text when possible) in simulated platform
    context, and that platform as the posts found it (for Redis)."""
    texts = post_texts()
    sim = Simulator(seed, now=time.time(), scale=max(n // 4, 200))
    world = copy.deepcopy(sim.world)
    domains = sorted(sim.world.banned_domains)
    records = []
    for i in range(n):
        event = sim.post(texts[i % len(texts)]).event
        if banned:
            event = event.model_copy(update={"urls": [f"https://x{i}.{domains[i % len(domains)]}/p"], "text": "hi"})
        records.append(Record(event.post_id, event.model_dump_json().encode(), None))
    return records, world


def plots(result: BenchResult, sweep: dict[str, dict[int, float]], latencies: list[float], out: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 3.6))
    ax = fig.add_subplot()
    names = ["model only", "triton only", "pipeline", "naive", "short-circuit"]
    values = [
        result.model_only_posts_per_s,
        result.triton_posts_per_s,
        result.pipeline_posts_per_s,
        result.naive_posts_per_s,
        result.short_circuit_posts_per_s,
    ]
    ax.barh(names[::-1], values[::-1], color=["#888", "#c44", "#4a4", "#48c", "#999"][::-1])
    ax.set_xscale("log")
    ax.set_xlabel("posts/s (log scale)")
    for y, v in enumerate(values[::-1]):
        ax.text(v, y, f" {v:,.0f}", va="center")
    ax.set_title("Throughput by stage (2 cores, same texts)")
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=120)

    fig = Figure(figsize=(6, 3.6))
    ax = fig.add_subplot()
    ax.hist(latencies, bins=50, color="#48c")
    for q, c in ((50, "k"), (99, "r")):
        v = float(np.percentile(latencies, q))
        ax.axvline(v, color=c, linestyle="--", label=f"p{q} {v:.0f} ms")
    ax.set_xlabel("end-to-end latency (ms), produce to verdict")
    ax.set_ylabel("posts")
    ax.set_title("Latency at 50% of the pipeline maximum")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "latency.png", dpi=120)

    fig = Figure(figsize=(6, 3.6))
    ax = fig.add_subplot()
    for layout, by_batch in sweep.items():
        sessions, threads = layout.split("x")
        ax.plot(
            list(by_batch), list(by_batch.values()), marker="o", label=f"{sessions} session(s) x {threads} thread(s)"
        )
    ax.legend()
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel("posts/s")
    ax.set_title("Model-only throughput by batch size (ONNX Runtime, length-sorted)")
    fig.tight_layout()
    fig.savefig(out / "batch_size.png", dpi=120)


@contextmanager
def _step(console: Console, what: str) -> Iterator[None]:
    """A spinner on a terminal, and a line with the step's time wherever the output goes: a
    bench that runs 12 minutes into a CI log must show where it is."""
    start = time.monotonic()
    with console.status(what):
        yield
    console.log(f"{what.strip()}: {time.monotonic() - start:.0f} s")


@dataclass(frozen=True)
class Probe:
    """The bench's steady run set up alone, for measuring one step of it (the scripts under docs/perf):
    a steady run's posts at the model-only rate (one single-threaded session per core) and that
    ceiling, measured again on the run's texts."""

    kb: KafkaBench
    steady: list[Record]
    ceiling: Ceiling
    rate: float  # the model-only rate the steady run was sized by

    @classmethod
    def on(cls, models: Models, ep: Endpoints, stack: LocalStack, out: Path) -> Probe:
        max_len = TextModelCard.load(models.text).max_length
        pool, world = build_posts(len(post_texts()), 7)
        texts = [json.loads(r.value)["text"] for r in pool[:2000]]
        layout, batch, rate = best(model_only(models, texts, max_len, None, ((2, 1),), (16, 32)))
        steady = pool[: int(rate * STEADY_S)]
        ceiling = Ceiling(models, [json.loads(r.value)["text"] for r in steady], max_len, layout, batch)
        return cls(KafkaBench(ep, stack, models, out, world), steady, ceiling, rate)


def run_bench(
    posts: int,
    out: Path,
    console: Console,
    latency_s: float = LATENCY_S,
    steady_s: float = STEADY_S,
    batch_sizes: Sequence[int] = BATCH_SIZES,
    pipeline_runs: int = PIPELINE_RUNS,
) -> BenchResult:
    """Every phase, into ``out``: ``posts`` for the sweeps and the short runs, ``latency_s`` of paced
    load, steady runs as long as the model-only ceiling serves in ``steady_s``, the model-only sweeps
    over ``batch_sizes`` and ``pipeline_runs`` pipeline runs (a smoke test's short, few ones prove the
    phases run, not their rates)."""
    out.mkdir(parents=True, exist_ok=True)
    models = ensure_models(console)
    card = TextModelCard.load(models.text)
    max_len = card.max_length
    result = BenchResult(posts=posts)
    d = BenchDetails(serving_model=card.serving_model, max_length=max_len, cpus=os.cpu_count())
    step = partial(_step, console)
    repo = build_repo("cpu-embedded", models.text, out / "triton_repo")
    naive_model = MODEL_NAME
    if (models.text / "model.onnx").exists():  # the naive baseline's model: fp32, one instance on every core
        naive_options = RepoOptions(max_batch_size=1, preferred_batch_sizes=(), max_queue_delay_us=0)
        build_repo("cpu-embedded", models.text, repo, naive_options, name=NAIVE_MODEL, onnx_file="model.onnx")
        naive_model = NAIVE_MODEL
    stack = LocalStack(out / "stack", repo, console=console)
    with stack as ep:
        pool, world = build_posts(max(posts, len(post_texts())), 7)  # one text each, up to the corpus
        records = pool[:posts]
        texts = [json.loads(r.value)["text"] for r in records]
        with step("1/9 model only: layout and batch-size sweep"):
            sweep = model_only(models, texts, max_len, batch_sizes=batch_sizes)
        layout, batch, ceiling = best(sweep)
        result.model_only_posts_per_s = round(ceiling, 1)
        d.model_only_best = {"layout": layout, "batch": batch}
        d.model_only_by_batch = {lay: {str(k): round(v, 1) for k, v in by.items()} for lay, by in sweep.items()}
        if card.serving_model != "model.onnx" and (models.text / "model.onnx").exists():
            with step("   lever: fp32 vs int8"):
                fp32 = model_only(models, texts, max_len, "model.onnx", batch_sizes=batch_sizes)
            d.model_only_fp32_posts_per_s = round(best(fp32)[2], 1)
        with step("   e-mail length: model only on SpamAssassin e-mails"):
            emails = [e.text for e in load_spamassassin(cache_root())][: len(texts)]
            email_sweep = model_only(models, emails, max_len, batch_sizes=batch_sizes)
            d.model_only_email_posts_per_s = round(best(email_sweep)[2], 1)
        with step("   n-gram model (worker-side) on the posts"):
            ngram = NgramModel.load(models.text)
            started = time.perf_counter()
            ngram.spam_prob(texts)
            d.ngram_posts_per_s_one_core = round(len(texts) / (time.perf_counter() - started), 1)
        defaults = Settings()
        with step("2/9 triton only"):
            for inflight in (1, defaults.triton_max_in_flight):
                rate = triton_only(ep, models, texts, max_len, inflight, defaults.triton_sub_batch)
                d.triton_in_flight[inflight] = round(rate, 1)
        result.triton_posts_per_s = d.triton_in_flight[defaults.triton_max_in_flight]
        kb = KafkaBench(ep, stack, models, out, world)
        steady_records = pool[: max(posts, int(ceiling * steady_s))]
        steady = partial(relabel, steady_records)
        d.steady_run_posts = len(steady_records)
        # The ceiling around each steady run is measured on that run's texts.
        ceiling_now = Ceiling(models, [json.loads(r.value)["text"] for r in steady_records], max_len, layout, batch)
        with step(f"3/9 full pipeline, {pipeline_runs} runs of {len(steady_records)} posts, each between two ceilings"):
            pipes = paired([partial(kb.run, steady(f"pipe{i}-")) for i in range(pipeline_runs)], ceiling_now)
        pipe = median_pair(pipes).phase
        result.pipeline_posts_per_s = round(pipe.rate, 1)
        d.pipeline_cpu_s = pipe.cpu_s
        d.pipeline_runs = [p.to_json() for p in pipes]
        with step("   lever: the pipeline with a challenger decision model in shadow"):
            shadow_run = partial(kb.run, steady("shadow-"), shadow_model_dir=models.bundle)
            (shadow_pair,) = paired([shadow_run], ceiling_now)
        shadowed = shadow_pair.phase
        d.pipeline_with_shadow_posts_per_s = round(shadowed.rate, 1)
        d.pipeline_with_shadow_cpu_s = shadowed.cpu_s
        with step("4/9 naive baseline (one post at a time)"):
            one_at_a_time: dict[str, Any] = {"batch_max_size": 1, "triton_max_in_flight": 1}
            naive = kb.run(records[: min(posts, 300)], triton_model=naive_model, **one_at_a_time)
            naive_int8 = kb.run(records[: min(posts, 300)], **one_at_a_time)
        result.naive_posts_per_s = round(naive.rate, 1)
        d.naive_int8_posts_per_s = round(naive_int8.rate, 1)
        with step("5/9 short-circuit path"):
            banned, banned_world = build_posts(posts * 5, 8, banned=True)
            sc = kb.run(banned, batch_max_size=1000, world=banned_world)
        result.short_circuit_posts_per_s = round(sc.rate, 1)
        d.short_circuit_cpu_s = sc.cpu_s
        load = 0.5 * pipe.rate
        with step(f"6/9 latency at {load:.0f} posts/s, {LATENCY_RUNS} runs of {latency_s:.0f} s"):
            n_lat = int(load * latency_s)
            # The pipeline runs' own posts: half their rate is half load only for the posts it was measured on
            # (held-out texts alone leave the transformer a third more of them).
            lat_records = evenly(steady_records, n_lat, "lat")
            lat_runs = [kb.run(relabel(lat_records, f"{i}-"), rate=load) for i in range(LATENCY_RUNS)]
        lat = sorted(lat_runs, key=lambda p: percentile_ms(p, 99))[LATENCY_RUNS // 2]
        result.p50_ms, result.p99_ms = percentile_ms(lat, 50), percentile_ms(lat, 99)
        d.latency_runs = [{"p50_ms": percentile_ms(p, 50), "p99_ms": percentile_ms(p, 99)} for p in lat_runs]
        d.latency_offered_posts_per_s = round(load, 1)
        d.latency_cpu_s = lat.cpu_s
        d.latency_by_hop = percentiles(lat.hops_ms)
        with step(f"7/9 exactly-once: throughput, then latency at {load:.0f} posts/s"):
            eos = kb.run(steady("eos-"), processing_guarantee="exactly_once")
            eos_lat = kb.run(relabel(lat_records, "eos-"), rate=load, processing_guarantee="exactly_once")
        d.exactly_once_posts_per_s = round(eos.rate, 1)
        d.exactly_once_p50_ms, d.exactly_once_p99_ms = percentile_ms(eos_lat, 50), percentile_ms(eos_lat, 99)
        d.exactly_once_latency_by_hop = percentiles(eos_lat.hops_ms)
        with step("   lever: a bundle with another text model promoted mid-run: throughput, then latency"):
            swap = HotSwap.prepare(models, repo, ep, out)
            promote_s = []
            # A steady run holds a whole promotion (load, switch, retire: 12-15 s, seconds of Triton's
            # CPU), which starts a quarter of the way in.
            n_swap = len(steady_records)
            swap_run = partial(
                kb.run, steady("swap-"), during=swap.promote_other, at_s=n_swap / pipe.rate / 4,
                model_dir=swap.link, triton_repo=repo,
            )  # fmt: skip
            (swap_pair,) = paired([swap_run], ceiling_now)
            swapped = swap_pair.phase
            promote_s.append(kb.during_s)
            swapped_lat = kb.run(
                relabel(lat_records, "swap-"), rate=load, during=swap.promote_other, at_s=latency_s / 2,
                model_dir=swap.link, triton_repo=repo,
            )  # fmt: skip
            promote_s.append(kb.during_s)
        d.hot_swap_posts_per_s = round(swapped.rate, 1)
        d.hot_swap_p99_ms = percentile_ms(swapped_lat, 99)
        d.hot_swap_promote_s = [t for t in promote_s if t is not None]
        d.hot_swap_verdicts_by_text = [swapped.by_text, swapped_lat.by_text]
        with step("8/9 cost of the stream-kept signals and the logged feature row"):
            d.signals = signal_cost(ep.redis_url, records, Settings().batch_max_size, "modstream-bench-signals:")
        texts_by_use = post_texts()  # held-out first
        held_out = len(post_splits(cache_root()).test)
        for mix, share in [*MIXES.items(), (REAL, None)]:
            real = min(held_out, len(steady_records))
            what = f"{share:.0%} spam" if share is not None else f"{real} held-out labelled texts, unknown senders"
            with step(f"9/9 cascade vs full pipeline, {mix} mix ({what})"):
                d.cascade[mix] = run_mix(
                    kb.run, texts_by_use, held_out, share, len(steady_records),
                    ep.redis_url, relabel, DecisionModel.load(models.decision),
                )  # fmt: skip
        result.cascade_social_posts_per_s = d.cascade["social"].cascade_posts_per_s
        result.full_social_posts_per_s = d.cascade["social"].full_posts_per_s
        d.pipeline_first_stage_share = round(first_stage_share(pipe.verdicts), 4)
        phases = {
            "pipeline": pipe,
            "shadow": shadowed,
            "naive": naive,
            "naive_int8": naive_int8,
            "short_circuit": sc,
            **{f"latency_{i}": p for i, p in enumerate(lat_runs)},
            "exactly_once": eos,
            "exactly_once_latency": eos_lat,
            "hot_swap": swapped,
            "hot_swap_latency": swapped_lat,
        }
        result.lost = sum(p.lost for p in phases.values()) + sum(m.lost for m in d.cascade.values())
        d.lost_by_phase = {name: p.lost for name, p in phases.items()} | {
            f"cascade_{mix}": m.lost for mix, m in d.cascade.items()
        }
        d.degraded_by_phase = {name: p.degraded for name, p in phases.items()}
        # Each phase over the ceiling measured around it (Ceiling); the pipeline's is the median of its runs.
        d.ratios = {
            "pipeline_over_model_only": round(median_pair(pipes).ratio, 3),
            "pipeline_with_shadow_over_model_only": round(shadow_pair.ratio, 3),
            "hot_swap_over_model_only": round(swap_pair.ratio, 3),
            "pipeline_over_sweep_best": round(result.pipeline_posts_per_s / result.model_only_posts_per_s, 3),
            "pipeline_over_naive": round(result.pipeline_posts_per_s / max(result.naive_posts_per_s, 1e-9), 1),
        }
        d.hot_swap_posts = n_swap
        result.details = d
        plots(result, sweep, lat.latencies_ms, out)
        cascade_plot(d.cascade, out)
    (out / "bench.json").write_text(json.dumps({**result.summary(), "details": d.to_json()}, indent=2))
    return result
