"""The verdicts one model bundle gives the demo's posts, deterministically, as JSON.

A measurement tool, not product code: for showing that a refactoring changed no verdict.

* The posts are ``modstream demo``'s (modstream/harness/demo.py ``demo_records``: held-out test texts,
  banned-link and banned-IP posts, malformed records, shuffled by ``random.Random(seed)``), but
  the simulator's clock is the constant :data:`NOW` instead of ``time.time()``.
* The simulated platform is seeded into a real Redis under a fresh prefix (the demo's
  ``seed_redis``), whose keys are deleted at the end.
* The real moderation worker (workers.moderation.ModerationWorker, wired as workers/main.py
  ``run_moderation`` wires it) decides them in-process: Kafka replaced by tests/unit/fakes.py's
  FakeSource/FakeSink, Triton by ONNX Runtime (modstream.loop.rescore.OnnxText). Records go in a
  fixed order, in batches of ``--batch``, one batch at a time, each awaited before the next.

Output: ``{"meta": {...}, "verdicts": {post_id: {...}}, "dead_letters": [key, ...],
"dead_letter_stages": {key: "stage/error_class"}}``; nothing wall-clock (decided_at, latency_ms).

    PYTHONPATH=. .venv/bin/python tools/verdicts.py --bundle ~/.cache/modstream/current --out after.json
    python3 tools/diff_verdicts.py before.json after.json   # exit 1 if any decision differs

For the "before" side, run an earlier commit's copy of this script in that commit's tree (its
imports name that tree's modules). A bundle pinned to another normaliser version
(NORMALISER_VERSION hashes normalise.py's bytes: even a docstring edit changes it) loads only with
``--trust-bundle-normaliser``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import redis

# --- everything this tool takes from the project (the imports to update after a move) ---
from modstream.harness.demo import clear_redis, demo_records, seed_redis
from modstream.harness.traffic import Record
from modstream.loop.rescore import OnnxText
from schemas import DeadLetter, Verdict
from tests.unit.fakes import FakeSink, FakeSource
from training.simulator import World
from workers.adapters.redis_layout import Layout
from workers.adapters.redis_store import RedisStore
from workers.bundle.load import Loaded, load_models, text_scorer
from workers.config import Settings
from workers.errors import Misconfigured
from workers.model_cards import TextModelCard
from workers.moderation import ModerationWorker
from workers.records import InMsg
from workers.stages.short_circuit import BanListCache
from workers.state.features import FEATURES
from workers.state.keyspace import Keyspace
from workers.text.normalise import check_normaliser

NOW = 1_795_000_000.0  # the simulator's clock: 2026-11-18T11:06:40Z, fixed so two runs build the same events
REDIS_URL = "redis://127.0.0.1:6379/0"


def digest(records: list[Record], world: World) -> str:
    """One hash over every record (key, bytes, label, in order) and the seeded platform."""
    h = hashlib.sha256()
    for r in records:
        h.update(json.dumps([r.key, r.value.hex(), r.label]).encode())
    h.update(json.dumps([world.hashes, sorted(world.banned_domains), sorted(world.banned_ips)]).encode())
    return h.hexdigest()


def settings_for(bundle: Path, prefix: str) -> Settings:
    return Settings(
        model_dir=bundle,
        redis_url=REDIS_URL,  # pydantic wraps it in SecretStr
        redis_prefix=prefix,
        metrics_port=0,
        model_reload_s=0,
        # Generous: a Redis call that timed out would degrade a batch, a difference no code change made.
        redis_timeout_s=30.0,
    )


def trust_bundle_normaliser(text_dir: Path) -> dict[str, str | None]:
    """Let this code load a bundle pinned to another normaliser version.

    NORMALISER_VERSION hashes normalise.py's bytes, so moving or re-wording that file (a docstring)
    changes it, and the worker refuses every bundle trained before. Only for comparing code whose
    normaliser differs in bytes but not in behaviour (check the file's diff): the pin is set to the
    bundle's, the checks stay.
    """
    module = sys.modules[check_normaliser.__module__]
    code: str = module.NORMALISER_VERSION
    pinned = TextModelCard.load(text_dir).normaliser
    if pinned is not None and pinned != code:
        print(f"warning: normaliser pin {code} of this code replaced by the bundle's {pinned}", file=sys.stderr)
        setattr(module, "NORMALISER_VERSION", pinned)  # noqa: B010  # the module is looked up, not imported
    return {"code": code, "bundle": pinned}


def load_bundle(settings: Settings) -> tuple[Loaded, OnnxText]:
    """The bundle's models as run_moderation loads them, and its text network in ONNX Runtime."""
    bundle = settings.model_dir
    missing = [str(bundle / d) for d in ("decision", "text") if not (bundle / d).is_dir()]
    if missing:
        raise Misconfigured(f"{bundle} is not a model bundle: no {' and no '.join(missing)}")
    loaded = load_models(settings)
    text = OnnxText(bundle / "text")
    if text.version != loaded.text.version:
        raise Misconfigured(f"ONNX text model {text.version} is not the card's {loaded.text.version}")
    return loaded, text


def worker_for(
    settings: Settings, loaded: Loaded, text: OnnxText, store: RedisStore, sink: FakeSink
) -> ModerationWorker:
    """As workers/main.py ``run_moderation`` wires it; Kafka and Triton replaced, no reloading, no shadow."""
    bans = BanListCache(store, Keyspace(settings.redis_prefix), settings.banlist_refresh_s)
    return ModerationWorker(
        settings,
        FakeSource([]),  # unused: batches are handed to ``handle`` directly
        sink,
        store,
        text_scorer(settings, loaded.text.encoder, text),
        loaded.decision,
        bans,
        None,  # reloader
        None,  # shadow
        None,  # transactions (at least once)
        loaded.text.ngram,
        None,  # ramp
        None,  # connect_text
        None,  # shadow_reloader
        None,  # shadow_text
        None,  # framing: plain JSON
        languages=loaded.text.languages,
    )


async def decide_all(worker: ModerationWorker, records: list[Record], topic: str, batch: int) -> None:
    msgs = [InMsg(topic, 0, i, r.key.encode(), r.value, time.monotonic()) for i, r in enumerate(records)]
    for start in range(0, len(msgs), batch):
        await worker.handle(msgs[start : start + batch])


def outcome(verdict: Verdict) -> dict[str, Any]:
    """What a verdict decided and from what; nothing wall-clock."""
    return {
        "decision": verdict.decision,
        "reasons": [[r.code, r.detail] for r in verdict.reasons],
        "text_score": verdict.stage_scores.get("text"),
        "score": verdict.score,
        "stage_scores": dict(sorted(verdict.stage_scores.items())),
        "degraded": verdict.degraded,
        "model_versions": verdict.model_versions,
        "features": verdict.features.values if verdict.features is not None else None,
    }


async def run(bundle: Path, n: int, seed: int, batch: int, trust_normaliser: bool) -> dict[str, Any]:
    prefix = f"modstream-verdicts:{uuid.uuid4().hex[:12]}:"
    settings = settings_for(bundle, prefix)
    normaliser = trust_bundle_normaliser(bundle / "text") if trust_normaliser and (bundle / "text").is_dir() else None
    loaded, text = load_bundle(settings)  # first: a missing bundle fails before any work
    warmup, replay, world = demo_records(n, seed, NOW)
    records = warmup + replay
    ks = Keyspace(prefix)
    client = redis.Redis.from_url(REDIS_URL, socket_timeout=10)
    if client.exists(ks.banned_domains, ks.banned_ips):
        raise RuntimeError(f"prefix {prefix} is in use")
    store = RedisStore(REDIS_URL, settings.redis_timeout_s, Layout.of(settings))
    sink = FakeSink()
    try:
        seed_redis(REDIS_URL, ks, world)
        await decide_all(worker_for(settings, loaded, text, store, sink), records, settings.input_topic, batch)
    finally:
        await store.close()
        clear_redis(REDIS_URL, ks)
        left = sum(1 for _ in client.scan_iter(match=prefix + "*", count=1000))
        print(f"redis: deleted the keys under {prefix} ({left} left)", file=sys.stderr)

    verdicts: dict[str, dict[str, Any]] = {}
    dead: dict[str, str] = {}
    for topic, key, value, headers in sink.records:
        if topic == settings.output_topic:
            v = Verdict.model_validate_json(value)
            if v.post_id in verdicts:
                raise RuntimeError(f"two verdicts for {v.post_id}")
            verdicts[v.post_id] = outcome(v)
        elif topic == settings.dlq_topic:
            dl = DeadLetter.from_record(value, headers)
            dead[key.decode()] = f"{dl.stage}/{dl.error_class}"
        else:
            raise RuntimeError(f"unexpected output topic {topic}")
    if len(verdicts) + len(dead) != len(records):
        raise RuntimeError(f"{len(records)} records in, {len(verdicts)} verdicts and {len(dead)} dead letters out")
    degraded = sum(v["degraded"] for v in verdicts.values())
    if degraded:
        print(f"warning: {degraded} degraded verdicts (Redis or text model failed mid-run)", file=sys.stderr)
    return {
        "meta": {
            "bundle": str(bundle.resolve()),
            "text_version": loaded.text.version,
            "decision_version": loaded.decision.version,
            "posts": n,
            "seed": seed,
            "now": NOW,
            "batch": batch,
            "records": len(records),
            "records_sha256": digest(records, world),
            "verdicts": len(verdicts),
            "degraded": degraded,
            "normaliser_pin_overridden": normaliser,
            "feature_names": list(FEATURES),
            # Settings reads MODSTREAM_* for what is not passed here: names set (never values) to compare.
            "modstream_env": sorted(k for k in os.environ if k.upper().startswith("MODSTREAM_")),
        },
        "verdicts": dict(sorted(verdicts.items())),
        "dead_letters": sorted(dead),
        "dead_letter_stages": dict(sorted(dead.items())),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bundle", type=Path, required=False, help="model bundle dir (text/ and decision/)")
    p.add_argument("--posts", type=int, default=2000)
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument(
        "--trust-bundle-normaliser",
        action="store_true",
        help="load a bundle pinned to another normaliser version (see trust_bundle_normaliser)",
    )
    p.add_argument("--out", type=Path, help="where to write the JSON")
    p.add_argument(
        "--records-only", action="store_true", help="build the records twice, check they are equal, print their hash"
    )
    args = p.parse_args()
    if args.records_only:
        first, second = demo_records(args.posts, args.seed, NOW), demo_records(args.posts, args.seed, NOW)
        a, b = digest(first[0] + first[1], first[2]), digest(second[0] + second[1], second[2])
        print(json.dumps({"records": len(first[0]) + len(first[1]), "sha256": a, "equal": a == b}))
        sys.exit(0 if a == b else 1)
    if args.bundle is None or args.out is None:
        p.error("--bundle and --out are required")
    try:
        result = asyncio.run(
            run(args.bundle.expanduser(), args.posts, args.seed, args.batch, args.trust_bundle_normaliser)
        )
    except Misconfigured as exc:
        sys.exit(f"verdicts.py: {exc}")
    args.out.write_text(json.dumps(result, indent=1, sort_keys=False) + "\n")
    m = result["meta"]
    print(f"{m['records']} records: {m['verdicts']} verdicts, {len(result['dead_letters'])} dead letters -> {args.out}")


if __name__ == "__main__":
    main()
