"""``modstream replay`` and ``modstream shadow-report``: decisions read back from Kafka, compared.

Replay re-decides a range of logged feature rows with a bundle's decision model, offline:
no Redis, and no Triton call unless the bundle's text model differs from the one that scored
(some of) the range. Those verdicts' texts are scored again (modstream/loop/rescore.py: the posts
read back from the input topic, the network through Triton under ``--triton-model``, the
n-gram model here) and only their two text features replaced; a verdict whose post event is
not found is counted and left out. Nothing is published unless an output topic is named.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from modstream.loop.champion import load_serving
from modstream.loop.comparison import Comparison, compare, plot
from modstream.loop.config import Replaying, Topics
from modstream.loop.gate import Evidence, Gate, Judgement, Workload
from modstream.loop.join import collect_labels
from modstream.loop.posts import LOOKBACK, posts_by_id, posts_range
from modstream.loop.redecide import redecide
from modstream.loop.report import REPORT_FILE
from modstream.loop.rescore import Rescored, TextModels, rescore, stale, triton
from modstream.loop.topics import Range, RangeError, read_range
from schemas import Decision, Verdict
from workers.adapters.kafka import KafkaSink
from workers.bundle.local_text import LocalText
from workers.errors import describe
from workers.feedback.handler import parse as parse_feedback
from workers.kafka.delivery import Output, deliver
from workers.records import InMsg
from workers.text.trust import Trust


class ReplayError(ValueError):
    """Replay cannot run as asked; the message is one line."""


def verdicts_of(msgs: list[InMsg]) -> dict[str, Verdict]:
    """The first verdict per post (what served); unreadable records are skipped."""
    out: dict[str, Verdict] = {}
    for m in msgs:
        try:
            v = Verdict.model_validate_json(m.value or b"")
        except ValueError:
            continue
        out.setdefault(v.post_id, v)
    return out


def moderator_labels(settings: Topics, rng: Range) -> dict[str, int]:
    """post id -> the latest moderator label (1 spam) from the feedback topic, from the range's start on."""
    try:
        msgs = read_range(settings, settings.feedback_topic, rng.after())
    except RangeError:  # no feedback topic: no labels
        return {}
    events, _ = parse_feedback(msgs)
    return {pid: got.label for pid, got in collect_labels(events.values()).items() if got.label is not None}


@dataclass(frozen=True)
class ReplayReport:
    comparison: Comparison
    no_feature_row: int
    other_contract: int
    published: int
    rescored: Rescored  # the verdicts whose texts the bundle's text model scored again

    @property
    def reproduced(self) -> float:
        return self.comparison.agreement

    def to_json(self) -> str:
        body = {
            **self.comparison.as_dict(),
            "no_feature_row": self.no_feature_row,
            "other_contract": self.other_contract,
            "published": self.published,
            "rescored": len(self.rescored.verdicts),
            "no_post_event": self.rescored.no_post_event,
            "triton_model": self.rescored.triton_model,  # null: Triton was not called
        }
        return json.dumps(body, indent=2, default=str)


def _rescored(
    settings: Replaying,
    bundle: Path,
    todo: list[Verdict],
    name: str,
    models: TextModels,
    lookback: timedelta,
    trust: Trust,
) -> Rescored:
    """``todo``'s texts scored by the bundle's text model, served by Triton as ``name``."""
    try:
        local = LocalText.load(bundle / "text")
    except Exception as exc:  # a card or a tokenizer: nothing to score with
        raise ReplayError(f"cannot load the bundle's text model {bundle / 'text'}: {describe(exc)}") from None
    read = read_range(settings, settings.input_topic, posts_range(todo, lookback))
    posts = posts_by_id(read, settings.max_text_chars)
    try:
        return asyncio.run(rescore(todo, posts, local, models, name, settings, trust))
    except Exception as exc:  # unreachable, too slow, or serving another version: no partial replay
        raise ReplayError(
            f"cannot rescore {len(todo)} verdicts with the bundle's text model {local.version!r} "
            f"as {name!r} on Triton at {settings.triton_url}: {describe(exc)}"
        ) from None


def replay(
    settings: Replaying,
    bundle: Path,
    rng: Range,
    out: Path,
    output_topic: str | None = None,
    triton_model: str | None = None,
    models: TextModels | None = None,
    lookback: timedelta = LOOKBACK,
) -> ReplayReport:
    """Re-decide ``rng``'s verdicts with ``bundle``; verdicts another text model scored are rescored
    through ``triton_model`` (default: the challenger's name, ``settings.shadow_triton_model``), and so
    are those another bundle's first stage decided (default: the served name, ``settings.triton_model``,
    when the bundle's text model scored every other verdict)."""
    model, text_version = load_serving(bundle)
    recorded = verdicts_of(read_range(settings, settings.output_topic, rng))
    if not recorded:
        raise ReplayError(f"no verdicts on {settings.output_topic!r} in the range")
    todo = stale(recorded.values(), text_version, model.version)
    if triton_model is not None and not todo:  # an option that would not take effect is refused
        raise ReplayError(
            f"--triton-model {triton_model!r} would not be asked: the bundle's text model {text_version!r} "
            "scored every verdict in the range"
        )
    # Only first-stage verdicts of another decision model to score: the bundle's text model is the served one.
    other_text = any(v.model_versions.get("text") != text_version for v in todo)
    default = settings.shadow_triton_model if other_text else settings.triton_model
    name, models = triton_model or default, models or triton(settings)
    rescored = _rescored(settings, bundle, todo, name, models, lookback, model.trust) if todo else Rescored([], 0)
    fresh = {v.post_id: v for v in rescored.verdicts}
    missing = {v.post_id for v in todo} - fresh.keys()
    # Every verdict re-decided now has the bundle's text scores: rescored, or scored by it already.
    again = redecide((fresh.get(k, v) for k, v in recorded.items() if k not in missing), model, text_version)
    if not again.pairs:
        raise ReplayError(
            f"nothing to re-decide among the {len(recorded)} verdicts: {again.no_feature_row} without a feature "
            f"row, {again.other_contract} of another contract, {len(missing)} without their post event on "
            f"{settings.input_topic!r}"
        )
    a: dict[str, Decision] = {r.post_id: r.decision for r, _ in again.pairs}
    b: dict[str, Decision] = {n.post_id: n.decision for _, n in again.pairs}
    comparison = compare(a, b, moderator_labels(settings, rng))
    published = 0
    if output_topic:
        outputs = {
            i: Output(output_topic, n.post_id.encode(), n.model_dump_json().encode())
            for i, (_, n) in enumerate(again.pairs)
        }
        failed = deliver(KafkaSink(settings.producer_conf()), outputs, settings.publish_timeout_s, lambda *_: None)
        if failed:
            raise ReplayError(f"{len(failed)} re-decided verdicts not delivered to {output_topic!r}")
        published = len(outputs)
    report = ReplayReport(comparison, again.no_feature_row, again.other_contract, published, rescored)
    out.mkdir(parents=True, exist_ok=True)
    (out / "replay.json").write_text(report.to_json() + "\n")
    plot(comparison, out / "flips.png", f"Replay with {model.version}")
    return report


QUEUE_FILE = "label_queue.jsonl"
GATE = Gate()  # the retrain's default gate


@dataclass(frozen=True)
class Queued:
    """A post the champion and the challenger decide differently that no moderator has labelled."""

    post_id: str
    user_id: str
    champion: Decision
    challenger: Decision
    champion_score: float
    challenger_score: float


def label_queue(champion: dict[str, Verdict], challenger: dict[str, Verdict], labels: dict[str, int]) -> list[Queued]:
    """The labels that settle the gate soonest: where the two disagree, no label yet. Those the
    challenger alone blocks first (the gate's bounds on ham blocked rest on them), then the rest,
    each part surest first; a random post is mostly one both decide alike and tells the gate nothing."""
    queued = [
        Queued(pid, b.user_id, a.decision, b.decision, a.score, b.score)
        for pid in sorted(champion.keys() & challenger.keys() - labels.keys())
        if (a := champion[pid]).decision != (b := challenger[pid]).decision
    ]
    return sorted(queued, key=lambda q: (q.challenger != "block", -q.challenger_score))


@dataclass(frozen=True)
class ShadowReport:
    comparison: Comparison
    queued: int  # posts in the label queue
    queue_file: Path
    judgement: Judgement | None  # the gate on all the evidence there is; None without any labelled post
    evidence: dict[str, int]  # labelled posts judged: the retrain's (out of fold) and the shadow's

    def as_dict(self) -> dict[str, Any]:
        j = self.judgement
        gate = None if j is None else {"outcome": j.outcome.value, "line": j.line(), "more_labels": j.more_labels}
        return self.comparison.as_dict() | {"gate": gate, "evidence": self.evidence}


def retrain_evidence(bundle: Path | None, challenger: dict[str, Verdict]) -> Evidence | None:
    """The shadowed bundle's retrain evidence (its ``report.json``), where that bundle's decision model
    is the one that decided ``challenger``; None otherwise (another bundle, or none written by a retrain)."""
    path = None if bundle is None else bundle / REPORT_FILE
    if path is None or not path.is_file():
        return None
    decision = json.loads(path.read_text()).get("decision", {})
    served = {v.model_versions.get("decision") for v in challenger.values()}
    if served != {decision.get("version")} or "won" not in decision:
        return None
    return Evidence.from_dict(decision)


def shadow_report(
    settings: Topics, shadow_topic: str, rng: Range, out: Path, bundle: Path | None = None, gate: Gate = GATE
) -> ShadowReport:
    """The champion's verdicts (the verdicts topic) against the challenger's (``shadow_topic``), and
    the unlabelled posts they disagree on, for moderators (``label_queue.jsonl``, one JSON a line).
    The gate judges the challenger on every label there is: those its retrain judged out of fold
    (``bundle``'s report, when it is the shadowed one) and the shadowed posts labelled since, the
    latter also as the drift check. A retrain that could not tell is settled by the labels that follow.
    Labels taken from the queue are the flips, where the two differ: the paired sign test is exact on
    them, and they overstate both models' error rates, so the bounds err against promotion."""
    champion = verdicts_of(read_range(settings, settings.output_topic, rng))
    challenger = verdicts_of(read_range(settings, shadow_topic, rng))
    if not champion or not challenger:
        raise ReplayError(
            f"nothing to compare: {len(champion)} champion and {len(challenger)} challenger verdicts in the range"
        )
    labels = moderator_labels(settings, rng)
    comparison = compare(
        {k: v.decision for k, v in champion.items()},
        {k: v.decision for k, v in challenger.items()},
        labels,
        names=("champion", "challenger"),
    )
    both = sorted(labels.keys() & champion.keys() & challenger.keys())
    live = Evidence.of_decisions(
        [labels[p] for p in both], [challenger[p].decision for p in both], [champion[p].decision for p in both]
    )
    prior = retrain_evidence(bundle, challenger)
    total = live if prior is None else prior + live
    # The review share over every post it decided live: the labelled ones lean to the queue's flips.
    reviewed = sum(v.decision == "review" for v in challenger.values())
    work = Workload(reviewed, len(challenger), f"the {len(challenger)} shadowed posts")
    judgement = (
        gate.judge(total.challenger, total.champion, total.won, total.lost, live.challenger, work)
        if total.challenger.n
        else None
    )
    evidence = {"retrain": 0 if prior is None else prior.challenger.n, "shadow": live.challenger.n}
    out.mkdir(parents=True, exist_ok=True)
    plot(comparison, out / "shadow_flips.png", "Champion vs challenger")
    queue = label_queue(champion, challenger, labels)
    (out / QUEUE_FILE).write_text("".join(json.dumps(asdict(q)) + "\n" for q in queue))
    report = ShadowReport(comparison, len(queue), out / QUEUE_FILE, judgement, evidence)
    (out / "shadow.json").write_text(json.dumps(report.as_dict(), indent=2, default=str) + "\n")
    return report
