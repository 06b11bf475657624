"""``modstream models promote`` / ``rollback``: switch the served bundle by swapping a link, atomically.

The served bundle is a symbolic link (the cache's ``current``, or whatever MODSTREAM_MODEL_DIR
names). A new link is made beside it and renamed over it, so a reader sees the old bundle
or the new one, never neither. Every switch is appended to ``<link>.history.jsonl``, which
is also what ``rollback`` walks back: promotions push, rollbacks pop.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from training.retrain import load_serving
from workers.cards import TextModelCard

log = logging.getLogger(__name__)


class PromotionError(ValueError):
    """A switch that cannot be made; one line."""


@dataclass(frozen=True)
class Switch:
    action: str  # promote | rollback
    before: str
    after: str
    decision: str  # the decision model version now served
    text: str
    text_changed: bool  # workers refuse it until Triton serves this text model and they restart

    def line(self) -> str:
        return json.dumps({"at": datetime.now(UTC).isoformat(), **self.__dict__})


def history_file(link: Path) -> Path:
    return link.with_name(link.name + ".history.jsonl")


def _stack(link: Path) -> list[str]:
    """The bundles promoted in turn, the served one last."""
    stack: list[str] = []
    path = history_file(link)
    for line in path.read_text().splitlines() if path.exists() else []:
        entry = json.loads(line)
        if entry["action"] == "promote":
            stack = stack or [entry["before"]] * bool(entry["before"])  # nothing was served before the first
            stack.append(entry["after"])
        elif stack:
            stack.pop()
    return stack


def _swap(link: Path, target: Path, action: str) -> Switch:
    if link.exists() and not link.is_symlink():
        raise PromotionError(f"{link} is a directory, not a link: point MODSTREAM_MODEL_DIR at a link to switch")
    model, text_version = load_serving(target)  # a bundle that cannot serve is never linked
    before = str(link.resolve()) if link.is_symlink() else ""
    try:
        text_changed = bool(before) and TextModelCard.load(Path(before) / "text").version != text_version
    except (OSError, ValueError):  # the bundle served before is gone or broken: nothing to compare
        text_changed = False
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target.resolve())
    os.replace(tmp, link)  # atomic on POSIX: readers see the old bundle or the new one
    switch = Switch(action, before, str(target.resolve()), model.version, text_version, text_changed)
    with history_file(link).open("a") as f:
        f.write(switch.line() + "\n")
    log.info("%s: %s -> %s (decision model %s)", action, before, switch.after, model.version)
    return switch


def promote(link: Path, bundle: Path) -> Switch:
    if not bundle.is_dir():
        raise PromotionError(f"{bundle} is not a bundle directory (text/ and decision/)")
    return _swap(link, bundle, "promote")


def rollback(link: Path) -> Switch:
    stack = _stack(link)
    if len(stack) < 2:
        raise PromotionError(f"nothing to roll back to: {history_file(link)} records no earlier promotion")
    return _swap(link, Path(stack[-2]), "rollback")
