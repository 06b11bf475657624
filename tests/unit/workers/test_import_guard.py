"""The hot-path worker must never pull in torch or transformers (import time, memory, GPU init)."""

import subprocess
import sys


def test_worker_imports_neither_torch_nor_transformers() -> None:
    code = (
        "import sys, workers.main, workers.moderation, modstream.cli;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers'));"
        "print(','.join(bad)); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, f"hot path imported: {result.stdout.strip()} {result.stderr[-500:]}"
