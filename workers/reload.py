"""Pick up a promoted decision model between batches, without a restart.

``modstream models promote`` swaps the ``current`` link atomically; the worker looks where
its model dir resolves to every few seconds, between batches, and loads the new bundle's
decision model when its feature contract and its text model match what this worker serves.
A bundle that does not fit is refused (logged and counted) once, and the served model stays.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from workers.cards import TextModelCard
from workers.isolation import describe
from workers.metrics import MODEL_RELOADS
from workers.modelinfo import show_models
from workers.stages.decide import DecisionModel

log = logging.getLogger(__name__)


class ModelMismatch(RuntimeError):
    pass


def load_promoted(bundle: Path, text_version: str) -> DecisionModel:
    """The decision model of ``bundle``, whose text model must be the one served (``text_version``)."""
    theirs = TextModelCard.load(bundle / "text").version
    if theirs != text_version:
        raise ModelMismatch(
            f"its text model {theirs!r} is not the one served ({text_version!r}); deploy the matching Triton "
            "model and restart to switch text models"
        )
    return DecisionModel.load(bundle / "decision")  # raises ContractMismatch for another feature contract


class DecisionReloader:
    def __init__(
        self,
        model_dir: Path,
        text_version: str,
        every_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.model_dir, self.text_version, self.every_s, self.clock = model_dir, text_version, every_s, clock
        self.target = model_dir.resolve()
        self._next = clock() + every_s

    def due(self) -> bool:
        return self.every_s > 0 and self.clock() >= self._next

    def check(self) -> DecisionModel | None:
        """The decision model of a newly promoted bundle, or None: no change, or refused."""
        self._next = self.clock() + self.every_s
        target = self.model_dir.resolve()
        if target == self.target:
            return None
        self.target = target  # a refused bundle is refused once, not on every check
        try:
            model = load_promoted(target, self.text_version)
        except Exception as exc:  # any bundle that cannot serve here: keep the one that does
            MODEL_RELOADS.labels("refused").inc()
            log.error("not switching to the bundle %s: %s", target, describe(exc))
            return None
        MODEL_RELOADS.labels("loaded").inc()
        show_models(target, self.text_version, model.version)
        log.info("switched to the decision model %s of %s", model.version, target)
        return model
