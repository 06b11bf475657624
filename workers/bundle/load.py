"""Loading the served bundle and connecting its text model: the start-up steps the worker shares with
offline tools (``modstream health``, a retrain's rescoring)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from workers.adapters.triton import TritonTextModel
from workers.bundle.local_text import LocalText
from workers.bundle.shadow import ShadowText
from workers.clients import TextModel
from workers.config import Settings
from workers.errors import Misconfigured, describe
from workers.model_cards import TextModelCard
from workers.runtime.startup import model_dir_or_hint
from workers.stages.decide import DecisionModel
from workers.stages.score import ScoreCache, TextScorer
from workers.text.encoder import TextEncoder


@dataclass(frozen=True)
class Loaded:
    decision: DecisionModel
    text: LocalText  # the served text model's worker-side parts: a promoted bundle must have its version
    challenger: DecisionModel | None
    challenger_text: LocalText | None = None  # the challenger's own text model; None: the served one


def load_models(settings: Settings) -> Loaded:
    """The models and the tokenizer, or a one-line :class:`Misconfigured`."""
    model_dir = model_dir_or_hint(settings.model_dir)
    try:
        decision = DecisionModel.load(model_dir / "decision")  # fails fast on a contract mismatch
        text = LocalText.load(model_dir / "text", settings.max_tokens)
    except Exception as exc:  # a card, a contract or a tokenizer that cannot serve: restarting won't help
        raise Misconfigured(f"cannot load the models in {model_dir}: {describe(exc)}") from None
    challenger, challenger_text = None, None
    if settings.shadow_model_dir is not None:
        try:
            bundle = model_dir_or_hint(settings.shadow_model_dir)
            challenger = DecisionModel.load(bundle / "decision")  # raises ContractMismatch for another contract
            if TextModelCard.load(bundle / "text").version != text.version:
                # Its own token length, the one it was trained with: max_tokens tunes the served model.
                challenger_text = LocalText.load(bundle / "text")
        except Exception as exc:
            raise Misconfigured(f"cannot shadow {settings.shadow_model_dir}: {describe(exc)}") from None
    return Loaded(decision, text, challenger, challenger_text)


class ScorerSettings(Protocol):
    """The scoring knobs of :class:`Settings` a text scorer is built with."""

    @property
    def triton_sub_batch(self) -> int: ...
    @property
    def triton_max_in_flight(self) -> int: ...
    @property
    def text_cache_size(self) -> int: ...
    @property
    def triton_pad_multiple(self) -> int: ...


def text_scorer(settings: ScorerSettings, encoder: TextEncoder, model: TextModel) -> TextScorer:
    return TextScorer(
        encoder,
        model,
        settings.triton_sub_batch,
        settings.triton_max_in_flight,
        ScoreCache(settings.text_cache_size),
        settings.triton_pad_multiple,
    )


async def connect_text(settings: Settings, text: LocalText) -> TextScorer:
    """A scorer of ``text``'s model as the champion's Triton model serves it; raises when it does not (yet)."""
    model = TritonTextModel(settings.triton_url, settings.triton_model, settings.triton_timeout_s, text.version)
    try:
        await model.connect()
    except BaseException:
        await model.close()
        raise
    return text_scorer(settings, text.encoder, model)


def shadow_text_of(settings: Settings, text: LocalText) -> ShadowText:
    """The challenger's own text model, as the same Triton serves it under the challenger's model name."""
    model = TritonTextModel(settings.triton_url, settings.shadow_triton_model, settings.triton_timeout_s, text.version)
    return ShadowText(text, text_scorer(settings, text.encoder, model))
