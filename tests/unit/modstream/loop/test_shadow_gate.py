"""A shadowed challenger accumulates evidence: the gate judges its retrain's out-of-fold posts and the
posts labelled in shadow since, as one; the live ones alone are the drift check."""

from __future__ import annotations

import json
from pathlib import Path

from modstream.loop.gate import Evidence, Gate, Side
from modstream.loop.replay import retrain_evidence
from modstream.loop.report import REPORT_FILE
from schemas import Decision, Verdict
from tests.unit.fakes import logged_verdict

RETRAIN = Evidence(  # a new platform's first retrain: right, but 0/150 ham blocked cannot show <= 1%
    Side(n=300, spam=150, ham=150, spam_blocked=140, ham_blocked=0, review=20, roc_auc=0.99),
    Side(n=300, spam=150, ham=150, spam_blocked=10, ham_blocked=0, review=5, roc_auc=0.7),
    won=130,
    lost=0,
)


def shadowed(ham: int, spam: int, challenger_blocks_ham: int = 0) -> Evidence:
    """Labelled in shadow: the challenger blocks the spam the champion allows; ``challenger_blocks_ham`` ham too."""
    y = [0] * ham + [1] * spam
    challenger: list[Decision] = ["block" if i < challenger_blocks_ham else "allow" for i in range(ham)]
    return Evidence.of_decisions(y, challenger + ["block"] * spam, ["allow"] * (ham + spam))


def judge(e: Evidence, live: Evidence | None = None) -> str:
    latest = None if live is None else live.challenger
    return Gate().judge(e.challenger, e.champion, e.won, e.lost, latest=latest).outcome.value


def test_evidence_adds_up_over_disjoint_posts() -> None:
    live = shadowed(ham=200, spam=50)
    total = RETRAIN + live
    assert (total.challenger.n, total.challenger.ham, total.won, total.lost) == (550, 350, 180, 0)
    assert (live.challenger.spam_blocked, live.champion.spam_blocked, live.challenger.review) == (50, 0, 0)
    assert Evidence.from_dict(json.loads(json.dumps(total.as_dict()))).challenger.ham == 350


def test_labels_in_shadow_settle_what_the_retrain_could_not_tell() -> None:
    assert judge(RETRAIN) == "too_few_labels"
    live = shadowed(ham=200, spam=50)
    assert judge(RETRAIN + live, live) == "better"


def test_a_challenger_that_blocks_ham_in_shadow_is_refused_however_its_retrain_read() -> None:
    """The twin: the same retrain evidence, and live traffic where it blocks 5% of the ham."""
    live = shadowed(ham=200, spam=50, challenger_blocks_ham=10)
    assert judge(RETRAIN + live, live) == "not_better"


def _report(bundle: Path, version: str, **decision: object) -> None:
    bundle.mkdir(parents=True, exist_ok=True)
    report = {"decision": {"version": version, **RETRAIN.as_dict(), **decision}}
    (bundle / REPORT_FILE).write_text(json.dumps(report))


def _challenger(version: str) -> dict[str, Verdict]:
    v = logged_verdict("p1", 1, decision="block")
    return {"p1": v.model_copy(update={"model_versions": v.model_versions | {"decision": version}})}


def test_the_retrain_evidence_counts_only_for_the_bundle_that_is_shadowed(tmp_path: Path) -> None:
    _report(tmp_path / "b", "d2")
    assert retrain_evidence(tmp_path / "b", _challenger("d2")) == RETRAIN
    assert retrain_evidence(tmp_path / "b", _challenger("d3")) is None  # another challenger decided these
    assert retrain_evidence(tmp_path / "none", _challenger("d2")) is None
    assert retrain_evidence(None, _challenger("d2")) is None
