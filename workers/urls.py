"""Link extraction and domain matching.

Spam hides links from naive regexes (``hxxp://``, ``http:\\\\host\\path``,
``evil[.]com``), so text is de-fanged (:func:`workers.normalise.defang`) before matching. Registrable domains come
from tldextract's bundled public-suffix snapshot: never the network.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

import tldextract

from workers.normalise import defang

_EXTRACT = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)

_URL = re.compile(r"(?:\bhttps?\s*:\s*[/\\]{1,3}|\bwww\.)[^\s<>\"'()\[\]{}|^`]+", re.I)
_TRAILING = ".,;:!?*"


@dataclass(frozen=True, slots=True)
class Link:
    url: str  # normalised: lower-case scheme and host, forward slashes
    host: str
    domain: str  # registrable domain (or the IP / bare host when there is none)
    suffix: str
    subdomain_depth: int


@lru_cache(maxsize=16_384)  # campaign and popular links repeat across posts
def _normalise(raw: str) -> Link | None:
    s = raw.strip().rstrip(_TRAILING).replace("\\", "/")
    s = re.sub(r"^(https?)\s*:\s*/*", lambda m: m.group(1).lower() + "://", s, flags=re.I)
    if not s.lower().startswith(("http://", "https://")):
        s = "http://" + s
    try:
        parts = urlsplit(s)
        host = (parts.hostname or "").rstrip(".")
    except ValueError:
        return None
    if not host or "." not in host:
        return None
    domain = registrable(host)
    depth = host.count(".") - domain.count(".")
    path = parts.path or ""
    query = f"?{parts.query}" if parts.query else ""
    suffix = domain.partition(".")[2] if "." in domain and not domain[-1].isdigit() else ""
    return Link(f"{parts.scheme.lower()}://{host}{path}{query}", host, domain, suffix, depth)


def extract_links(text: str, explicit: Iterable[str] = ()) -> tuple[Link, ...]:
    """Explicit URLs first, then those found in the text; de-duplicated, order kept."""
    text = defang(text)
    lower = text.lower()
    found = _URL.finditer(text) if "http" in lower or "www." in lower else ()
    seen: dict[str, Link] = {}
    for raw in [*map(defang, explicit), *(m.group(0) for m in found)]:
        link = _normalise(raw)
        if link is not None and link.url not in seen:
            seen[link.url] = link
    return tuple(seen.values())


def reduce_links(text: str) -> str:
    """``text`` with each link replaced by its registrable domain: copies of a campaign that
    differ only in their link paths (one per copy, to track or to dodge filters) read the same."""
    text = defang(text)
    lower = text.lower()
    if "http" not in lower and "www." not in lower:
        return text

    def domain(m: re.Match[str]) -> str:
        link = _normalise(m.group(0))
        return link.domain if link else m.group(0)

    return _URL.sub(domain, text)


@lru_cache(maxsize=65_536)
def registrable(host: str) -> str:
    """The registrable domain; for a suffix the list does not know, the last two labels; an IP as is."""
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    return _EXTRACT(host).top_domain_under_public_suffix or ".".join(host.split(".")[-2:])


@lru_cache(maxsize=65_536)
def domain_candidates(host: str) -> tuple[str, ...]:
    """The host and each parent down to its registrable domain, most specific first.

    ``a.b.evil.co.uk`` -> (a.b.evil.co.uk, b.evil.co.uk, evil.co.uk); the public
    suffix itself (co.uk) is never a candidate, so one ban cannot block a whole TLD.
    """
    labels, stop = host.split("."), registrable(host)
    out = []
    for i in range(len(labels)):
        out.append(".".join(labels[i:]))
        if out[-1] == stop:
            break
    return tuple(out)
