"""In-memory stand-ins for the client Protocols, for pure-logic tests."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import lightgbm as lgb
import numpy as np

from schemas import Decision, FeatureRow, Verdict
from workers.clients import DeliveryError
from workers.model_cards import Thresholds
from workers.records import InMsg
from workers.stages.decide import DecisionModel
from workers.state.features import FEATURE_VERSION, FEATURES, MONOTONE
from workers.state.signals import MemorySignals
from workers.state.signals import Plan as SignalPlan

T0 = datetime(2026, 11, 23, 10, tzinfo=UTC)


def logged_verdict(
    pid: str,
    minute: float,
    *,
    values: Sequence[float | None] | None = None,
    features: bool = True,
    contract: str = FEATURE_VERSION,
    decision: Decision = "allow",
) -> Verdict:
    """A verdict as the worker logs it, decided ``minute`` minutes after T0, with a feature row."""
    if values is None:
        values = [minute / 100, None, None, None, *[float(i) for i in range(len(FEATURES) - 4)]]
    text = values[0]
    return Verdict(
        post_id=pid,
        user_id="u1",
        decision=decision,
        score=0.1,
        reasons=[],
        stage_scores={"decision": 0.1} | ({} if text is None else {"text": text}),
        model_versions={"text": "t1", "decision": "d1", "features": contract},
        degraded=False,
        latency_ms=1.0,
        decided_at=T0 + timedelta(minutes=minute),
        features=FeatureRow(contract=contract, values=list(values)) if features else None,
    )


BASE = {
    "post_id": "p",
    "user_id": "u1",
    "created_at": "2026-11-21T10:00:00Z",
    "text": "hello friends",
    "ip": "192.0.2.10",
    "platform": "web",
}
DROP = object()


def body(pid: str, **kw: Any) -> dict[str, Any]:
    """A valid event with ``kw`` set; a field set to ``DROP`` is left out."""
    return {k: v for k, v in {**BASE, "post_id": pid, **kw}.items() if v is not DROP}


def event(pid: str, text: str = "hello friends", **kw: object) -> bytes:
    """A valid post event's JSON; ``kw`` overrides or adds fields."""
    return json.dumps(body(pid, text=text, **kw)).encode()


class FakeStore:
    def __init__(
        self,
        hashes: dict[str, dict[str, str]] | None = None,
        sets: dict[str, set[str]] | None = None,
        fail: bool = False,
    ) -> None:
        self.hashes, self.sets, self.fail, self.calls = hashes or {}, sets or {}, fail, 0
        self.keys_asked: list[str] = []
        self.signals = MemorySignals()

    async def enrich(
        self, keys: Sequence[str], plans: Sequence[SignalPlan]
    ) -> tuple[list[dict[str, str]], list[list[float]]]:
        self.calls += 1
        self.keys_asked += keys
        if self.fail:
            raise TimeoutError("redis timed out")
        return [self.hashes.get(k, {}) for k in keys], self.signals.run(plans)

    async def members(self, keys: Sequence[str]) -> list[set[str]]:
        return [self.sets.get(k, set()) for k in keys]


class FakeTextModel:
    """Spam logit high when the word 'cheap' appears (token id of 'cheap' in the uncased vocab)."""

    def __init__(self, cheap_id: int, fail: bool = False, parallelism: int = 1, version: str = "fake-1") -> None:
        self.cheap_id, self.fail, self.parallelism, self.batches = cheap_id, fail, parallelism, []
        self.version, self.closed = version, False

    async def connect(self) -> None:
        if self.fail:
            raise ConnectionError("triton: model not found")

    async def logits(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        self.batches.append(input_ids.shape)
        if self.fail:
            raise TimeoutError("triton deadline exceeded")
        spam = (input_ids == self.cheap_id).any(axis=1).astype(np.float32) * 6 - 3
        return np.stack([np.zeros_like(spam), spam], axis=1)

    async def close(self) -> None:
        self.closed = True


class FakeTextModels:
    """Hands out ``model`` as the client of any Triton model name, and logs the names asked for."""

    def __init__(self, model: FakeTextModel) -> None:
        self.model, self.names = model, []

    def __call__(self, name: str, version: str) -> AbstractAsyncContextManager[FakeTextModel]:
        self.names.append(name)
        return nullcontext(self.model)


class FakeSource:
    def __init__(self, batches: list[list[InMsg]]) -> None:
        self.batches, self.stored, self.closed = batches, {}, False
        self.sizes: list[int] = []  # the max_size of every poll

    def poll_batch(self, max_size: int, max_wait_s: float) -> list[InMsg]:
        self.sizes.append(max_size)
        return self.batches.pop(0) if self.batches else []

    def store_offsets(self, offsets: dict[tuple[str, int], int]) -> None:
        self.stored.update(offsets)

    def close(self) -> None:
        self.closed = True


class FakeSink:
    """Fails the records produced under ``fail_tokens`` (broker down), and refuses records
    over ``max_bytes`` as librdkafka does (MSG_SIZE_TOO_LARGE); ``records`` holds what was delivered."""

    def __init__(self, fail_tokens: set[int] | None = None, max_bytes: int = 1_000_000) -> None:
        self.records, self.pending, self.fail_tokens, self.max_bytes = [], [], fail_tokens or set(), max_bytes
        self.refused = 0

    def produce(self, topic, key, value, headers, token) -> None:  # type: ignore[no-untyped-def]
        if len(value) > self.max_bytes:
            self.refused += 1
            self.pending.append((token, DeliveryError("MSG_SIZE_TOO_LARGE", "Broker: Message size too large")))
            return
        error = DeliveryError("_TRANSPORT", "broker down") if token in self.fail_tokens else None
        self.pending.append((token, error))
        self.records.append((topic, key, value, list(headers)))

    def flush(self, timeout_s: float) -> dict[int, DeliveryError | None]:
        out = dict(self.pending)
        self.pending = []
        return out


def write_bundle(
    path: Path,
    tokenizer_json: Path | None = None,
    model: DecisionModel | None = None,
    text_version: str = "t1",
    thresholds: tuple[float, float] = (0.8, 0.2),
) -> Path:
    """A model bundle (text/ card and tokenizer, decision/ model and card) that loads without Triton."""
    (path / "text").mkdir(parents=True)
    (path / "text" / "card.json").write_text(json.dumps({"serving_model": "model.onnx", "version": text_version}))
    if tokenizer_json is not None:
        shutil.copy2(tokenizer_json, path / "text" / "tokenizer.json")
    model = model or tiny_decision_model()
    (path / "decision").mkdir()
    model.booster.save_model(str(path / "decision" / "model.txt"))
    card = {"features": list(FEATURES), "feature_version": FEATURE_VERSION, "version": model.version}
    block, allow = thresholds
    (path / "decision" / "card.json").write_text(json.dumps(card | {"thresholds": {"block": block, "allow": allow}}))
    return path


def tiny_decision_model(seed: int = 0, version: str = "d1") -> DecisionModel:
    """A real LightGBM model over the real feature contract: spam when the text score is high."""
    rng = np.random.default_rng(seed)
    x = rng.random((400, len(FEATURES)))
    y = (x[:, FEATURES.index("text_spam_prob")] > 0.5).astype(int)
    booster = lgb.train(
        {
            "objective": "binary",
            "verbose": -1,
            "num_leaves": 4,
            "min_data_in_leaf": 5,
            "monotone_constraints": MONOTONE,
        },
        lgb.Dataset(x, y, feature_name=list(FEATURES)),
        num_boost_round=20,
    )
    return DecisionModel(booster, Thresholds(block=0.8, allow=0.2), version)


@dataclass(frozen=True)
class FakeKafkaError:
    """What the commit policy reads of confluent-kafka's KafkaError."""

    code: str
    is_fatal: bool = False
    is_retriable: bool = False
    requires_abort: bool = False

    def name(self) -> str:
        return self.code

    def fatal(self) -> bool:
        return self.is_fatal

    def retriable(self) -> bool:
        return self.is_retriable

    def txn_requires_abort(self) -> bool:
        return self.requires_abort


class FakeKafkaException(Exception):
    """Carries its error first, as confluent-kafka's KafkaException does."""


class FakeTransactions:
    """Logs each call; the first ``fail_commits`` commits fail, then each of ``commit_errors`` is
    raised by one commit, and an abort raises ``abort_error``. The first ``hang_commits`` commits
    block until :attr:`released` is set, as librdkafka's did after a broker restart.
    ``on_rewind`` simulates the seek."""

    def __init__(
        self,
        fail_commits: int = 0,
        on_rewind: Callable[[], None] | None = None,
        commit_errors: Sequence[Exception] = (),
        abort_error: Exception | None = None,
        hang_commits: int = 0,
    ) -> None:
        self.log: list[str] = []
        self.committed: dict[tuple[str, int], int] = {}
        self.fail_commits, self.on_rewind = fail_commits, on_rewind
        self.commit_errors, self.abort_error = list(commit_errors), abort_error
        self.hang_commits, self.released = hang_commits, threading.Event()

    def init(self) -> None:
        self.log.append("init")

    def begin(self) -> None:
        self.log.append("begin")

    def commit(self, offsets: dict[tuple[str, int], int]) -> None:
        if self.hang_commits:
            self.hang_commits -= 1
            self.log.append("commit hangs")
            self.released.wait()
            return  # too late: its transaction was given up
        if self.fail_commits:
            self.fail_commits -= 1
            raise RuntimeError("coordinator unavailable")
        if self.commit_errors:
            self.log.append("commit failed")
            raise self.commit_errors.pop(0)
        self.log.append("commit")
        self.committed.update(offsets)

    def abort(self) -> None:
        self.log.append("abort")
        if self.abort_error is not None:
            raise self.abort_error

    def replace(self) -> None:
        self.log.append("replace")

    def rewind(self) -> None:
        self.log.append("rewind")
        if self.on_rewind is not None:
            self.on_rewind()


# One post of each kind real producers send, beside a control: the done-when list.
KINDS: dict[str, dict[str, Any]] = {
    "control": body("control"),
    "extra": body("extra", surprise=True, lang="en"),
    "no-ip": body("no-ip", ip=DROP),
    "null-ip": body("null-ip", ip=None),
    "no-platform": body("no-platform", platform=DROP),
    "int-id": body("int-id", post_id=1_234_567_890_123),
    "epoch-ms": body("epoch-ms", created_at=1_795_255_200_000),
    "slashy-user": body("slashy-user", user_id="aGVsbG8/d29y+bGQ=/=="),
    "did-user": body("did-user", user_id="did:plc:z72i7hdynmk6r22z27h6tvur/app.bsky.feed.post/3kq"),
    "long-text": body("long-text", text="spam " * 10_000),  # 50,000 characters
}
