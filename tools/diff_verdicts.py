"""Compare two verdicts.py outputs: ``python diff_verdicts.py A.json B.json``.

Prints the posts compared, identical decisions and reasons, the largest absolute difference of
the text score and of every feature (null == null, i.e. NaN == NaN), dead letters on one side
only, and up to 20 differing posts. Exits 1 when any decision differs, or a post or dead letter is on one side only.
Needs nothing from the project: any Python 3.11 runs it.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

SHOWN = 20


def gap(a: float | None, b: float | None) -> float:
    """|a - b|; 0 when both are missing (NaN == NaN), inf when one is."""
    if a is None or b is None:
        return 0.0 if a is None and b is None else math.inf
    if math.isnan(a) and math.isnan(b):
        return 0.0
    return abs(a - b)


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: diff_verdicts.py A.json B.json")
    a, b = (json.loads(Path(p).read_text()) for p in sys.argv[1:3])
    va: dict[str, dict[str, Any]] = a["verdicts"]
    vb: dict[str, dict[str, Any]] = b["verdicts"]
    for side, data in (("A", a), ("B", b)):
        m = data.get("meta", {})
        print(
            f"{side}: text {m.get('text_version')}, decision {m.get('decision_version')}, "
            f"records {m.get('records')} (sha256 {str(m.get('records_sha256'))[:16]}), degraded {m.get('degraded')}"
        )
    if a.get("meta", {}).get("records_sha256") != b.get("meta", {}).get("records_sha256"):
        print("NOTE: the inputs differ (records_sha256)")

    if a["meta"].get("modstream_env") != b["meta"].get("modstream_env"):
        print(
            f"NOTE: MODSTREAM_* variables differ: {a['meta'].get('modstream_env')} vs {b['meta'].get('modstream_env')}"
        )
    names: list[str] = a["meta"]["feature_names"]
    if b["meta"]["feature_names"] != names:
        print("NOTE: the feature contracts differ")
    common = sorted(va.keys() & vb.keys())
    only_a, only_b = sorted(va.keys() - vb.keys()), sorted(vb.keys() - va.keys())
    same_decision = sum(va[k]["decision"] == vb[k]["decision"] for k in common)
    same_reasons = sum(va[k]["reasons"] == vb[k]["reasons"] for k in common)
    text_gap = max((gap(va[k]["text_score"], vb[k]["text_score"]) for k in common), default=0.0)
    score_gap = max((gap(va[k]["score"], vb[k]["score"]) for k in common), default=0.0)
    feature_gap = [0.0] * len(names)
    rows_differ = 0
    for k in common:
        fa, fb = va[k]["features"], vb[k]["features"]
        if fa is None or fb is None:
            rows_differ += (fa is None) != (fb is None)
            continue
        if len(fa) != len(fb) or len(fa) != len(names):
            rows_differ += 1
            continue
        for i, (x, y) in enumerate(zip(fa, fb, strict=True)):
            feature_gap[i] = max(feature_gap[i], gap(x, y))

    print(f"posts compared: {len(common)} (only in A: {len(only_a)}, only in B: {len(only_b)})")
    print(f"identical decisions: {same_decision}/{len(common)}")
    print(f"identical reasons:   {same_reasons}/{len(common)}")
    print(f"max |text score diff|: {text_gap:.3g}   max |decision score diff|: {score_gap:.3g}")
    if rows_differ:
        print(f"feature rows missing on one side or of another length: {rows_differ}")
    print("max |feature diff| (nonzero only):" if any(feature_gap) else "max |feature diff|: 0 for every feature")
    for name, g in zip(names, feature_gap, strict=True):
        if g:
            print(f"  {name}: {g:.3g}")
    dl_a, dl_b = set(a["dead_letters"]), set(b["dead_letters"])
    print(f"dead letters: A {len(dl_a)}, B {len(dl_b)}, on one side only {len(dl_a ^ dl_b)}")

    differing = [
        k
        for k in common
        if va[k]["decision"] != vb[k]["decision"]
        or va[k]["reasons"] != vb[k]["reasons"]
        or gap(va[k]["text_score"], vb[k]["text_score"])
        or va[k]["features"] != vb[k]["features"]
    ]
    print(f"posts with any difference: {len(differing)}")
    for k in differing[:SHOWN]:
        x, y = va[k], vb[k]
        changed = [f for f in ("decision", "reasons", "text_score", "features") if x[f] != y[f]]
        print(f"  {k}: {x['decision']} -> {y['decision']}; differs in {', '.join(changed)}")
    for k in (only_a + only_b)[:SHOWN]:
        print(f"  {k}: only in {'A' if k in va else 'B'}")
    bad = same_decision != len(common) or only_a or only_b or dl_a != dl_b
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
