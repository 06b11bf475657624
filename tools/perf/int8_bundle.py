"""A copy of the default bundle whose text model serves int8
(docs/journal/2026-11-27-performance-rounds.md, eighth round).

Where training keeps fp32 (int8 lost more than 0.005 F1), this makes the int8 model that other
machines serve, to measure the pipeline at that model's speed.

Usage: ``python tools/perf/int8_bundle.py OUT``; then ``python tools/perf/pipeline_probe.py OUT RUNS``.
"""

import random
import shutil
import sys
from pathlib import Path

from rich.console import Console

from modstream.serving.artifacts import ensure_models
from training.corpora.posts import post_splits
from training.text_model.export import quantize_int8
from workers.config import cache_root
from workers.model_cards import TextModelCard
from workers.text.encoder import TextEncoder

out = Path(sys.argv[1])
models = ensure_models(Console(stderr=True))
shutil.rmtree(out, ignore_errors=True)
shutil.copytree(models.text, out / "text", symlinks=True)
(out / "decision").symlink_to(models.decision.resolve())
card = TextModelCard.load(models.text)
encoder = TextEncoder(models.text / "tokenizer.json", card.max_length)
calibration = [e.text for e in random.Random(7).sample(post_splits(cache_root()).train, 256)]
quantize_int8(out / "text" / "model.onnx", out / "text" / "model.int8.onnx", encoder, calibration)
card.model_copy(update={"serving_model": "model.int8.onnx"}).save(out / "text")
