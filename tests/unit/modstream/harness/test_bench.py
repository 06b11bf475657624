"""The bench's worker process gets every setting, secrets and overrides included; its runs' posts."""

import json
import os
from pathlib import Path

import pytest
from pydantic import SecretStr

from modstream.harness.bench import BenchDetails, Phase, evenly, median_pair, paired, worker_env
from modstream.harness.traffic import Record
from workers.config import Settings


def test_worker_env_reproduces_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODSTREAM_MAX_TOKENS", "99")  # None in the settings below: must not leak through
    s = Settings(
        redis_url=SecretStr("redis://:pw@host:6379/1"),
        kafka_sasl_password=SecretStr("s3cret"),
        kafka_extra={"security.protocol": "SASL_SSL", "fetch.min.bytes": 1},
        model_dir=Path("/models/bundle"),
        batch_max_size=7,
        triton_pad_multiple=16,
        max_tokens=None,
    )
    env = worker_env(s)
    assert env["MODSTREAM_REDIS_URL"] == "redis://:pw@host:6379/1" and "MODSTREAM_MAX_TOKENS" not in env
    for name in [n for n in os.environ if n.startswith("MODSTREAM_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        if name.startswith("MODSTREAM_"):
            monkeypatch.setenv(name, value)
    read_back = Settings()
    assert {n: getattr(read_back, n) for n in Settings.model_fields} == {
        n: getattr(s, n) for n in Settings.model_fields
    }


def test_details_keep_the_bench_json_keys() -> None:
    details = BenchDetails(serving_model="model.onnx", max_length=64, cpus=2, triton_in_flight={1: 10.0, 8: 20.0})
    out = details.to_json()
    assert (out["triton_in_flight_1"], out["triton_in_flight_8"]) == (10.0, 20.0)
    assert "triton_in_flight" not in out and "model_only_fp32_posts_per_s" not in out  # only measured with int8
    assert list(out)[:4] == ["serving_model", "max_length", "cpus", "model_only_best"]


def test_each_run_is_compared_with_the_ceiling_measured_around_it() -> None:
    ceilings = iter([400.0, 300.0, 500.0, 420.0])  # the VM slows, then speeds up
    runs = [lambda r=r: Phase(rate=r, lost=0, latencies_ms=[], cpu_s={}) for r in (270.0, 340.0, 390.0)]
    pairs = paired(runs, lambda: next(ceilings))
    assert [p.ceiling for p in pairs] == [350.0, 400.0, 460.0]
    assert [round(p.ratio, 3) for p in pairs] == [0.771, 0.85, 0.848]
    assert median_pair(pairs).phase.rate == 390.0  # the median ratio is a real run's
    assert pairs[1].to_json() == {"posts_per_s": 340.0, "model_only_posts_per_s": 400.0, "ratio": 0.85}


def test_the_latency_posts_mix_the_pipelines_texts_as_its_run_does() -> None:
    """Half the pipeline's rate is half load only on its own posts: a latency run takes them evenly,
    not the first ones (held-out texts, which the first stage leaves to the transformer more often)."""
    run = [Record(f"p{i}", json.dumps({"post_id": f"p{i}", "text": f"text {i}"}).encode(), 0) for i in range(10)]

    def texts(records: list[Record]) -> list[str]:
        return [json.loads(r.value)["text"] for r in records]

    spread = evenly(run, 4, "lat-")
    again = evenly(run, 25, "lat-")

    assert texts(spread) == ["text 0", "text 2", "text 5", "text 7"]
    assert len({r.key for r in spread}) == 4 and all(r.key.startswith("lat-") for r in spread)
    assert texts(again) == texts(run) * 2 + texts(run[:5])
    assert len({r.key for r in again}) == 25
