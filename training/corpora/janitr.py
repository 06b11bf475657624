"""Labelled social posts, spam and ham: the Janitr project's X (Twitter) sample.

``training/data/janitr/sample.jsonl`` is ``data/sample.jsonl`` of github.com/janitrai/janitr at
commit a5b1e74 (MIT, ``training/data/janitr/LICENSE.janitr``): 4,281 posts labelled by AI and then
reviewed by people with the project's multi-label taxonomy (``docs/LABELS.md`` there). The posts
are mostly English and lean to crypto X: airdrops, token shills, wallet drains, WhatsApp stock-tip
bots and giveaways as spam; news, jokes, sports, programming and ordinary crypto talk as ham.

Labels collapse the way the source's own training does (its ``scam`` bucket is spam, everything
else ham), with two exceptions made before any model saw the data:

- a post whose only bad label is ``promo`` is left out: the source gives that label to a
  company announcing its own launch as well as to unsolicited sales links, and platforms allow
  the first;
- the 64 posts the source wrote itself (``source_id`` ``clean_batch_*``/``scam_batch_*``, fake
  status links) are left out: only people's posts are taken.

A text that appears more than once is taken once, and not at all when its copies disagree.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from training.corpora.labelled import HAM, SPAM, Example

SAMPLE = Path(__file__).parents[1] / "data" / "janitr" / "sample.jsonl"
COMMIT = "a5b1e746e8826ffd800725536c782abc61818455"
# The source's "scam" training bucket (docs/LABELS.md, "3-class training scheme").
SPAM_LABELS = frozenset(
    {
        "scam", "phishing", "malware", "fake_support", "recovery_scam", "job_scam", "romance_scam",
        "impersonation", "account_compromise", "spam", "reply_spam", "dm_spam", "promo", "affiliate",
        "lead_gen", "engagement_bait", "follow_train", "giveaway", "bot",
    }
)  # fmt: skip
_AMBIGUOUS = frozenset({"promo"})
_SYNTHETIC = ("clean_batch_", "scam_batch_")


def _label(labels: set[str]) -> int | None:
    bad = labels & SPAM_LABELS
    if not bad:
        return HAM
    return None if bad <= _AMBIGUOUS else SPAM


def janitr_posts(path: Path = SAMPLE) -> Iterator[Example]:
    """The posts with a clear label, ids ``janitr/<id>``, each text once."""
    by_text: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        label = _label(set(row["labels"]))
        text = " ".join(row["text"].split())
        if label is not None and text and not (row.get("source_id") or "").startswith(_SYNTHETIC):
            by_text[text].append((row["id"], label))
    for text, rows in by_text.items():
        if len({label for _, label in rows}) == 1:
            yield Example(f"janitr/{rows[0][0]}", text, rows[0][1])
