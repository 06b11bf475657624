"""``modstream replay`` and ``modstream shadow-report``: decisions read back from Kafka, compared.

Replay re-decides a range of logged feature rows with a bundle's decision model, offline:
no Triton, no Redis. A bundle whose text model differs from the one that scored the range
is refused: its text scores would have to be recomputed, which this command does not do
(a challenger with its own text model is compared in shadow instead: ``shadow-report``).
Nothing is published unless an output topic is named.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from modstream.topics import Range, RangeError, read_range
from schemas import Decision, Verdict
from training.dataset import collect_labels
from training.flips import Comparison, compare, plot
from training.redecide import redecide
from training.retrain import load_serving
from workers.adapters.kafka import KafkaSink
from workers.config import Settings
from workers.delivery import Output, deliver
from workers.feedback.handler import parse as parse_feedback
from workers.records import InMsg


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


def moderator_labels(settings: Settings, rng: Range) -> dict[str, int]:
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

    @property
    def reproduced(self) -> float:
        return self.comparison.agreement

    def to_json(self) -> str:
        body = {
            **self.comparison.as_dict(),
            "no_feature_row": self.no_feature_row,
            "other_contract": self.other_contract,
            "published": self.published,
        }
        return json.dumps(body, indent=2, default=str)


def replay(settings: Settings, bundle: Path, rng: Range, out: Path, output_topic: str | None = None) -> ReplayReport:
    model, text_version = load_serving(bundle)
    recorded = verdicts_of(read_range(settings, settings.output_topic, rng))
    if not recorded:
        raise ReplayError(f"no verdicts on {settings.output_topic!r} in the range")
    others = Counter(
        scorer
        for v in recorded.values()
        if "text" in v.stage_scores and (scorer := v.model_versions.get("text")) not in (None, text_version)
    )
    if others:
        raise ReplayError(
            f"the bundle's text model {text_version!r} differs from {', '.join(map(repr, sorted(others)))}, "
            f"which scored {others.total()} of the {len(recorded)} verdicts in the range: replay re-decides "
            "logged text scores and cannot rescore texts; replay a bundle with that text model"
        )
    again = redecide(recorded.values(), model)
    if not again.pairs:
        raise ReplayError(f"none of the {len(recorded)} verdicts has a feature row of this contract to re-decide")
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
    report = ReplayReport(comparison, again.no_feature_row, again.other_contract, published)
    out.mkdir(parents=True, exist_ok=True)
    (out / "replay.json").write_text(report.to_json() + "\n")
    plot(comparison, out / "flips.png", f"Replay with {model.version}")
    return report


def shadow_report(settings: Settings, shadow_topic: str, rng: Range, out: Path) -> Comparison:
    """The champion's verdicts (the verdicts topic) against the challenger's (``shadow_topic``)."""
    champion = verdicts_of(read_range(settings, settings.output_topic, rng))
    challenger = verdicts_of(read_range(settings, shadow_topic, rng))
    if not champion or not challenger:
        raise ReplayError(
            f"nothing to compare: {len(champion)} champion and {len(challenger)} challenger verdicts in the range"
        )
    comparison = compare(
        {k: v.decision for k, v in champion.items()},
        {k: v.decision for k, v in challenger.items()},
        moderator_labels(settings, rng),
        names=("champion", "challenger"),
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "shadow.json").write_text(json.dumps(comparison.as_dict(), indent=2, default=str) + "\n")
    plot(comparison, out / "shadow_flips.png", "Champion vs challenger")
    return comparison
