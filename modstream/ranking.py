"""The popularity prior from a domain ranking file: ``modstream ranking refresh FILE``.

A ranking lists sites best first, as Tranco (``rank,domain``), CrUX (one origin a line,
``https://www.example.com``) or any list of one host a line write it. Each entry is reduced to its
registrable domain; link redirectors and shared hosting (workers/data: never popular) and the
domains reserved for documentation (RFC 2606) are left out; the first ``top`` distinct domains
are written, best first, as workers/data/popular_domains.txt reads them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

from workers.text.urls import SHARED, ascii_host, registrable

RESERVED = frozenset({"example.com", "example.net", "example.org"})


class RankingError(ValueError):
    """A ranking file this command cannot read."""


def _host(entry: str) -> str:
    """The host of one ranking line: ``rank,domain``, an origin, or a bare host."""
    value = entry.strip().rsplit(",", 1)[-1].strip()
    if "://" in value:
        value = urlsplit(value).hostname or ""
    return ascii_host(value)


def domains(lines: Iterable[str]) -> Iterator[str]:
    """Distinct registrable domains in ranking order, without redirectors, shared or reserved hosts."""
    seen: set[str] = set()
    for line in lines:
        if not line.strip() or line.startswith("#"):
            continue
        host = _host(line)
        if "." not in host:
            continue
        domain = registrable(host)
        if domain not in seen and domain not in SHARED and domain not in RESERVED:
            seen.add(domain)
            yield domain


def refresh(source: Path, out: Path, top: int, note: str) -> int:
    """Write the first ``top`` domains of the ranking ``source`` to ``out``, under a header ``note``
    (where the ranking comes from: its name, date and licence). Returns how many were written."""
    if not source.is_file():
        raise RankingError(f"{source}: no such file")
    with source.open(encoding="utf-8", errors="replace") as f:
        kept = []
        for domain in domains(f):
            kept.append(domain)
            if len(kept) == top:
                break
    if not kept:
        raise RankingError(f"{source}: no domain found (expected one host, origin or 'rank,domain' a line)")
    header = "".join(f"# {line}\n" for line in note.splitlines())
    out.write_text(header + "\n".join(kept) + "\n")
    return len(kept)
