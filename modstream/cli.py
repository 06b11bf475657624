"""The ``modstream`` command line. Heavy imports (training, the stack) happen inside commands."""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn, TypeVar

import typer
from rich.console import Console

if TYPE_CHECKING:
    from pydantic_settings import BaseSettings

    from modstream.loop.gate import Gate, Judgement, Side
    from modstream.loop.promotion import Switch, TextServing
    from modstream.topics import Range
    from workers.config import Settings
    from workers.feedback import FeedbackSettings

S = TypeVar("S", bound="BaseSettings")

# Plain click help: rich's option table cuts long option names at 80 columns.
app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="Real-time spam moderation on Kafka.", rich_markup_mode=None
)
stack_app = typer.Typer(
    no_args_is_help=True, rich_markup_mode=None, help="The embedded local stack: Tansu, Redis, tritonserver."
)
app.add_typer(stack_app, name="stack")
dataset_app = typer.Typer(
    no_args_is_help=True, rich_markup_mode=None, help="Training sets from the platform's own labels."
)
app.add_typer(dataset_app, name="dataset")
models_app = typer.Typer(
    rich_markup_mode=None, help="Train or reuse the default models; promote and roll back bundles."
)
app.add_typer(models_app, name="models")
console = Console(stderr=True)

DEFAULT_STATE = Path(".state/stack")


@app.command()
def schema(
    out: Annotated[Path | None, typer.Option(help="Write one <Model>.schema.json per model here")] = None,
) -> None:
    """Export the event contracts as JSON Schema."""
    from schemas import DeadLetter, FeedbackEvent, PostEvent, ProfileUpdate, Verdict

    models = (PostEvent, Verdict, FeedbackEvent, DeadLetter, ProfileUpdate)
    schemas = {m.__name__: m.model_json_schema() for m in models}
    if out is None:
        print(json.dumps(schemas, indent=2))
        return
    out.mkdir(parents=True, exist_ok=True)
    for name, body in schemas.items():
        (out / f"{name}.schema.json").write_text(json.dumps(body, indent=2) + "\n")
    console.print(f"wrote {len(schemas)} schemas to {out}")


def _load(kind: type[S]) -> S:
    """``kind`` from its environment variables, or exit 2 with one line naming what is wrong."""
    from pydantic import ValidationError

    from workers.isolation import describe

    try:
        return kind()
    except ValidationError as exc:
        _misconfigured(f"bad {kind.model_config.get('env_prefix', '')}* settings: {describe(exc)}")


def _settings() -> Settings:
    """The settings from MODSTREAM_* variables, or exit 2 with one line."""
    from workers.config import Settings

    return _load(Settings)


def _service(log_level: str) -> Settings:
    """The settings of a command that runs as a service, its logging configured from them."""
    from workers.logs import configure

    settings = _settings()
    configure(log_level.upper(), settings.log_format)
    return settings


def _feedback_settings() -> FeedbackSettings:
    """The feedback worker's MODSTREAM_FEEDBACK_* settings, or exit 2 with one line."""
    from workers.feedback import FeedbackSettings

    return _load(FeedbackSettings)


def _misconfigured(message: str) -> NoReturn:
    from workers.logs import JsonFormatter
    from workers.startup import EXIT_MISCONFIGURED

    if any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers):  # a service's JSON log
        logging.getLogger("modstream").error(message)
    else:
        console.print(f"[red]error:[/] {message}", highlight=False, soft_wrap=True)  # one line, however long
    raise typer.Exit(EXIT_MISCONFIGURED)


@app.command()
def worker(log_level: str = "INFO") -> None:
    """Run the moderation worker (configured by MODSTREAM_* variables) until SIGTERM."""
    from workers.startup import Misconfigured, without

    with without():  # a restarted worker is back in seconds sooner (workers/startup.py)
        from workers.main import main

    settings = _service(log_level)
    try:
        main(settings)
    except Misconfigured as exc:
        _misconfigured(str(exc))


@app.command()
def health(
    models: Annotated[
        bool, typer.Option(help="Also check Triton and the model contract; --no-models for the feedback worker")
    ] = True,
    timeout_s: Annotated[float, typer.Option(min=0.1, help="Deadline for each probe")] = 5.0,
) -> None:
    """Exit 0 only when Kafka, Redis and (with --models) Triton answer and the model contract holds."""
    import asyncio

    from workers.health import check

    checks = asyncio.run(check(_settings(), timeout_s, models))
    for c in checks:
        print(c)
    if not all(c.ok for c in checks):
        raise typer.Exit(1)


@app.command()
def feedback(log_level: str = "INFO") -> None:
    """Run the feedback worker: reports and labels update reputation counters and ban lists."""
    from workers.feedback import main
    from workers.startup import Misconfigured

    settings = _service(log_level)
    try:
        main(settings, _feedback_settings())
    except Misconfigured as exc:  # Kafka security settings it cannot apply
        _misconfigured(str(exc))


@app.command("profile-contract")
def profile_contract(
    out: Annotated[Path | None, typer.Option(help="Write the contract to this JSON file")] = None,
) -> None:
    """The Redis keys and fields a platform supplies, and their encodings, as JSON."""
    from workers.keyspace import Keyspace
    from workers.profiles.contract import contract

    text = json.dumps(contract(Keyspace(_settings().redis_prefix)), indent=2)
    if out is None:
        print(text)
        return
    out.write_text(text + "\n")
    console.print(f"wrote the profile contract to {out}")


@app.command("ingest-profiles")
def ingest_profiles(log_level: str = "INFO") -> None:
    """Consume profile updates (MODSTREAM_PROFILES_TOPIC) into Redis; invalid ones go to the DLQ."""
    from workers.profiles.app import main

    main(_service(log_level))


@models_app.callback(invoke_without_command=True)
def models(ctx: typer.Context) -> None:
    """Train (or reuse from the cache) the content and decision models; print their bundle dir."""
    if ctx.invoked_subcommand is not None:
        return
    from modstream.artifacts import ensure_models

    print(ensure_models(console).bundle)


def _text_serving(settings: Settings, name: str | None = None) -> TextServing | None:
    """Triton's repository and control API for the Triton model ``name`` (default the served one's), for a
    promotion that brings another text model; None when MODSTREAM_TRITON_REPO is unset (then such a
    promotion is refused)."""
    from modstream.loop.promotion import TextServing
    from modstream.triton_repo import ensure_model
    from workers.adapters.triton import TritonControl

    if settings.triton_repo is None:
        return None
    reload_s = settings.model_reload_s or 5.0
    return TextServing(
        ensure_model(settings.triton_repo, name or settings.triton_model, like=settings.triton_model),
        TritonControl(settings.triton_url, max(settings.triton_timeout_s, 60.0)),  # a load takes seconds
        idle_s=reload_s,
        drain_min_s=2 * reload_s,
        drain_max_s=max(60.0, 6 * reload_s),
        keep=[settings.shadow_model_dir] if settings.shadow_model_dir else [],
    )


def _switched(switch: Switch) -> None:
    console.print(f"{switch.action}: now serving {switch.after} (decision model {switch.decision}, text model "
                  f"{switch.text}); was {switch.before or 'nothing'}")  # fmt: skip
    if switch.text_changed:
        console.print(f"  Triton loaded text model {switch.text} first; running workers switch between batches")
    if switch.retired:
        console.print(f"  retired from Triton once no worker asked for them: {', '.join(switch.retired)}")
    if switch.still_in_use:
        console.print(
            f"[yellow]  still asked for, left loaded:[/] {', '.join(switch.still_in_use)} "
            "(a worker that has not switched; the next promotion retires them)"
        )


@models_app.command("promote")
def models_promote(bundle: Annotated[Path, typer.Argument(help="Bundle dir (text/ and decision/) to serve")]) -> None:
    """Serve BUNDLE: load its text model into Triton if it is another one, then swap the MODSTREAM_MODEL_DIR
    link atomically; running workers switch between batches."""
    from modstream.loop.promotion import PromotionError, promote
    from training.dataset import DatasetError

    settings = _settings()
    try:
        switch = promote(settings.model_dir, bundle, _text_serving(settings))
    except (PromotionError, DatasetError) as exc:
        _misconfigured(str(exc))
    _switched(switch)


@models_app.command("shadow")
def models_shadow(bundle: Annotated[Path, typer.Argument(help="Bundle dir (text/ and decision/) to shadow")]) -> None:
    """Shadow BUNDLE: load its text model into Triton as the challenger's if it is another one, then swap
    the MODSTREAM_SHADOW_MODEL_DIR link; running workers switch the challenger between batches."""
    from modstream.loop.promotion import PromotionError, shadow
    from training.dataset import DatasetError

    settings = _settings()
    if settings.shadow_model_dir is None:
        _misconfigured("MODSTREAM_SHADOW_MODEL_DIR is unset: name the challenger's link, the one workers shadow")
    try:
        switch = shadow(settings.shadow_model_dir, bundle, _text_serving(settings, settings.shadow_triton_model))
    except (PromotionError, DatasetError) as exc:
        _misconfigured(str(exc))
    _switched(switch)


@models_app.command("rollback")
def models_rollback() -> None:
    """Serve the bundle promoted before the current one (its text model loaded into Triton again if need be)."""
    from modstream.loop.promotion import PromotionError, rollback
    from training.dataset import DatasetError

    settings = _settings()
    try:
        switch = rollback(settings.model_dir, _text_serving(settings))
    except (PromotionError, DatasetError) as exc:
        _misconfigured(str(exc))
    _switched(switch)


@app.command()
def demo(
    posts: Annotated[int, typer.Option(min=50, help="Posts to replay")] = 2000,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as one JSON object")] = False,
    label_share: Annotated[
        float, typer.Option(min=0, max=1, help="Share of posts given a simulated moderator label on `feedback`")
    ] = 0.0,
    keep_stack: Annotated[
        Path | None, typer.Option(help="Run the stack in this dir and leave it up (for dataset build, replay)")
    ] = None,
) -> None:
    """Run the whole pipeline on the embedded stack and summarise it."""
    from modstream.demo import run_demo

    summary = run_demo(posts, console, state_dir=keep_stack, label_share=label_share, keep_stack=keep_stack is not None)
    if keep_stack is not None:
        from modstream.stack import LocalStack

        endpoints = LocalStack(keep_stack / "stack", keep_stack / "triton_repo").status().endpoints
        bootstrap, triton = (endpoints.kafka_bootstrap, endpoints.triton_grpc) if endpoints else ("?", "?")
        console.print(
            f"the stack is still up: MODSTREAM_KAFKA_BOOTSTRAP={bootstrap} MODSTREAM_TRITON_URL={triton} "
            f"MODSTREAM_TRITON_REPO={(keep_stack / 'triton_repo').absolute()}; "
            f"stop it with `modstream stack down --state-dir {keep_stack / 'stack'}`"
        )
    if as_json:
        print(summary.to_json())
        return
    s = summary
    console.print(f"\n[bold]modstream demo[/] — {s.posts} posts (burst replay)")
    console.print(f"  verdicts {s.verdicts}, dead letters {s.dead_letters}, lost {s.lost}")
    console.print(f"  decisions {s.decisions}, review share {s.review_share:.1%}, degraded {s.degraded}")
    console.print(f"  accuracy on held-out posts (allow/block against labels) {s.accuracy:.2%}")
    console.print(
        f"  stream-kept signals in the rows decided from: {s.signals_present:.0%} present, "
        f"{s.signals_nonzero:.0%} already above zero"
    )
    console.print(f"  throughput {s.throughput_posts_per_s} posts/s, end-to-end p50 {s.p50_ms} ms, p99 {s.p99_ms} ms")
    if s.labels_published:
        console.print(f"  simulated moderator labels published to the feedback topic: {s.labels_published}")
    if s.lost:
        raise typer.Exit(1)


@app.command()
def bench(
    posts: Annotated[int, typer.Option(min=100, help="Posts per throughput phase")] = 2000,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as one JSON object")] = False,
    out: Annotated[Path, typer.Option(help="Where bench.json and the PNG plots go")] = Path("out/bench"),
) -> None:
    """Measure model-only, Triton, pipeline, naive and short-circuit throughput, and latency."""
    from modstream.bench import run_bench

    result = run_bench(posts, out, console)
    if as_json:
        print(json.dumps(result.summary()))
        return
    for key, value in result.summary().items():
        console.print(f"{key:>28}: {value}")
    console.print(f"details and plots in {out}")


@app.command("bench-redis")
def bench_redis(
    batches: Annotated[int, typer.Option(min=1, help="Timed batches per server")] = 60,
    size: Annotated[int, typer.Option(min=1, help="Posts per batch")] = 256,
    shards: Annotated[int, typer.Option(min=1, help="MODSTREAM_REDIS_SIGNAL_SHARDS for the cluster")] = 64,
    out: Annotated[Path | None, typer.Option(help="Also write bench-redis.json and redis_cluster.png here")] = None,
) -> None:
    """Enrichment round trip per batch: one Redis against a local three-primary Redis Cluster."""
    from modstream.redis_bench import plot, run

    results = run(batches, size, shards)
    print(json.dumps(results, indent=2))
    if out is not None:
        plot(results, out)
        (out / "bench-redis.json").write_text(json.dumps(results, indent=2) + "\n")


@app.command()
def chaos(
    posts: Annotated[int, typer.Option(min=100, help="Posts per scenario")] = 2000,
    kills: Annotated[int, typer.Option(min=1, help="kill -9s of the worker per kill scenario")] = 12,
    outage_s: Annotated[float, typer.Option(help="How long Redis stays down")] = 10.0,
    doc: Annotated[Path, typer.Option(help="The Markdown file whose results table is rewritten")] = Path(
        "docs/RELIABILITY.md"
    ),
    only: Annotated[
        list[str] | None,
        typer.Option(help="Run only this scenario (repeatable), e.g. broker; the doc is left as it is"),
    ] = None,
) -> None:
    """Inject faults during replays and count lost, duplicate and degraded verdicts per scenario."""
    from modstream.chaos import SCENARIOS, run_chaos, table, write_table

    if unknown := sorted(set(only or ()) - set(SCENARIOS)):
        raise typer.BadParameter(f"no such scenario: {', '.join(unknown)} (one of {', '.join(SCENARIOS)})")
    results = run_chaos(posts, kills, outage_s, console, only=only or ())
    print(table(results))
    if not only:  # a selection is a run of its own: the doc's table keeps every scenario
        write_table(doc, results, f"modstream chaos --posts {posts} --kills {kills} --outage-s {outage_s:g}")
    if any(r.lost or r.disagreeing for r in results):
        raise typer.Exit(1)


@app.command("train-text")
def train_text(
    data: Annotated[
        Path | None,
        typer.Option(help="CSV, JSONL or Parquet with text and label columns (default: the built-in posts)"),
    ] = None,
    test: Annotated[
        Path | None,
        typer.Option(help="External labelled test file; --data is then all train + validation (90/10)"),
    ] = None,
    base: Annotated[str | None, typer.Option(help="Base checkpoint dir or hub id")] = None,
    out: Annotated[Path, typer.Option(help="Output model dir")] = Path("out/text-model"),
    epochs: Annotated[int | None, typer.Option(min=1)] = None,
    max_length: Annotated[int | None, typer.Option(min=8, max=512)] = None,
    seed: Annotated[int | None, typer.Option()] = None,
    lr: Annotated[float | None, typer.Option(min=1e-7, max=1e-2, help="Peak learning rate (AdamW)")] = None,
    unfreeze_embeddings: Annotated[
        bool, typer.Option(help="Train the word embeddings too (half the parameters, ~25% more time per step)")
    ] = False,
    balanced: Annotated[bool, typer.Option(help="Weight the loss by inverse class frequency")] = False,
) -> None:
    """Fine-tune DistilBERT and the char n-gram model, export ONNX (+ int8), write a model card and plots."""
    if test is not None and data is None:
        raise typer.BadParameter("--test needs --data (the built-in posts keep their own test split)")
    from training.text_model import DEFAULT_EPOCHS, DEFAULT_LR, DEFAULT_MAX_LENGTH, DEFAULT_SEED
    from training.text_model import train_text as train
    from workers.config import cache_root

    card = train(
        data=data,
        base=base,
        out=out,
        cache=cache_root(),
        epochs=DEFAULT_EPOCHS if epochs is None else epochs,
        max_length=DEFAULT_MAX_LENGTH if max_length is None else max_length,
        seed=DEFAULT_SEED if seed is None else seed,
        lr=DEFAULT_LR if lr is None else lr,
        freeze_embeddings=not unfreeze_embeddings,
        balanced=balanced,
        test=test,
    )
    print(card.model_dump_json(indent=2))


@app.command("eval-text")
def eval_text(
    data: Annotated[Path, typer.Option(help="Labelled CSV, JSONL or Parquet")],
    model: Annotated[Path | None, typer.Option(help="Model dir (default: the cached trained model)")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Evaluate the content model through the production ONNX path."""
    from training.text_scoring import eval_text as evaluate

    if model is None:
        from modstream.artifacts import ensure_models

        model = ensure_models(console).text
    result = evaluate(data, model)
    if as_json:
        print(json.dumps(result))
        return
    for key, value in result.items():
        if isinstance(value, dict):  # the n-gram model's and the fused scores' metrics
            value = ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in value.items())
        console.print(f"{key:>10}: {value:.4f}" if isinstance(value, float) else f"{key:>10}: {value}")


ReviewCeiling = Annotated[
    float | None,
    typer.Option(min=0, max=1, help="Review-share ceiling", show_default="the champion's share or 0.1, the higher"),
]
HamBlocked = Annotated[
    float | None, typer.Option(min=0, max=1, help="Ceiling on the ham-blocked share's bound", show_default="0.01")
]
BlockPrecision = Annotated[
    float | None, typer.Option(min=0, max=1, help="Floor on block precision's bound", show_default="0.95")
]
Confidence = Annotated[
    float | None, typer.Option(min=0.5, max=0.999, help="One-sided, for every bound", show_default="0.95")
]
Holdout = Annotated[
    float | None, typer.Option(min=0.05, max=0.5, help="Latest share of the labels: the gate's", show_default="0.2")
]


def _gate(review: float | None, ham: float | None, precision: float | None, confidence: float | None) -> Gate:
    from modstream.loop.gate import Gate

    given = {"max_review_share": review, "max_ham_blocked": ham, "min_block_precision": precision,
             "confidence": confidence}  # fmt: skip
    return Gate(**{k: v for k, v in given.items() if v is not None})


def _refuse(given: Mapping[str, object], why: str) -> None:
    """Exit 2 naming every option given (not None, not False) that ``why`` rules out."""
    if named := [f"--{name.replace('_', '-')}" for name, value in given.items() if value not in (None, False)]:
        _misconfigured(f"{', '.join(named)} {why}")


@app.command("train-decision")
def train_decision(
    text_model: Annotated[Path | None, typer.Option(help="Simulator: the text model scoring the texts")] = None,
    out: Annotated[
        Path | None, typer.Option(help="Output dir", show_default="out/decision-model; --data: out/retrained")
    ] = None,
    posts: Annotated[int | None, typer.Option(min=1000, help="Simulator: posts", show_default="24000")] = None,
    seed: Annotated[int | None, typer.Option(help="Simulator: seed", show_default="11")] = None,
    without_signals: Annotated[
        bool, typer.Option(help="Simulator: the stream-kept signals left missing, to see what they add")
    ] = False,
    data: Annotated[
        Path | None, typer.Option(help="A `dataset build` Parquet file: train on the platform's labels")
    ] = None,
    serving: Annotated[
        Path | None, typer.Option(help="--data: the bundle to compare with", show_default="MODSTREAM_MODEL_DIR")
    ] = None,
    holdout: Holdout = None,
    max_review_share: ReviewCeiling = None,
    max_ham_blocked: HamBlocked = None,
    min_block_precision: BlockPrecision = None,
    confidence: Confidence = None,
) -> None:
    """Train the LightGBM decision model: on the platform simulator, or with --data on the platform's
    own labels, gated like `retrain` (exit 1 when not better). A new text model: `retrain`."""
    gate_options = {"serving": serving, "holdout": holdout, "max_review_share": max_review_share,
                    "max_ham_blocked": max_ham_blocked, "min_block_precision": min_block_precision,
                    "confidence": confidence}  # fmt: skip
    if data is not None:
        _refuse({"text_model": text_model, "posts": posts, "seed": seed, "without_signals": without_signals},
                "train on the simulator, not with --data (a new text model: `modstream retrain`)")  # fmt: skip
        _train_on_labels(data, serving, out or Path("out/retrained"), holdout,
                         _gate(max_review_share, max_ham_blocked, min_block_precision, confidence))  # fmt: skip
        return
    _refuse(gate_options, "need --data (the simulator's model has no serving model to beat)")
    from training.corpus import spamassassin_splits
    from training.decision import train_decision as train
    from training.text_scoring import onnx_spam_scores
    from workers.cards import TextModelCard
    from workers.config import cache_root

    if text_model is None:
        from modstream.artifacts import ensure_models

        text_model = ensure_models(console).text
    model_dir = text_model
    splits = spamassassin_splits(cache_root())
    version = TextModelCard.load(model_dir).version
    card = train(
        splits.val,
        splits.test,
        lambda texts: onnx_spam_scores(model_dir, texts),
        out or Path("out/decision-model"),
        n_posts=24_000 if posts is None else posts,
        seed=11 if seed is None else seed,
        text_version=version,
        signals=not without_signals,
    )
    print(card.model_dump_json(include={"version", "thresholds", "validation", "test"}, indent=2))


def _train_on_labels(data: Path, serving: Path | None, out: Path, holdout: float | None, gate: Gate) -> None:
    from modstream.loop.decide import HOLDOUT, retrain_decision
    from modstream.loop.report import write
    from training.dataset import DatasetError

    try:
        decided = retrain_decision(data, serving or _settings().model_dir, out, gate, holdout or HOLDOUT)
    except DatasetError as exc:
        _misconfigured(str(exc))
    report = decided.as_dict()
    sides = {"challenger": decided.challenger, "champion": decided.champion}
    write(out, report, decided.curves, sides, decided.judgement.review_ceiling, gate.confidence)
    print(json.dumps(report, indent=2))
    _sides(sides)
    _judged(decided.judgement, out)


def _sides(sides: dict[str, Side]) -> None:
    for name, s in sides.items():
        console.print(
            f"{name:>10} on {s.n} held-out posts: block-F1 {s.block_f1:.3f} (precision {s.block_precision:.3f}), "
            f"ham blocked {s.ham_blocked}/{s.ham}, review {s.review_share:.1%}"
        )


def _judged(judgement: Judgement, out: Path) -> None:
    """The gate's one line; exit 1 unless the challenger is better."""
    console.print(f"bundle, report.json and report.png in {out}")
    if not judgement.better:
        console.print(f"[yellow]{judgement.line()}[/]", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    console.print(judgement.line())


def _range(from_time: str | None, to_time: str | None, from_offsets: str | None) -> Range:
    from datetime import UTC, datetime

    from modstream.topics import Range, RangeError

    def when(text: str | None) -> datetime | None:
        if text is None:
            return None
        try:
            t = datetime.fromisoformat(text)
        except ValueError:
            _misconfigured(f"{text!r} is not an ISO time (e.g. 2026-11-23T10:00:00Z)")
        return t if t.tzinfo else t.replace(tzinfo=UTC)

    try:
        offsets = None if from_offsets is None else Range.parse_offsets(from_offsets)
        return Range(when(from_time), when(to_time), offsets)
    except RangeError as exc:
        _misconfigured(str(exc))


FromTime = Annotated[str | None, typer.Option(help="ISO time: records at or after it (UTC when no zone)")]
ToTime = Annotated[str | None, typer.Option(help="ISO time: records before it")]
FromOffsets = Annotated[str | None, typer.Option(help="PARTITION:OFFSET[,...] on the verdicts topic")]


@dataset_app.command("build")
def dataset_build(
    out: Annotated[Path, typer.Option(help="Parquet file to write")] = Path("out/dataset.parquet"),
    from_time: FromTime = None,
    to_time: ToTime = None,
    from_offsets: FromOffsets = None,
    weak_labels: Annotated[bool, typer.Option(help="Label posts no moderator labelled by their user reports")] = False,
    dead_letter: Annotated[bool, typer.Option(help="Dead-letter bad feedback records (the feedback DLQ)")] = True,
) -> None:
    """Join the verdicts' logged feature rows with moderator labels from the feedback topic, as Parquet."""
    from modstream.loop.dataset import build_dataset
    from modstream.topics import RangeError
    from training.dataset import DatasetError

    rng = _range(from_time, to_time, from_offsets)
    try:
        with console.status("reading the verdicts and the feedback topic, joining"):
            counts = build_dataset(_settings(), rng, out, weak_labels=weak_labels, dead_letter=dead_letter)
    except (DatasetError, RangeError) as exc:
        _misconfigured(str(exc))
    print(json.dumps(counts.as_dict()))
    console.print(
        f"{counts.posts} posts, {counts.labelled} labelled ({counts.spam_share:.1%} spam), "
        f"{counts.unmatched_labels} labels for posts outside the range, {counts.bad_feedback} bad feedback "
        f"records -> {out}"
    )


@app.command()
def retrain(
    from_time: FromTime = None,
    to_time: ToTime = None,
    out: Annotated[Path, typer.Option(help="The new bundle, report.json and report.png")] = Path("out/retrained"),
    serving: Annotated[
        Path | None, typer.Option(help="The champion bundle", show_default="MODSTREAM_MODEL_DIR")
    ] = None,
    base: Annotated[
        str | None, typer.Option(help="Base checkpoint dir or hub id", show_default="the default base")
    ] = None,
    epochs: Annotated[int | None, typer.Option(min=1, help="Text model epochs", show_default="4")] = None,
    text_folds: Annotated[
        int | None,
        typer.Option(min=0, max=10, help="Out-of-fold text models for the earlier posts (0: none)", show_default="5"),
    ] = None,
    holdout: Holdout = None,
    max_review_share: ReviewCeiling = None,
    max_ham_blocked: HamBlocked = None,
    min_block_precision: BlockPrecision = None,
    confidence: Confidence = None,
    dead_letter: Annotated[bool, typer.Option(help="Dead-letter bad feedback records (the feedback DLQ)")] = True,
) -> None:
    """The weekly retrain: labelled posts and their texts, text model, rescore, decision model,
    gate, report. Exit 0 when the challenger is better, 1 when not, 2 on bad input."""
    from modstream.loop.decide import HOLDOUT
    from modstream.loop.retrain import TEXT_EPOCHS, TEXT_FOLDS, Options
    from modstream.loop.retrain import retrain as run
    from modstream.topics import RangeError
    from training.dataset import DatasetError

    settings = _settings()
    champion = serving or settings.model_dir
    if out.resolve() == champion.resolve():
        _misconfigured(f"--out {out} is the champion bundle: write the challenger elsewhere")
    gate = _gate(max_review_share, max_ham_blocked, min_block_precision, confidence)
    folds = TEXT_FOLDS if text_folds is None else text_folds
    options = Options(gate, holdout or HOLDOUT, base, TEXT_EPOCHS if epochs is None else epochs, folds, dead_letter)
    rng = _range(from_time, to_time, None)
    try:
        done = run(settings, rng, champion, out, options, progress=console.print)
    except (DatasetError, RangeError) as exc:
        _misconfigured(str(exc))
    print(json.dumps(done.report, indent=2, default=str))
    d = done.decided
    _sides({"challenger": d.challenger, "champion": d.champion})
    _judged(d.judgement, out)


@app.command("replay")
def replay_cmd(
    bundle: Annotated[Path, typer.Option(help="Bundle dir (text/ and decision/) to re-decide with")],
    out: Annotated[Path, typer.Option(help="Where replay.json and flips.png go")] = Path("out/replay"),
    from_time: FromTime = None,
    to_time: ToTime = None,
    from_offsets: FromOffsets = None,
    output_topic: Annotated[str | None, typer.Option(help="Publish the re-decided verdicts here")] = None,
    triton_model: Annotated[
        str | None,
        typer.Option(
            help="The Triton model serving the bundle's text model, asked only when another text model scored "
            "the range",
            show_default="MODSTREAM_SHADOW_TRITON_MODEL",
        ),
    ] = None,
) -> None:
    """Re-decide a range of logged feature rows with a bundle's decision model (its text model rescoring
    the texts another one scored); report the flips."""
    from modstream.loop.replay import ReplayError, replay
    from modstream.topics import RangeError
    from training.dataset import DatasetError

    try:
        with console.status(f"re-deciding the range with {bundle}"):
            rng = _range(from_time, to_time, from_offsets)
            report = replay(_settings(), bundle, rng, out, output_topic, triton_model)
    except (DatasetError, RangeError, ReplayError) as exc:
        _misconfigured(str(exc))
    c, r = report.comparison, report.rescored
    print(report.to_json())
    if r.triton_model is not None:
        console.print(
            f"{len(r.verdicts)} texts rescored by the bundle's text model through Triton model {r.triton_model!r}, "
            f"{r.no_post_event} verdicts left out without their post event"
        )
    elif r.no_post_event:
        console.print(f"Triton not called: none of {r.no_post_event} verdicts to rescore has its post event")
    console.print(f"{c.agreed}/{c.posts} decisions reproduced ({c.agreement:.2%}), {len(c.flipped)} flipped; in {out}")


@app.command("shadow-report")
def shadow_report_cmd(
    out: Annotated[Path, typer.Option(help="Where shadow.json and shadow_flips.png go")] = Path("out/shadow"),
    from_time: FromTime = None,
    to_time: ToTime = None,
) -> None:
    """Compare the champion's verdicts with the challenger's (MODSTREAM_SHADOW_TOPIC), with labels."""
    from modstream.loop.replay import ReplayError, shadow_report
    from modstream.topics import RangeError

    settings = _settings()
    try:
        with console.status("reading the champion's and the challenger's verdicts"):
            c = shadow_report(settings, settings.shadow_topic, _range(from_time, to_time, None), out)
    except (RangeError, ReplayError) as exc:
        _misconfigured(str(exc))
    print(json.dumps(c.as_dict(), default=str))
    for name, m in (("champion", c.a_labels), ("challenger", c.b_labels)):
        console.print(
            f"{name:>10}: block precision {m.block_precision:.3f}, recall {m.block_recall:.3f}, "
            f"allow NPV {m.allow_npv:.3f} on {m.labelled} labelled posts"
        )
    console.print(f"{c.agreed}/{c.posts} agree, {len(c.flipped)} flipped; in {out}")


SHADOW_MODEL_HELP = (
    "A challenger's text model dir (its bundle's text/), served beside as MODSTREAM_SHADOW_TRITON_MODEL "
    "for MODSTREAM_SHADOW_MODEL_DIR"
)


@app.command("build-repo")
def build_repo(
    target: Annotated[str, typer.Option(help="cpu-embedded | cpu-onnx | gpu-tensorrt")] = "cpu-embedded",
    model: Annotated[Path | None, typer.Option(help="Content model dir (default: the cached trained model)")] = None,
    out: Annotated[Path, typer.Option(help="Triton model repository to write")] = Path("build/triton_repo"),
    max_batch_size: Annotated[int | None, typer.Option(help="Default: the target's measured default")] = None,
    queue_delay_us: Annotated[int | None, typer.Option(help="Default: the target's")] = None,
    instances: Annotated[int | None, typer.Option(help="Default: one per core on CPU, 1 on GPU")] = None,
    plan: Annotated[Path | None, typer.Option(help="gpu-tensorrt: the engine from build-engine")] = None,
    shadow_model: Annotated[Path | None, typer.Option(help=SHADOW_MODEL_HELP)] = None,
) -> None:
    """Write a Triton model repository for the content model (and a challenger's, beside it)."""
    from dataclasses import replace

    from modstream.triton_repo import TARGETS, RepoOptions
    from modstream.triton_repo import build_repo as build

    if target not in TARGETS:
        raise typer.BadParameter(f"target must be one of {', '.join(TARGETS)}")
    if model is None:
        from modstream.artifacts import ensure_models

        model = ensure_models(console).text
    defaults = RepoOptions.for_target(target)  # narrowed by the TARGETS check above
    given: dict[str, object] = {
        "max_batch_size": max_batch_size,
        "max_queue_delay_us": queue_delay_us,
        "instances": instances,
    }
    if max_batch_size is not None:  # preferred sizes must stay within the maximum
        given["preferred_batch_sizes"] = tuple(b for b in defaults.preferred_batch_sizes if b <= max_batch_size)
    options = replace(defaults, **{k: v for k, v in given.items() if v is not None})  # type: ignore[arg-type]
    path = build(target, model, out, options, plan=plan)
    if shadow_model is not None:  # its engine, on GPU, is its own dir's model.plan
        build(target, shadow_model, out, options, name=_settings().shadow_triton_model)
    console.print(f"wrote {target} repository to {path}")


PROFILE_HELP = "Default: measured on a GPU (docs/PERFORMANCE.md)"


@app.command("build-engine")
def build_engine(
    onnx: Annotated[Path, typer.Option(help="The fp32 ONNX model")],
    out: Annotated[Path, typer.Option(help="Where model.plan and config.pbtxt go")] = Path("build/engine"),
    min_batch: Annotated[int | None, typer.Option(help=PROFILE_HELP)] = None,
    opt_batch: Annotated[int | None, typer.Option(help=PROFILE_HELP)] = None,
    max_batch: Annotated[int | None, typer.Option(help=PROFILE_HELP)] = None,
    min_seq: Annotated[int | None, typer.Option(help=PROFILE_HELP)] = None,
    opt_seq: Annotated[int | None, typer.Option(help=PROFILE_HELP)] = None,
    max_seq: Annotated[int | None, typer.Option(help=PROFILE_HELP)] = None,
    int8: bool = False,
    timing_cache: Path | None = None,
) -> None:
    """GPU only: build a TensorRT engine (FP16, optional INT8) with an optimization profile."""
    from dataclasses import replace

    from modstream.engine import EngineProfile, EngineUnavailable
    from modstream.engine import build_engine as build

    given = {
        "min_batch": min_batch,
        "opt_batch": opt_batch,
        "max_batch": max_batch,
        "min_seq": min_seq,
        "opt_seq": opt_seq,
        "max_seq": max_seq,
    }
    try:
        profile = replace(EngineProfile(), **{k: v for k, v in given.items() if v is not None})
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    try:
        plan = build(onnx, out, profile, fp16=True, int8=int8, timing_cache=timing_cache)
    except EngineUnavailable as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from exc
    console.print(f"wrote {plan}")


@stack_app.command("up")
def stack_up(
    state_dir: Path = DEFAULT_STATE,
    model_dir: Annotated[Path | None, typer.Option(help="Trained text model dir (default: train or reuse)")] = None,
    shadow_model: Annotated[Path | None, typer.Option(help=SHADOW_MODEL_HELP)] = None,
    memory: Annotated[
        bool, typer.Option(help="Keep the broker's topics in memory: a little faster, and `stack down` empties them")
    ] = False,
) -> None:
    """Start the stack in the background and print its endpoints. The broker keeps its topics and
    consumer offsets under STATE_DIR/s3, so they outlive `stack down`."""
    from modstream.stack import LocalStack
    from modstream.triton_repo import build_repo

    if model_dir is None:
        from modstream.artifacts import ensure_models

        model_dir = ensure_models(console).text
    repo = build_repo("cpu-embedded", model_dir, state_dir / "triton_repo")
    shadow_name = _settings().shadow_triton_model
    if shadow_model is not None:
        build_repo("cpu-embedded", shadow_model, repo, name=shadow_name)
    else:  # not one an earlier `stack up --shadow-model` left
        shutil.rmtree(repo / shadow_name, ignore_errors=True)
    endpoints = LocalStack(state_dir, repo, durable=not memory, console=console).up()
    print(json.dumps(endpoints.__dict__, indent=2))
    console.print(  # what the learning loop's commands need to reach this stack (a promotion loads text models)
        f"export MODSTREAM_KAFKA_BOOTSTRAP={endpoints.kafka_bootstrap} MODSTREAM_REDIS_URL={endpoints.redis_url} "
        f"MODSTREAM_TRITON_URL={endpoints.triton_grpc} MODSTREAM_TRITON_REPO={repo.absolute()}",
        highlight=False,
        soft_wrap=True,
    )


@stack_app.command("down")
def stack_down(
    state_dir: Path = DEFAULT_STATE,
    wipe: Annotated[bool, typer.Option(help="Also delete the broker's topics (STATE_DIR/s3)")] = False,
) -> None:
    """Stop what ``stack up`` started; the broker's topics stay for the next ``stack up`` unless --wipe."""
    from modstream.stack import S3_DIR, LocalStack

    LocalStack(state_dir, state_dir / "triton_repo", console=console).down()
    if wipe:
        shutil.rmtree(state_dir / S3_DIR, ignore_errors=True)


@stack_app.command("status")
def stack_status(state_dir: Path = DEFAULT_STATE) -> None:
    """Show whether each server of the stack is running."""
    from modstream.stack import LocalStack

    status = LocalStack(state_dir, state_dir / "triton_repo", console=console).status()
    print(status)
    if not status.up:
        raise typer.Exit(1)


if __name__ == "__main__":
    app()
