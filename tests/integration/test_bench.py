"""`modstream bench` completes at tiny N and loses nothing. Its speed goals are measured, never asserted."""

import json
from pathlib import Path

import pytest
from rich.console import Console

from modstream.harness.bench import HOPS, run_bench

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_bench_smoke(tmp_path: Path) -> None:
    # The smallest run that passes through every phase: two batch sizes in the sweeps, one pipeline run.
    result = run_bench(
        32, tmp_path, Console(stderr=True), latency_s=1, steady_s=0.2, batch_sizes=(1, 32), pipeline_runs=1
    )
    assert result.lost == 0
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert {
        "model_only_posts_per_s",
        "triton_posts_per_s",
        "pipeline_posts_per_s",
        "naive_posts_per_s",
        "short_circuit_posts_per_s",
        "p50_ms",
        "p99_ms",
        "posts",
        "lost",
    } <= saved.keys()
    assert saved["details"]["pipeline_with_shadow_posts_per_s"] > 0
    assert set(saved["details"]["degraded_by_phase"]) == set(saved["details"]["lost_by_phase"]) - {
        "cascade_social",
        "cascade_spam_heavy",
        "cascade_real",
    }
    # The latency phase's figures are its median run's by p99.
    runs = sorted(r["p99_ms"] for r in saved["details"]["latency_runs"])
    assert len(runs) == 3 and saved["p99_ms"] == runs[1]
    # Each verdict's time by hop, in both delivery guarantees.
    for by_hop in (saved["details"]["latency_by_hop"], saved["details"]["exactly_once_latency_by_hop"]):
        assert set(by_hop) == set(HOPS) and all(h["p99_ms"] >= h["p50_ms"] for h in by_hop.values())
    # A text model promoted mid-run, twice (there and back): nothing lost, both promotions done.
    assert saved["details"]["hot_swap_posts_per_s"] > 0 and len(saved["details"]["hot_swap_promote_s"]) == 2
    signals = saved["details"]["signals"]
    assert (
        signals["enrich_with_signals_us_per_post"] > 0
        and signals["verdict_bytes"] > signals["verdict_bytes_without_features"]
    )
    # The cascade against the full pipeline on the same labelled posts, by mix; every post of the full
    # runs reached the transformer, a share of the cascade's did.
    for mix in ("social", "spam_heavy"):
        cascade = saved["details"]["cascade"][mix]
        assert cascade["cascade_posts_per_s"] > 0 and cascade["full_posts_per_s"] > 0
        assert 0 < cascade["transformer_share"] < 1
        assert sum(sum(row.values()) for row in cascade["flips"].values()) == cascade["posts"]
        # The same rows: every post of the audited run, decided again in full where the first stage decided it.
        assert sum(sum(row.values()) for row in cascade["same_rows_flips"].values()) == cascade["posts"]
    assert 0 < saved["details"]["pipeline_first_stage_share"] < 1
    # Real held-out posts from unknown senders, each once, judged for both.
    real = saved["details"]["cascade"]["real"]
    assert real["posts"] == real["held_out_posts"] > 0 and real["cascade"]["posts"] == real["full"]["posts"] > 0
    files = ("throughput.png", "latency.png", "batch_size.png", "cascade.png")
    assert all((tmp_path / f).exists() for f in files)
