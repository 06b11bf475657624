"""The ``modstream`` command line. Heavy imports (training, the stack) happen inside commands."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

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
    from schemas import DeadLetter, FeedbackEvent, PostEvent, Verdict

    schemas = {m.__name__: m.model_json_schema() for m in (PostEvent, Verdict, FeedbackEvent, DeadLetter)}
    if out is None:
        print(json.dumps(schemas, indent=2))
        return
    out.mkdir(parents=True, exist_ok=True)
    for name, body in schemas.items():
        (out / f"{name}.schema.json").write_text(json.dumps(body, indent=2) + "\n")
    console.print(f"wrote {len(schemas)} schemas to {out}")


@app.command()
def worker(log_level: str = "INFO") -> None:
    """Run the moderation worker (configured by MODSTREAM_* variables) until SIGTERM."""
    from workers.main import main

    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    main()


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
    console.print(f"  accuracy (allow/block against labels) {s.accuracy:.2%}")
    console.print(f"  throughput {s.throughput_posts_per_s} posts/s, end-to-end p50 {s.p50_ms} ms, p99 {s.p99_ms} ms")
    if s.lost:
        raise typer.Exit(1)


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
