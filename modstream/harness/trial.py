"""A new platform's first weeks through the loop, end to end on the embedded stack, with the
commands docs/LOOP.md runs: ``python -m modstream.harness.trial [--out DIR]``.

The platform is training/corpora/platforms.py's Instagram comments, which no default model trains on:
a labelled history, then the next week. Two workers on the same stack, each with its own topics
and Redis keys, so both see the same history before the next week:

* **before**: the default bundle decides the history, then the next week;
* **after**: the default bundle decides the history, moderators label all of it on the feedback
  topic (``--label-noise``, default 5%, of their ham labels on spam posts, as real moderation
  misses scams; the next week is judged on the true labels), ``modstream retrain`` runs over its
  range, ``modstream models promote`` serves the result hot, and the same worker, never
  restarted, decides the next week.

The retrain runs at its shipped defaults (``--epochs`` alone can change its text model's), and
the result is promoted whatever the gate said, so that the figures show what it would serve; the
gate's outcome is reported beside them. Posts come from brand-new accounts typing in the UI at a
human pace, spam and ham alike, so that the text decides.
Writes ``trial.json``, ``trial.png`` and ``next_week.jsonl`` (each post's decisions) to ``--out``.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from modstream.harness.bench import worker_env
from modstream.harness.demo import WorkerThread, simulated_labels
from modstream.harness.traffic import Collector, Record, produce_all
from modstream.loop.gate import Side
from modstream.serving.artifacts import ensure_models
from modstream.serving.triton_repo import build_repo
from modstream.stack.local import EMBEDDED_SESSION_TIMEOUT_S, Endpoints, LocalStack, create_topics
from schemas import Verdict
from training.corpora.platforms import PLATFORMS, LabelledPost, new_account_event, weeks
from workers.config import Settings
from workers.model_cards import DecisionModelCard, TextModelCard

HISTORY, NEXT_WEEK = 1600, 400
LABEL_NOISE = 0.05  # moderation as it is: a few percent of the ham labels are scams taken for real
RELOAD_S = 1.0  # the workers' model reload interval here: a promotion is served within it


def records(posts: Sequence[LabelledPost], prefix: str, seed: int, platform: str = "instagram") -> list[Record]:
    """Each post from a new account, typed in the UI at a human pace (training.corpora.platforms)."""
    rng = random.Random(seed)
    out = []
    for i, p in enumerate(posts):
        event = new_account_event(f"{prefix}{i}", f"{prefix}u{i}", p.text, datetime.now(UTC), rng, platform)
        out.append(Record(event.post_id, event.model_dump_json().encode(), int(p.spam)))
    return out


def mislabelled(posts: Sequence[Record], ham_share: float, seed: int) -> list[Record]:
    """``posts`` as moderators label them: ``ham_share`` of the ham labels on spam posts (the scams a
    moderator takes for real, the spam they miss), chosen at random among the spam."""
    spam = [i for i, r in enumerate(posts) if r.label]
    n_ham = len(posts) - len(spam)
    wrong = set(random.Random(seed).sample(spam, min(len(spam), round(ham_share / (1 - ham_share) * n_ham))))
    return [Record(r.key, r.value, 0) if i in wrong else r for i, r in enumerate(posts)]


def served(v: Verdict) -> str:
    return f"{v.model_versions['text']}/{v.model_versions['decision']}"


def side(posts: Sequence[Record], verdicts: dict[str, Verdict]) -> Side:
    from sklearn.metrics import roc_auc_score

    y = [int(bool(r.label)) for r in posts]  # every trial post is labelled
    decided = Side.of_decisions(y, [verdicts[r.key].decision for r in posts])
    return replace(decided, roc_auc=float(roc_auc_score(y, [verdicts[r.key].score for r in posts])))


@dataclass
class Trial:
    platform: str
    weeks_back: int
    epochs: int | None  # the retrain's text-model epochs; None: its default
    label_noise: float  # the share of the history's ham labels that are spam posts
    history: int
    history_spam: int
    next_week: int
    next_week_spam: int
    before: dict[str, float]
    after: dict[str, float]
    retrain_s: float
    retrain_exit: int
    gate: str
    promote_s: float
    served_after: list[str]  # the text and decision versions that decided the next week after the promotion
    lost: int


class Run:
    """One worker's topics, Redis keys and collector on the shared stack."""

    def __init__(self, ep: Endpoints, model_dir: Path, name: str, **overrides: Any) -> None:
        tag = f"trial-{name}-{uuid.uuid4().hex[:6]}"
        self.settings = Settings(
            kafka_bootstrap=ep.kafka_bootstrap,
            redis_url=ep.redis_url,  # pydantic wraps it in SecretStr
            triton_url=ep.triton_grpc,
            model_dir=model_dir,
            redis_prefix=f"modstream-{tag}:",
            group_id=tag,
            input_topic=f"posts-{tag}",
            output_topic=f"verdicts-{tag}",
            dlq_topic=f"dlq-{tag}",
            feedback_topic=f"feedback-{tag}",
            metrics_port=0,
            session_timeout_s=EMBEDDED_SESSION_TIMEOUT_S,
            **overrides,
        )
        s = self.settings
        create_topics(s.kafka_bootstrap, {s.input_topic: 4, s.output_topic: 4, s.dlq_topic: 1, s.feedback_topic: 1})
        self.collector = Collector(s, f"collector-{tag}")
        self.worker = WorkerThread(s)

    def decide(self, posts: Sequence[Record]) -> None:
        produce_all(self.settings, posts)
        if not self.collector.wait_for([r.key for r in posts], 120 + len(posts) / 10):
            raise RuntimeError(f"{self.settings.group_id}: posts without a verdict after the wait")

    def verdicts(self) -> dict[str, Verdict]:
        return self.collector.outcomes.verdicts

    def close(self) -> None:
        try:
            self.worker.close()
        finally:
            self.collector.close()


def cli(command: Sequence[str], s: Settings, console: Console) -> tuple[int, float]:
    """A ``modstream`` command as a user runs it, with ``s`` as its environment; its exit code and wall time."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "modstream.cli", *command], env=worker_env(s), check=False)
    elapsed = round(time.perf_counter() - started, 1)
    console.print(f"modstream {' '.join(command[:2])}: exit {done.returncode}, {elapsed} s")
    return done.returncode, elapsed


def with_spam_share(posts: Sequence[LabelledPost], n: int, share: float, seed: int = 7) -> list[LabelledPost]:
    """``n`` of the latest ``posts`` with ``share`` of them spam, in time order: the shortest latest
    stretch that holds enough of both, the rarer class there whole and the other sampled evenly, so
    that both run through the whole stretch as on a platform labelled at that share. ValueError when
    ``posts`` hold too few."""
    want = {True: round(n * share), False: n - round(n * share)}
    have = {True: 0, False: 0}
    start = len(posts)
    while start > 0 and any(have[c] < want[c] for c in want):
        start -= 1
        have[posts[start].spam] += 1
    if any(have[c] < want[c] for c in want):
        raise ValueError(f"{n} posts at {share:.0%} spam asked of {len(posts)} before the next week")
    stretch = posts[start:]
    rng = random.Random(seed)
    keep = {i for c in want for i in rng.sample([i for i, p in enumerate(stretch) if p.spam == c], want[c])}
    return [p for i, p in enumerate(stretch) if i in keep]


def window(
    history: int = HISTORY,
    next_week: int = NEXT_WEEK,
    weeks_back: int = 0,
    spam_share: float | None = None,
    platform: str = "instagram",
) -> tuple[list[LabelledPost], list[LabelledPost]]:
    """The history and the next week, which ends ``weeks_back`` weeks before the corpus's last post:
    the loop measured on more than one week; with ``spam_share``, the history is the latest posts
    before the next week at that share of spam (a platform whose moderators label otherwise).
    ValueError when the corpus is too short for it."""
    comments = PLATFORMS[platform]()
    comments = comments[: len(comments) - weeks_back * next_week]
    if spam_share is None:
        return weeks(comments, history, next_week)
    past, future = weeks(comments, len(comments) - next_week, next_week)
    return with_spam_share(past, history, spam_share), future


def run_trial(
    out: Path,
    console: Console,
    past: Sequence[LabelledPost],
    future: Sequence[LabelledPost],
    weeks_back: int = 0,
    epochs: int | None = None,
    platform: str = "instagram",
    label_noise: float = LABEL_NOISE,
) -> Trial:
    out.mkdir(parents=True, exist_ok=True)
    models = ensure_models(console)
    repo = build_repo("cpu-embedded", models.text, out / "triton_repo")
    link = out / "current"
    link.unlink(missing_ok=True)
    link.symlink_to(models.bundle.resolve())
    retrained = out / "retrained"
    with LocalStack(out / "stack", repo, console=console) as ep:
        before = Run(ep, models.bundle, "before")
        try:
            with console.status(f"before: the default bundle decides {len(past)} posts of history, then the next week"):
                before.decide(records(past, "h", 1, platform))
                before.decide(nxt := records(future, "n", 2, platform))
            champion = side(nxt, before.verdicts())
        finally:
            before.close()
        after = Run(ep, link, "after", triton_repo=repo, model_reload_s=RELOAD_S)
        try:
            with console.status("after: the same history, decided and labelled by moderators"):
                start = datetime.now(UTC)
                after.decide(hist := records(past, "h", 1, platform))
                labels = simulated_labels(mislabelled(hist, label_noise, 4), 1.0, 3)
                produce_all(after.settings, labels, topic=after.settings.feedback_topic)
                end = datetime.now(UTC)
            window = ["--from-time", start.isoformat(), "--to-time", end.isoformat()]
            options = [] if epochs is None else ["--epochs", str(epochs)]
            retrain_exit, retrain_s = cli(
                ["retrain", *window, *options, "--out", str(retrained)], after.settings, console
            )
            if not (retrained / "decision").is_dir():
                raise RuntimeError(f"modstream retrain wrote no bundle (exit {retrain_exit})")
            _, promote_s = cli(["models", "promote", str(retrained)], after.settings, console)
            time.sleep(2 * RELOAD_S)  # every worker has switched
            with console.status("after: the promoted bundle decides the next week"):
                after.decide(nxt_after := records(future, "n", 2, platform))
            verdicts = after.verdicts()
        finally:
            after.close()
    report = json.loads((retrained / "report.json").read_text())
    trial = Trial(
        platform=platform,
        weeks_back=weeks_back,
        epochs=epochs,
        label_noise=label_noise,
        history=len(past),
        history_spam=sum(p.spam for p in past),
        next_week=len(future),
        next_week_spam=sum(p.spam for p in future),
        before=champion.as_dict(),
        after=side(nxt_after, verdicts).as_dict(),
        retrain_s=retrain_s,
        retrain_exit=retrain_exit,
        gate=str(report["decision"]["gate"]["outcome"]),
        promote_s=promote_s,
        served_after=sorted({served(verdicts[r.key]) for r in nxt_after}),
        lost=2 * (len(past) + len(future)) - len(before.verdicts()) - len(verdicts),
    )
    text, decision = TextModelCard.load(retrained / "text"), DecisionModelCard.load(retrained / "decision")
    expected = f"{text.version}/{decision.version}"
    if trial.served_after != [expected]:
        raise RuntimeError(f"the next week was decided by {trial.served_after}, not the promoted {expected}")
    (out / "trial.json").write_text(json.dumps(asdict(trial), indent=2) + "\n")
    write_next_week(out / "next_week.jsonl", future, nxt, before.verdicts(), nxt_after, verdicts)
    picture(trial, out / "trial.png")
    return trial


def write_next_week(
    path: Path,
    posts: Sequence[LabelledPost],
    before: Sequence[Record],
    before_verdicts: dict[str, Verdict],
    after: Sequence[Record],
    after_verdicts: dict[str, Verdict],
) -> None:
    """One line per post of the next week: its text and label, and each bundle's decision, score,
    text scores, reasons and feature row (the errors worth reading, and a row to decide again offline)."""

    def seen(v: Verdict) -> dict[str, Any]:
        return {
            "decision": v.decision,
            "score": v.score,
            "stages": v.stage_scores,
            "reasons": [r.code for r in v.reasons],
            "features": None if v.features is None else v.features.values,
        }

    with path.open("w") as f:
        for p, b, a in zip(posts, before, after, strict=True):
            line = {
                "text": p.text,
                "spam": p.spam,
                "before": seen(before_verdicts[b.key]),
                "after": seen(after_verdicts[a.key]),
            }
            f.write(json.dumps(line) + "\n")


def picture(t: Trial, path: Path) -> None:
    from matplotlib.figure import Figure

    names = ("block_f1", "block_precision", "block_recall", "ham_blocked_share", "review_share")
    fig = Figure(figsize=(7.5, 3.6))
    ax = fig.add_subplot()
    x = range(len(names))
    for k, (label, side_, color) in enumerate(
        (("default bundle", t.before, "#999"), ("after retrain", t.after, "#4a4"))
    ):
        vals = [side_[n] for n in names]
        ax.bar([i + (k - 0.5) * 0.38 for i in x], vals, 0.38, label=label, color=color)
        for i, v in zip(x, vals, strict=True):
            ax.text(i + (k - 0.5) * 0.38, v, "–" if math.isnan(v) else f"{v:.2f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(x), [n.replace("_", " ") for n in names], fontsize=8)
    ax.set_ylim(0, 1.1)
    ax.legend()
    ax.set_title(
        f"New platform's next week ({t.next_week} posts, {t.next_week_spam} spam): "
        f"{t.history} labels, retrain {t.retrain_s:.0f} s",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(
    out: Annotated[Path, typer.Option(help="trial.json, trial.png and the retrained bundle")] = Path("out/trial"),
    history: Annotated[int, typer.Option(min=100, help="Labelled posts of history")] = HISTORY,
    next_week: Annotated[int, typer.Option(min=50, help="Posts of the next week")] = NEXT_WEEK,
    weeks_back: Annotated[int, typer.Option(min=0, help="Weeks before the latest that the next week ends")] = 0,
    epochs: Annotated[
        int | None, typer.Option(min=1, help="The retrain's text-model epochs", show_default="its default")
    ] = None,
    spam_share: Annotated[
        float | None,
        typer.Option(min=0.01, max=0.99, help="The history's share of spam", show_default="the corpus's"),
    ] = None,
    platform: Annotated[str, typer.Option(help=f"The platform's labelled posts: {', '.join(PLATFORMS)}")] = "instagram",
    label_noise: Annotated[
        float, typer.Option(min=0.0, max=0.5, help="The share of the history's ham labels that are spam posts")
    ] = LABEL_NOISE,
) -> None:
    """The loop on a new platform: figures before and after one retrain and promotion."""
    console = Console()
    if platform not in PLATFORMS:
        raise typer.BadParameter(f"unknown platform {platform!r}: one of {', '.join(PLATFORMS)}")
    try:
        past, future = window(history, next_week, weeks_back, spam_share, platform)
    except ValueError as e:
        raise typer.BadParameter(f"{e}; ask for fewer --weeks-back or a shorter --history") from None
    t = run_trial(out, console, past, future, weeks_back, epochs, platform, label_noise)
    for name, side_ in (("default bundle", t.before), ("after retrain", t.after)):
        console.print(
            f"{name:>15}: block-F1 {side_['block_f1']:.3f} (precision {side_['block_precision']:.3f}, "
            f"recall {side_['block_recall']:.3f}), ham blocked {side_['ham_blocked_share']:.2%}, "
            f"review {side_['review_share']:.1%}, ROC-AUC {side_['roc_auc']:.3f}"
        )
    console.print(
        f"retrain {t.retrain_s} s (exit {t.retrain_exit}, gate {t.gate}); promote {t.promote_s} s; lost {t.lost}"
    )


if __name__ == "__main__":
    typer.run(main)
