"""The ``modstream`` command line: parse, call, render. Heavy imports (training, the stack) happen
inside commands; the options are declared in modstream/options.py, the output in modstream/render.py."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn, TypeVar

import typer

from modstream import options as opt
from modstream import render
from modstream.render import console

if TYPE_CHECKING:
    from pydantic_settings import BaseSettings

    from modstream.loop.gate import Gate
    from modstream.loop.promotion import Switch
    from modstream.loop.retrain_decision import Decided
    from workers.config import Settings
    from workers.feedback.settings import FeedbackSettings

S = TypeVar("S", bound="BaseSettings")

# The commands show their own progress; the hub's and transformers' bars ("Writing model shards")
# would interleave with it. Set before any of them is imported; a user's own setting wins.
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

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

    from workers.errors import describe

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
    from workers.feedback.settings import FeedbackSettings

    return _load(FeedbackSettings)


def _misconfigured(message: str) -> NoReturn:
    from workers.runtime.startup import EXIT_MISCONFIGURED

    render.error(message)
    raise typer.Exit(EXIT_MISCONFIGURED)


@app.command()
def worker(log_level: str = "INFO") -> None:
    """Run the moderation worker (configured by MODSTREAM_* variables) until SIGTERM."""
    from workers.errors import Misconfigured
    from workers.runtime.startup import without

    with without():  # a restarted worker is back in seconds sooner (workers/runtime/startup.py)
        from workers.main import main

    settings = _service(log_level)
    try:
        main(settings)
    except Misconfigured as exc:
        _misconfigured(str(exc))


@app.command()
def health(
    models: opt.CheckModels = True,
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
    from workers.errors import Misconfigured
    from workers.feedback.app import main

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
    from workers.state.keyspace import Keyspace
    from workers.state.profile_fields import contract

    text = json.dumps(contract(Keyspace(_settings().redis_prefix)), indent=2)
    if out is None:
        print(text)
        return
    out.write_text(text + "\n")
    console.print(f"wrote the profile contract to {out}")


ranking_app = typer.Typer(help="The popularity prior: a broad ranking of domains (workers/data/DATA_CARD.md).")
app.add_typer(ranking_app, name="ranking")


@ranking_app.command("refresh")
def ranking_refresh(
    source: Annotated[Path, typer.Argument(help="A ranking, best first: one host, origin or 'rank,domain' a line")],
    note: Annotated[str, typer.Option(help="Where it comes from: name, date, licence (the file's header)")],
    top: Annotated[int, typer.Option(min=1000, help="How many registrable domains to keep")] = 100_000,
    out: Annotated[Path | None, typer.Option(help="Where to write (default: the shipped popular_domains.txt)")] = None,
) -> None:
    """Rebuild the shipped popularity prior from a ranking file; record its source in the data card."""
    from modstream.ranking import RankingError, refresh
    from workers.text.urls import POPULAR_FILE

    target = out or Path(__file__).resolve().parent.parent / "workers" / "data" / POPULAR_FILE
    try:
        n = refresh(source, target, top, note)
    except RankingError as exc:
        render.error(f"ranking refresh: {exc}")
        raise typer.Exit(2) from None
    console.print(f"wrote {n} domains to {target}")


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
    from modstream.serving.artifacts import ensure_models

    print(ensure_models(console).bundle)


def _switch(make: Callable[[Settings], Switch]) -> None:
    """Make a switch of the served bundles and show it, or exit 2 with one line saying why it cannot be made."""
    from modstream.loop.join import DatasetError
    from modstream.loop.promotion import PromotionError

    settings = _settings()
    try:
        switch = make(settings)
    except (PromotionError, DatasetError) as exc:
        _misconfigured(str(exc))
    render.switched(switch)


@models_app.command("promote")
def models_promote(bundle: Annotated[Path, typer.Argument(help="Bundle dir (text/ and decision/) to serve")]) -> None:
    """Serve BUNDLE: load its text model into Triton if it is another one, then swap the MODSTREAM_MODEL_DIR
    link atomically; running workers switch between batches."""
    from modstream.loop.promotion import promote_configured

    _switch(lambda settings: promote_configured(settings, bundle))


@models_app.command("shadow")
def models_shadow(bundle: Annotated[Path, typer.Argument(help="Bundle dir (text/ and decision/) to shadow")]) -> None:
    """Shadow BUNDLE: load its text model into Triton as the challenger's if it is another one, then swap
    the MODSTREAM_SHADOW_MODEL_DIR link; running workers switch the challenger between batches."""
    from modstream.loop.promotion import shadow_configured

    _switch(lambda settings: shadow_configured(settings, bundle))


@models_app.command("rollback")
def models_rollback() -> None:
    """Serve the bundle promoted before the current one (its text model loaded into Triton again if need be)."""
    from modstream.loop.promotion import rollback_configured

    _switch(rollback_configured)


@app.command()
def demo(
    posts: Annotated[int, typer.Option(min=50, help="Posts to replay")] = 2000,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as one JSON object")] = False,
    label_share: opt.LabelShare = 0.0,
    keep_stack: opt.KeepStack = None,
) -> None:
    """Run the whole pipeline on the embedded stack and summarise it."""
    from modstream.harness.demo import run_demo

    summary = run_demo(posts, console, state_dir=keep_stack, label_share=label_share, keep_stack=keep_stack is not None)
    if keep_stack is not None:
        from modstream.stack.local import LocalStack

        endpoints = LocalStack(keep_stack / "stack", keep_stack / "triton_repo").status().endpoints
        render.stack_left_up(endpoints, keep_stack)
    if as_json:
        print(summary.to_json())
    else:
        render.demo(summary)
    if summary.lost:
        raise typer.Exit(1)


@app.command()
def bench(
    posts: Annotated[int, typer.Option(min=100, help="Posts per throughput phase")] = 2000,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as one JSON object")] = False,
    out: Annotated[Path, typer.Option(help="Where bench.json and the PNG plots go")] = Path("out/bench"),
    latency_s: Annotated[
        float | None, typer.Option(min=1, help="Seconds of each paced latency run (default: the bench's)")
    ] = None,
    steady_s: Annotated[
        float | None,
        typer.Option(min=0.5, help="Steady runs as long as the model-only ceiling serves in S seconds (the bench's)"),
    ] = None,
) -> None:
    """Measure model-only, Triton, pipeline, naive and short-circuit throughput, latency, and the
    cascade against the full pipeline (simulated mixes, and held-out real posts from unknown senders)."""
    from modstream.harness.bench import LATENCY_S, STEADY_S, run_bench

    result = run_bench(posts, out, console, latency_s or LATENCY_S, steady_s or STEADY_S)
    if as_json:
        print(json.dumps(result.summary()))
        return
    render.bench(result.summary(), out)


@app.command("bench-redis")
def bench_redis(
    batches: Annotated[int, typer.Option(min=1, help="Timed batches per server")] = 60,
    size: Annotated[int, typer.Option(min=1, help="Posts per batch")] = 256,
    shards: Annotated[int, typer.Option(min=1, help="MODSTREAM_REDIS_SIGNAL_SHARDS for the cluster")] = 64,
    out: Annotated[Path | None, typer.Option(help="Also write bench-redis.json and redis_cluster.png here")] = None,
) -> None:
    """Enrichment round trip per batch: one Redis against a local three-primary Redis Cluster."""
    from modstream.harness.redis_bench import plot, run

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
    only: opt.ChaosOnly = None,
) -> None:
    """Inject faults during replays and count lost, duplicate and degraded verdicts per scenario."""
    from modstream.harness.chaos import SCENARIOS, run_chaos, table, write_table

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
    data: opt.TextData = None,
    test: opt.TextTest = None,
    base: Annotated[str | None, typer.Option(help="Base checkpoint dir or hub id")] = None,
    out: Annotated[Path, typer.Option(help="Output model dir")] = Path("out/text-model"),
    epochs: Annotated[int | None, typer.Option(min=1)] = None,
    max_length: Annotated[int | None, typer.Option(min=8, max=512)] = None,
    seed: Annotated[int | None, typer.Option()] = None,
    lr: Annotated[float | None, typer.Option(min=1e-7, max=1e-2, help="Peak learning rate (AdamW)")] = None,
    unfreeze_embeddings: opt.UnfreezeEmbeddings = False,
    balanced: Annotated[bool, typer.Option(help="Weight the loss by inverse class frequency")] = False,
) -> None:
    """Fine-tune DistilBERT and the char n-gram model, export ONNX (+ int8), write a model card and plots."""
    if test is not None and data is None:
        raise typer.BadParameter("--test needs --data (the built-in posts keep their own test split)")
    from training.text_model.train import DEFAULT_EPOCHS, DEFAULT_LR, DEFAULT_MAX_LENGTH, DEFAULT_SEED
    from training.text_model.train import train_text as train
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
    from training.text_model.scoring import eval_text as evaluate

    if model is None:
        from modstream.serving.artifacts import ensure_models

        model = ensure_models(console).text
    result = evaluate(data, model)
    if as_json:
        print(json.dumps(result))
        return
    render.evaluation(result)


def _refuse(given: Mapping[str, object], why: str) -> None:
    """Exit 2 naming every option given (not None, not False) that ``why`` rules out."""
    if named := [f"--{name.replace('_', '-')}" for name, value in given.items() if value not in (None, False)]:
        _misconfigured(f"{', '.join(named)} {why}")


@app.command("train-decision")
def train_decision(
    text_model: Annotated[Path | None, typer.Option(help="Simulator: the text model scoring the texts")] = None,
    out: opt.DecisionOut = None,
    posts: opt.SimulatedPosts = None,
    seed: opt.SimulatorSeed = None,
    without_signals: opt.WithoutSignals = False,
    data: opt.LabelsData = None,
    serving: opt.ComparedServing = None,
    holdout: opt.Holdout = None,
    max_review_share: opt.ReviewCeiling = None,
    max_ham_blocked: opt.HamBlocked = None,
    min_block_precision: opt.BlockPrecision = None,
    confidence: opt.Confidence = None,
) -> None:
    """Train the LightGBM decision model: on the platform simulator, or with --data on the platform's
    own labels, gated like `retrain` (exit 1 when not better). A new text model: `retrain`."""
    gate_options = {"serving": serving, "holdout": holdout, "max_review_share": max_review_share,
                    "max_ham_blocked": max_ham_blocked, "min_block_precision": min_block_precision,
                    "confidence": confidence}  # fmt: skip
    if data is not None:
        _refuse({"text_model": text_model, "posts": posts, "seed": seed, "without_signals": without_signals},
                "train on the simulator, not with --data (a new text model: `modstream retrain`)")  # fmt: skip
        _train_on_labels(data, serving, out or opt.RETRAINED, holdout,
                         opt.gate_from(max_review_share, max_ham_blocked, min_block_precision, confidence))  # fmt: skip
        return
    _refuse(gate_options, "need --data (the simulator's model has no serving model to beat)")
    from modstream.serving.artifacts import ensure_models, train_on_simulator
    from training.corpora.spamassassin import spamassassin_splits
    from workers.config import cache_root

    card = train_on_simulator(
        text_model or ensure_models(console).text,
        out or opt.SIMULATED,
        spamassassin_splits(cache_root()),
        n_posts=opt.SIMULATED_POSTS if posts is None else posts,
        seed=opt.SIMULATOR_SEED if seed is None else seed,
        signals=not without_signals,
    )
    print(card.model_dump_json(include={"version", "thresholds", "validation", "test"}, indent=2))


def _train_on_labels(data: Path, serving: Path | None, out: Path, holdout: float | None, gate: Gate) -> None:
    from modstream.loop.join import DatasetError
    from modstream.loop.retrain_decision import HOLDOUT, retrain_decision

    try:
        decided = retrain_decision(data, serving or _settings().model_dir, out, gate, holdout or HOLDOUT)
    except DatasetError as exc:
        _misconfigured(str(exc))
    print(json.dumps(decided.write_report(out, gate.confidence), indent=2))
    _gated(decided, out)


def _gated(decided: Decided, out: Path) -> None:
    """Show the gate's judgement; exit 1 unless the challenger is better."""
    render.decided(decided, out)
    if not decided.judgement.better:
        raise typer.Exit(1)


@dataset_app.command("build")
def dataset_build(
    out: Annotated[Path, typer.Option(help="Parquet file to write")] = Path("out/dataset.parquet"),
    from_time: opt.FromTime = None,
    to_time: opt.ToTime = None,
    from_offsets: opt.FromOffsets = None,
    weak_labels: Annotated[bool, typer.Option(help="Label posts no moderator labelled by their user reports")] = False,
    dead_letter: opt.DeadLetter = True,
) -> None:
    """Join the verdicts' logged feature rows with moderator labels from the feedback topic, as Parquet."""
    from modstream.loop.dataset import build_dataset
    from modstream.loop.join import DatasetError
    from modstream.loop.topics import RangeError, parse_range

    try:
        rng = parse_range(from_time, to_time, from_offsets)
        with console.status("reading the verdicts and the feedback topic, joining"):
            counts = build_dataset(_settings(), rng, out, weak_labels=weak_labels, dead_letter=dead_letter)
    except (DatasetError, RangeError) as exc:
        _misconfigured(str(exc))
    print(json.dumps(counts.as_dict()))
    render.dataset(counts, out)


@app.command()
def retrain(
    from_time: opt.FromTime = None,
    to_time: opt.ToTime = None,
    out: Annotated[Path, typer.Option(help="The new bundle, report.json and report.png")] = opt.RETRAINED,
    serving: opt.Champion = None,
    base: opt.TextBase = None,
    epochs: opt.TextEpochs = None,
    text_folds: opt.TextFolds = None,
    holdout: opt.Holdout = None,
    max_review_share: opt.ReviewCeiling = None,
    max_ham_blocked: opt.HamBlocked = None,
    min_block_precision: opt.BlockPrecision = None,
    confidence: opt.Confidence = None,
    dead_letter: opt.DeadLetter = True,
    promote_if_better: Annotated[
        bool, typer.Option(help="Serve the new bundle (as `models promote`) when the gate says better: for a schedule")
    ] = False,
) -> None:
    """The weekly retrain: labelled posts and their texts, text model, rescore, decision model,
    gate, report. Exit 0 when the challenger is better, 1 when not, 2 on bad input."""
    from modstream.loop.join import DatasetError
    from modstream.loop.retrain import Options
    from modstream.loop.retrain import retrain as run
    from modstream.loop.topics import RangeError, parse_range

    settings = _settings()
    champion = serving or settings.model_dir
    if out.resolve() == champion.resolve():
        _misconfigured(f"--out {out} is the champion bundle: write the challenger elsewhere")
    gate = opt.gate_from(max_review_share, max_ham_blocked, min_block_precision, confidence)
    options = opt.merged(Options(gate), holdout=holdout, base=base, epochs=epochs, text_folds=text_folds,
                         dead_letter=dead_letter)  # fmt: skip
    try:
        done = run(settings, parse_range(from_time, to_time, None), champion, out, options, progress=console.print)
    except (DatasetError, RangeError) as exc:
        _misconfigured(str(exc))
    print(json.dumps(done.report, indent=2, default=str))
    _gated(done.decided, out)  # exits 1 unless better
    if promote_if_better:
        from modstream.loop.promotion import promote_configured

        _switch(lambda s: promote_configured(s, out))


@app.command("replay")
def replay_cmd(
    bundle: Annotated[Path, typer.Option(help="Bundle dir (text/ and decision/) to re-decide with")],
    out: Annotated[Path, typer.Option(help="Where replay.json and flips.png go")] = Path("out/replay"),
    from_time: opt.FromTime = None,
    to_time: opt.ToTime = None,
    from_offsets: opt.FromOffsets = None,
    output_topic: Annotated[str | None, typer.Option(help="Publish the re-decided verdicts here")] = None,
    triton_model: opt.RescoringModel = None,
) -> None:
    """Re-decide a range of logged feature rows with a bundle's decision model (its text model rescoring
    the texts another one scored); report the flips."""
    from modstream.loop.join import DatasetError
    from modstream.loop.replay import ReplayError, replay
    from modstream.loop.topics import RangeError, parse_range

    try:
        with console.status(f"re-deciding the range with {bundle}"):
            rng = parse_range(from_time, to_time, from_offsets)
            report = replay(_settings(), bundle, rng, out, output_topic, triton_model)
    except (DatasetError, RangeError, ReplayError) as exc:
        _misconfigured(str(exc))
    print(report.to_json())
    render.replayed(report, out)


@app.command("shadow-report")
def shadow_report_cmd(
    out: Annotated[Path, typer.Option(help="Where shadow.json and shadow_flips.png go")] = Path("out/shadow"),
    from_time: opt.FromTime = None,
    to_time: opt.ToTime = None,
) -> None:
    """Compare the champion's verdicts with the challenger's (MODSTREAM_SHADOW_TOPIC), with labels."""
    from modstream.loop.replay import ReplayError, shadow_report
    from modstream.loop.topics import RangeError, parse_range

    settings = _settings()
    try:
        with console.status("reading the champion's and the challenger's verdicts"):
            rng = parse_range(from_time, to_time, None)
            report = shadow_report(settings, settings.shadow_topic, rng, out, settings.shadow_model_dir)
    except (RangeError, ReplayError) as exc:
        _misconfigured(str(exc))
    print(json.dumps(report.as_dict(), default=str))
    render.shadowed(report, out)


@app.command("build-repo")
def build_repo(
    target: Annotated[str, typer.Option(help="cpu-embedded | cpu-onnx | gpu-tensorrt")] = "cpu-embedded",
    model: Annotated[Path | None, typer.Option(help="Content model dir (default: the cached trained model)")] = None,
    out: Annotated[Path, typer.Option(help="Triton model repository to write")] = Path("build/triton_repo"),
    max_batch_size: Annotated[int | None, typer.Option(help="Default: the target's measured default")] = None,
    queue_delay_us: Annotated[int | None, typer.Option(help="Default: the target's")] = None,
    instances: Annotated[int | None, typer.Option(help="Default: one per core on CPU, 1 on GPU")] = None,
    plan: Annotated[Path | None, typer.Option(help="gpu-tensorrt: the engine from build-engine")] = None,
    shadow_model: opt.ShadowModel = None,
) -> None:
    """Write a Triton model repository for the content model (and a challenger's, beside it)."""
    from modstream.serving.triton_repo import TARGETS, RepoOptions
    from modstream.serving.triton_repo import build_repo as build

    if target not in TARGETS:
        raise typer.BadParameter(f"target must be one of {', '.join(TARGETS)}")
    if model is None:
        from modstream.serving.artifacts import ensure_models

        model = ensure_models(console).text
    defaults = RepoOptions.for_target(target)  # narrowed by the TARGETS check above
    # Preferred sizes must stay within the maximum.
    within = None if max_batch_size is None else tuple(b for b in defaults.preferred_batch_sizes if b <= max_batch_size)
    options = opt.merged(defaults, max_batch_size=max_batch_size, max_queue_delay_us=queue_delay_us,
                         instances=instances, preferred_batch_sizes=within)  # fmt: skip
    path = build(target, model, out, options, plan=plan)
    if shadow_model is not None:  # its engine, on GPU, is its own dir's model.plan
        build(target, shadow_model, out, options, name=_settings().shadow_triton_model)
    console.print(f"wrote {target} repository to {path}")


@app.command("build-engine")
def build_engine(
    onnx: Annotated[Path, typer.Option(help="The fp32 ONNX model")],
    out: Annotated[Path, typer.Option(help="Where model.plan and config.pbtxt go")] = Path("build/engine"),
    min_batch: opt.ProfileBound = None,
    opt_batch: opt.ProfileBound = None,
    max_batch: opt.ProfileBound = None,
    min_seq: opt.ProfileBound = None,
    opt_seq: opt.ProfileBound = None,
    max_seq: opt.ProfileBound = None,
    int8: bool = False,
    timing_cache: Path | None = None,
) -> None:
    """GPU only: build a TensorRT engine (FP16, optional INT8) with an optimization profile."""
    from modstream.serving.engine import EngineProfile, EngineUnavailable
    from modstream.serving.engine import build_engine as build

    try:
        profile = opt.merged(EngineProfile(), min_batch=min_batch, opt_batch=opt_batch, max_batch=max_batch,
                             min_seq=min_seq, opt_seq=opt_seq, max_seq=max_seq)  # fmt: skip
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
    state_dir: Path = opt.DEFAULT_STATE,
    model_dir: Annotated[Path | None, typer.Option(help="Trained text model dir (default: train or reuse)")] = None,
    shadow_model: opt.ShadowModel = None,
    memory: opt.InMemory = False,
) -> None:
    """Start the stack in the background and print its endpoints. The broker keeps its topics and
    consumer offsets under STATE_DIR/s3, so they outlive `stack down`."""
    from modstream.serving.triton_repo import build_repo
    from modstream.stack.local import LocalStack

    if model_dir is None:
        from modstream.serving.artifacts import ensure_models

        model_dir = ensure_models(console).text
    repo = build_repo("cpu-embedded", model_dir, state_dir / "triton_repo")
    shadow_name = _settings().shadow_triton_model
    if shadow_model is not None:
        build_repo("cpu-embedded", shadow_model, repo, name=shadow_name)
    else:  # not one an earlier `stack up --shadow-model` left
        shutil.rmtree(repo / shadow_name, ignore_errors=True)
    endpoints = LocalStack(state_dir, repo, durable=not memory, console=console).up()
    print(json.dumps(endpoints.__dict__, indent=2))
    render.stack_exports(endpoints, repo)


@stack_app.command("down")
def stack_down(
    state_dir: Path = opt.DEFAULT_STATE,
    wipe: Annotated[bool, typer.Option(help="Also delete the broker's topics (STATE_DIR/s3)")] = False,
) -> None:
    """Stop what ``stack up`` started; the broker's topics stay for the next ``stack up`` unless --wipe."""
    from modstream.stack.local import S3_DIR, LocalStack

    LocalStack(state_dir, state_dir / "triton_repo", console=console).down()
    if wipe:
        shutil.rmtree(state_dir / S3_DIR, ignore_errors=True)


@stack_app.command("status")
def stack_status(state_dir: Path = opt.DEFAULT_STATE) -> None:
    """Show whether each server of the stack is running."""
    from modstream.stack.local import LocalStack

    status = LocalStack(state_dir, state_dir / "triton_repo", console=console).status()
    print(status)
    if not status.up:
        raise typer.Exit(1)


if __name__ == "__main__":
    app()
