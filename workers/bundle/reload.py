"""Pick up a promoted bundle between batches, without a restart.

``modstream models promote`` swaps the ``current`` link atomically; the worker looks where
its model dir resolves to every few seconds, between batches, and loads the new bundle: its
decision model, and its text model's tokenizer and n-gram companion when the text model is
another one (the promotion has made Triton serve it first; the worker then asks Triton for
that version). A bundle of another feature contract is refused (logged and counted) once,
and the served models stay; a text model Triton does not serve yet is tried again at the
next look.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from workers.bundle.info import show_models
from workers.bundle.local_text import LocalText
from workers.errors import describe
from workers.metrics import MODEL_RELOADS
from workers.model_cards import TextModelCard
from workers.stages.decide import DecisionModel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Promoted:
    bundle: Path
    decision: DecisionModel
    text: LocalText | None  # None: the bundle's text model is the one served


def load_promoted(bundle: Path, text_version: str, max_tokens: int | None = None) -> Promoted:
    """The models of ``bundle``; its text model's local parts only when it is not ``text_version``."""
    decision = DecisionModel.load(bundle / "decision")  # raises ContractMismatch for another feature contract
    same = TextModelCard.load(bundle / "text").version == text_version
    return Promoted(bundle, decision, None if same else LocalText.load(bundle / "text", max_tokens))


class BundleReloader:
    def __init__(
        self,
        model_dir: Path,
        text_version: str,
        every_s: float,
        clock: Callable[[], float] = time.monotonic,
        max_tokens: int | None = None,
        role: str = "served",  # or "challenger": whose models the metrics and logs name
        cascade: bool = True,  # the worker's MODSTREAM_CASCADE: which drift baseline the metrics show
    ) -> None:
        self.model_dir, self.text_version, self.every_s, self.clock = model_dir, text_version, every_s, clock
        self.max_tokens, self.role, self.cascade = max_tokens, role, cascade
        self.target = model_dir.resolve()
        self._next = clock() + every_s

    def due(self) -> bool:
        return self.every_s > 0 and self.clock() >= self._next

    def check(self) -> Promoted | None:
        """The models of a newly promoted bundle, or None: no change, or refused."""
        self._next = self.clock() + self.every_s
        target = self.model_dir.resolve()
        if target == self.target:
            return None
        self.target = target  # a refused bundle is refused once, not on every check
        try:
            return load_promoted(target, self.text_version, self.max_tokens)
        except Exception as exc:  # any bundle that cannot serve here: keep the one that does
            MODEL_RELOADS.labels("refused").inc()
            log.error("not switching to the bundle %s: %s", target, describe(exc))
            return None

    def switched(self, promoted: Promoted) -> None:
        MODEL_RELOADS.labels("loaded").inc()
        if promoted.text is not None:
            self.text_version = promoted.text.version
        if self.role == "served":
            show_models(promoted.bundle, self.text_version, promoted.decision.version, cascade=self.cascade)
        log.info(
            "%s bundle switched to %s: decision model %s, text model %s",
            self.role,
            promoted.bundle,
            promoted.decision.version,
            self.text_version,
        )

    def not_served(self, promoted: Promoted, exc: BaseException) -> None:
        """Triton does not serve its text model (yet): keep the served models, try again at the next look."""
        MODEL_RELOADS.labels("pending").inc()
        log.warning("the bundle %s waits for Triton to serve its text model: %s", promoted.bundle, describe(exc))
        self.target = Path()  # no link resolves to it: the next look loads the bundle again
