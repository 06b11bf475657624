"""Verdicts whose texts another text model scored, scored again: by replay, and by a retrain.

Two features of a logged row are the text model's (the network's score and its n-gram
companion's), so a bundle with another text model needs them anew. The posts are read back
from the input topic and prepared by the worker's own validate stage (the text it scored); the
network's score comes from Triton under the name serving the bundle's text model (checked
against its card's version), the n-gram score from the bundle's own n-gram model. Every other
feature stays as logged: what the worker saw then. A verdict whose post event is not found is
counted, never guessed.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from modstream.loop.config import TritonScoring
from modstream.loop.redecide import has_row
from schemas import Verdict
from workers.adapters.triton import TritonTextModel
from workers.bundle.load import ScorerSettings, text_scorer
from workers.bundle.local_text import LocalText
from workers.clients import TextModel
from workers.model_cards import TextModelCard
from workers.records import Post
from workers.stages.decide import FIRST_STAGE
from workers.state.features import INDEX
from workers.text.language import withhold
from workers.text.trust import TRUST_EVERYWHERE, Trust

TEXT, NGRAM = INDEX["text_spam_prob"], INDEX["text_ngram_spam_prob"]
# A client of a text model (its card's version) as a Triton model name serves it, closed after use.
TextModels = Callable[[str, str], AbstractAsyncContextManager[TextModel]]


def triton(settings: TritonScoring) -> TextModels:
    """Clients of the Triton at ``settings.triton_url``; every call has the worker's deadline."""

    @asynccontextmanager
    async def client(name: str, version: str) -> AsyncIterator[TextModel]:
        model = TritonTextModel(settings.triton_url, name, settings.triton_timeout_s, version)
        try:
            yield model
        finally:
            await model.close()

    return client


class OnnxText:
    """The TextModel protocol over ONNX Runtime in this process: a text model's card's serving file,
    scored without Triton (a retrain rescores with the model it has just trained)."""

    def __init__(self, text_dir: Path) -> None:
        card = TextModelCard.load(text_dir)
        self._version = card.version
        options = ort.SessionOptions()
        options.intra_op_num_threads = len(os.sched_getaffinity(0))
        self._session = ort.InferenceSession(
            str(text_dir / card.serving_model), sess_options=options, providers=["CPUExecutionProvider"]
        )

    @property
    def version(self) -> str:
        return self._version

    @property
    def parallelism(self) -> int:
        return 1

    async def connect(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def logits(
        self, input_ids: npt.NDArray[np.int64], attention_mask: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float32]:
        feeds = {"input_ids": input_ids, "attention_mask": attention_mask}
        (out,) = await asyncio.to_thread(self._session.run, ["logits"], feeds)
        return np.asarray(out, dtype=np.float32)


def in_process(text_dir: Path) -> TextModels:
    """Clients of the text model in ``text_dir`` run here, whatever name is asked for."""

    @asynccontextmanager
    async def client(_name: str, _version: str) -> AsyncIterator[TextModel]:
        yield OnnxText(text_dir)

    return client


def stale(verdicts: Iterable[Verdict], version: str, decision: str | None = None) -> list[Verdict]:
    """The verdicts with a row to re-decide whose text features a text model other than ``version``
    scored, or that the cascade's first stage of a decision model other than ``decision`` decided before
    any transformer read them: ``decision``'s first stage may not be sure of them, and its full model
    then needs their score. (The first stage that decided them does not read it: the bundle that
    served reproduces them as logged.)"""
    return [v for v in verdicts if has_row(v) and (v.model_versions.get("text") != version or _unscored(v, decision))]


def _unscored(v: Verdict, decision: str | None) -> bool:
    return FIRST_STAGE in v.stage_scores and v.model_versions.get("decision") != decision


def with_scores(v: Verdict, text: float | None, ngram: float | None) -> Verdict:
    """``v`` with its two text features, and its text stage score, replaced."""
    assert v.features is not None  # stale() keeps verdicts with a row only
    values = list(v.features.values)
    values[TEXT], values[NGRAM] = text, ngram
    scores = {k: s for k, s in v.stage_scores.items() if k != "text"} | ({} if text is None else {"text": text})
    features = v.features.model_copy(update={"values": values})
    return v.model_copy(update={"features": features, "stage_scores": scores})


@dataclass(frozen=True)
class Rescored:
    verdicts: list[Verdict]  # the stale verdicts with their post event, their text features scored again
    no_post_event: int
    triton_model: str | None = None  # the model name asked; None: Triton was not called


async def rescore(
    stale: Sequence[Verdict],
    posts: Mapping[str, Post],
    local: LocalText,
    models: TextModels,
    name: str,
    settings: ScorerSettings,
    trust: Trust = TRUST_EVERYWHERE,
) -> Rescored:
    """``stale`` verdicts whose post is in ``posts``, their texts scored by ``local``'s text model as
    the Triton model ``name`` serves it, the transformer's score withheld where the bundle's decision
    model does not read it (``trust``), as the worker serves it. Raises what the client raises, or
    WrongVersion when ``name`` serves another version."""
    found = [(v, posts[v.post_id]) for v in stale if v.post_id in posts]
    if not found:  # nothing to score: no client
        return Rescored([], len(stale))
    async with models(name, local.version) as model:
        await local.connect(model)
        texts = [p.text for _, p in found]
        text, ngram = await local.score(text_scorer(settings, local.encoder, model), texts)
    text = withhold(text, trust.withheld(texts))
    again = [with_scores(v, t, n) for (v, _), t, n in zip(found, text, ngram, strict=True)]
    return Rescored(again, len(stale) - len(found), name)
