"""How the commands' results read on a terminal: rich lines on stderr. What a command prints to stdout
(JSON, a path, a table for a file) is its data, and the command prints that itself."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

if TYPE_CHECKING:
    from modstream.harness.demo import Summary
    from modstream.loop.gate import Side
    from modstream.loop.join import Counts
    from modstream.loop.promotion import Switch
    from modstream.loop.replay import ReplayReport, ShadowReport
    from modstream.loop.retrain_decision import Decided
    from modstream.stack.local import Endpoints

console = Console(stderr=True)


def error(message: str) -> None:
    """One line, however long: in a service's JSON log once it has one, else in red."""
    from workers.logs import JsonFormatter

    if any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers):
        logging.getLogger("modstream").error(message)
    else:
        console.print(f"[red]error:[/] {message}", highlight=False, soft_wrap=True)


def switched(switch: Switch) -> None:
    """A promotion's, shadowing's or rollback's outcome, and what Triton loaded and retired for it."""
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


def sides(by_name: Mapping[str, Side], posts: str) -> None:
    for name, s in by_name.items():
        console.print(
            f"{name:>10} on {s.n} {posts}: block-F1 {s.block_f1:.3f} (precision {s.block_precision:.3f}), "
            f"ham blocked {s.ham_blocked}/{s.ham}, review {s.review_share:.1%}"
        )


def decided(d: Decided, out: Path) -> None:
    """Both sides on every labelled post and on the latest alone, where the bundle went, and the
    gate's one line."""
    sides({"challenger": d.challenger, "champion": d.champion}, "labelled posts")
    sides(d.latest, "latest posts")
    console.print(f"bundle, report.json and report.png in {out}")
    if not d.judgement.better:
        console.print(f"[yellow]{d.judgement.line()}[/]", highlight=False, soft_wrap=True)
    else:
        console.print(d.judgement.line())


def dataset(counts: Counts, out: Path) -> None:
    console.print(
        f"{counts.posts} posts, {counts.labelled} labelled ({counts.spam_share:.1%} spam), "
        f"{counts.unmatched_labels} labels for posts outside the range, {counts.bad_feedback} bad feedback "
        f"records -> {out}"
    )


def replayed(report: ReplayReport, out: Path) -> None:
    c, r = report.comparison, report.rescored
    if r.triton_model is not None:
        console.print(
            f"{len(r.verdicts)} texts rescored by the bundle's text model through Triton model {r.triton_model!r}, "
            f"{r.no_post_event} verdicts left out without their post event"
        )
    elif r.no_post_event:
        console.print(f"Triton not called: none of {r.no_post_event} verdicts to rescore has its post event")
    console.print(f"{c.agreed}/{c.posts} decisions reproduced ({c.agreement:.2%}), {len(c.flipped)} flipped; in {out}")


def shadowed(report: ShadowReport, out: Path) -> None:
    """Both sides on the labelled posts, the flips, and where the label queue is."""
    c = report.comparison
    for name, m in (("champion", c.a_labels), ("challenger", c.b_labels)):
        console.print(
            f"{name:>10}: block precision {m.block_precision:.3f}, recall {m.block_recall:.3f}, "
            f"allow NPV {m.allow_npv:.3f} on {m.labelled} labelled posts"
        )
    console.print(f"{c.agreed}/{c.posts} agree, {len(c.flipped)} flipped; in {out}")
    console.print(f"{report.queued} flipped posts without a label, to label first: {report.queue_file}")
    j, e = report.judgement, report.evidence
    judged = f"{e['retrain']} labelled posts of its retrain (out of fold) and {e['shadow']} labelled in shadow"
    console.print(f"gate on {judged}: {'no labelled post yet' if j is None else j.line()}")


def demo(s: Summary) -> None:
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


def stack_left_up(endpoints: Endpoints | None, state_dir: Path) -> None:
    """How to reach the stack a demo left up under ``state_dir`` (the loop's commands read these
    variables), and how to stop it."""
    if endpoints is not None:
        stack_exports(endpoints, state_dir / "triton_repo")
    console.print(f"the stack is still up: stop it with `modstream stack down --state-dir {state_dir / 'stack'}`")


def stack_exports(endpoints: Endpoints, repo: Path) -> None:
    """What workers and the learning loop's commands need to reach this stack (a promotion loads text
    models), with the sessions the embedded broker wants: a killed worker's successor decides again
    within seconds."""
    from modstream.stack.local import EMBEDDED_SETTINGS

    fast = " ".join(f"{k}={v}" for k, v in EMBEDDED_SETTINGS.items())
    console.print(
        f"export MODSTREAM_KAFKA_BOOTSTRAP={endpoints.kafka_bootstrap} MODSTREAM_REDIS_URL={endpoints.redis_url} "
        f"MODSTREAM_TRITON_URL={endpoints.triton_grpc} MODSTREAM_TRITON_REPO={repo.absolute()} {fast}",
        highlight=False,
        soft_wrap=True,
    )


def bench(summary: Mapping[str, object], out: Path) -> None:
    for key, value in summary.items():
        console.print(f"{key:>28}: {value}")
    console.print(f"details and plots in {out}")


def evaluation(result: Mapping[str, object]) -> None:
    """eval-text's metrics: floats to four places, the n-gram model's and the fused scores' on a line each."""
    for key, value in result.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in value.items())
        console.print(f"{key:>10}: {value:.4f}" if isinstance(value, float) else f"{key:>10}: {value}")
