"""The ``modstream`` command line. Heavy imports (training, the stack) happen inside commands."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console

if TYPE_CHECKING:
    from workers.config import Settings

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Real-time spam moderation on Kafka.")
stack_app = typer.Typer(no_args_is_help=True, help="The embedded local stack: Tansu, Redis, tritonserver.")
app.add_typer(stack_app, name="stack")
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


def _settings() -> Settings:
    """The settings from MODSTREAM_* variables, or exit 2 with one line naming what is wrong."""
    from pydantic import ValidationError

    from workers.config import Settings
    from workers.isolation import describe

    try:
        return Settings()
    except ValidationError as exc:
        _misconfigured(f"bad MODSTREAM_* settings: {describe(exc)}")


def _misconfigured(message: str) -> NoReturn:
    from workers.startup import EXIT_MISCONFIGURED

    console.print(f"[red]error:[/] {message}", highlight=False)
    raise typer.Exit(EXIT_MISCONFIGURED)


@app.command()
def worker(log_level: str = "INFO") -> None:
    """Run the moderation worker (configured by MODSTREAM_* variables) until SIGTERM."""
    from workers.main import main
    from workers.startup import Misconfigured

    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        main(_settings())
    except Misconfigured as exc:
        _misconfigured(str(exc))


@app.command()
def feedback(log_level: str = "INFO") -> None:
    """Run the feedback worker: reports and labels update reputation counters and ban lists."""
    from workers.feedback import main

    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    main(_settings())


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

    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    main(_settings())


@app.command()
def models() -> None:
    """Train (or reuse from the cache) the content and decision models; print their bundle dir."""
    from modstream.artifacts import ensure_models

    print(ensure_models(console).bundle)


@app.command()
def demo(
    posts: Annotated[int, typer.Option(min=50, help="Posts to replay")] = 2000,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as one JSON object")] = False,
) -> None:
    """Run the whole pipeline on the embedded stack and summarise it."""
    from modstream.demo import run_demo

    summary = run_demo(posts, console)
    if as_json:
        print(summary.to_json())
        return
    s = summary
    console.print(f"\n[bold]modstream demo[/] — {s.posts} posts (burst replay)")
    console.print(f"  verdicts {s.verdicts}, dead letters {s.dead_letters}, lost {s.lost}")
    console.print(f"  decisions {s.decisions}, review share {s.review_share:.1%}, degraded {s.degraded}")
    console.print(f"  accuracy on held-out posts (allow/block against labels) {s.accuracy:.2%}")
    console.print(f"  throughput {s.throughput_posts_per_s} posts/s, end-to-end p50 {s.p50_ms} ms, p99 {s.p99_ms} ms")
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
) -> None:
    """Fine-tune DistilBERT and the char n-gram model, export ONNX (+ int8), write a model card and plots."""
    if test is not None and data is None:
        raise typer.BadParameter("--test needs --data (the built-in posts keep their own test split)")
    from training.text_model import DEFAULT_EPOCHS, DEFAULT_MAX_LENGTH, DEFAULT_SEED
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
        console.print(f"{key:>10}: {value:.4f}" if isinstance(value, float) else f"{key:>10}: {value}")


@app.command("train-decision")
def train_decision(
    text_model: Annotated[Path | None, typer.Option(help="Content model dir scoring the texts")] = None,
    out: Annotated[Path, typer.Option(help="Output model dir")] = Path("out/decision-model"),
    posts: Annotated[int, typer.Option(min=1000, help="Simulated posts")] = 24_000,
    seed: int = 11,
) -> None:
    """Train the LightGBM decision model on the platform simulator; choose thresholds; report."""
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
        out,
        n_posts=posts,
        seed=seed,
        text_version=version,
    )
    print(card.model_dump_json(include={"version", "thresholds", "validation", "test"}, indent=2))


@app.command("build-repo")
def build_repo(
    target: Annotated[str, typer.Option(help="cpu-embedded | cpu-onnx | gpu-tensorrt")] = "cpu-embedded",
    model: Annotated[Path | None, typer.Option(help="Content model dir (default: the cached trained model)")] = None,
    out: Annotated[Path, typer.Option(help="Triton model repository to write")] = Path("build/triton_repo"),
    max_batch_size: Annotated[int | None, typer.Option(help="Default: the target's measured default")] = None,
    queue_delay_us: Annotated[int | None, typer.Option(help="Default: the target's")] = None,
    instances: Annotated[int | None, typer.Option(help="Default: one per core on CPU, 1 on GPU")] = None,
    plan: Annotated[Path | None, typer.Option(help="gpu-tensorrt: the engine from build-engine")] = None,
) -> None:
    """Write a Triton model repository for the content model."""
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
    console.print(f"wrote {target} repository to {path}")


@app.command("build-engine")
def build_engine(
    onnx: Annotated[Path, typer.Option(help="The fp32 ONNX model")],
    out: Annotated[Path, typer.Option(help="Where model.plan and config.pbtxt go")] = Path("build/engine"),
    min_batch: int = 1,
    opt_batch: int = 32,
    max_batch: int = 64,
    min_seq: int = 8,
    opt_seq: int = 64,
    max_seq: int = 128,
    int8: bool = False,
    timing_cache: Path | None = None,
) -> None:
    """GPU only: build a TensorRT engine (FP16, optional INT8) with an optimization profile."""
    from modstream.engine import EngineProfile, EngineUnavailable
    from modstream.engine import build_engine as build

    profile = EngineProfile(min_batch, opt_batch, max_batch, min_seq, opt_seq, max_seq)
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
) -> None:
    """Start the stack in the background and print its endpoints."""
    from modstream.stack import LocalStack
    from modstream.triton_repo import build_repo

    if model_dir is None:
        from modstream.artifacts import ensure_models

        model_dir = ensure_models(console).text
    repo = build_repo("cpu-embedded", model_dir, state_dir / "triton_repo")
    print(json.dumps(LocalStack(state_dir, repo, console=console).up().__dict__, indent=2))


@stack_app.command("down")
def stack_down(state_dir: Path = DEFAULT_STATE) -> None:
    """Stop what ``stack up`` started."""
    from modstream.stack import LocalStack

    LocalStack(state_dir, state_dir / "triton_repo", console=console).down()


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
