"""`modstream demo --json` end to end: real models, real stack, real replay."""

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEYS = {
    "posts",
    "verdicts",
    "dead_letters",
    "lost",
    "decisions",
    "accuracy",
    "throughput_posts_per_s",
    "p50_ms",
    "p99_ms",
    "signals_present",
    "signals_nonzero",
}


def test_demo_accounts_for_every_post() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "modstream.cli", "demo", "--posts", "300", "--json"],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary.keys() >= KEYS
    assert summary["lost"] == 0
    assert summary["verdicts"] + summary["dead_letters"] == summary["posts"] == 300
    assert summary["dead_letters"] >= 3  # the replay includes malformed events
    assert summary["decisions"]["block"] > 0 and summary["decisions"]["allow"] > 0
    assert summary["accuracy"] > 0.9
    # The worker counts as it goes: by the end of the replay most signal values are filled in.
    assert summary["signals_present"] > 0.5 and summary["signals_nonzero"] > 0
