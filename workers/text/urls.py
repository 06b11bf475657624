"""Link extraction and domain matching.

Spam hides links from naive regexes (``hxxp://``, ``http:\\\\host\\path``,
``evil[.]com``), so text is de-fanged (:func:`workers.text.normalise.defang`) before matching. A link
needs no scheme: ``cheap-pills.com/now`` counts when its suffix is a public one, which keeps
``e.g.`` and ``file.txt`` out. Registrable domains come from tldextract's bundled public-suffix
snapshot: never the network. Hosts are matched in one form, lower-case ASCII with IDNs in
punycode (:func:`ascii_host`), so a ban on ``xn--e1afmkfd.xn--p1ai`` matches ``пример.рф``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from importlib.resources import files
from urllib.parse import urlsplit

import idna
import tldextract

from workers.text.normalise import defang

_EXTRACT = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)

_URL_CHARS = r"[^\s<>\"'()\[\]{}|^`]"
_URL = rf"(?:\bhttps?\s*:\s*[/\\]{{1,3}}|\bwww\.){_URL_CHARS}+"
# A host without a scheme: labels (any script) ending in an alphabetic or punycode top-level label
# that ends the word, then perhaps a path. Only a candidate: see _bare_host.
_BARE = (
    r"(?<![\w@.\-/:])(?:[^\W_](?:[\w-]{0,61}[^\W_])?\.)+(?:[^\W\d_]{2,63}|xn--[a-z0-9-]{2,59})"
    rf"(?![\w@-]|\.[^\W_])(?:/{_URL_CHARS}*)?"
)
_LINK = re.compile(rf"(?P<url>{_URL})|(?P<bare>{_BARE})", re.I)
_TRAILING = ".,;:!?*"


def _listed(name: str) -> frozenset[str]:
    """A domain list shipped in workers/data (DATA_CARD.md): one a line, ``#`` comments."""
    text = files("workers.data").joinpath(name).read_text()
    return frozenset(line for line in text.split("\n") if line and not line.startswith("#"))


POPULAR_FILE = "popular_domains.txt"
# Hosts where what is behind a link is someone else's: link redirectors and shorteners, and shared
# hosting where anyone publishes under a subdomain. Never popular, never a party to a report.
SHARED: frozenset[str] = _listed("redirectors.txt") | _listed("shared_hosts.txt")
# Popular registrable domains: a broad ranking (the CrUX top 100,000), with the institutional domains
# of the mail world's whitelist that it lacks. Popularity lowers the weight of counts on a domain;
# it never makes two links one, nor vouches for what is behind a link there.
POPULAR: frozenset[str] = (_listed(POPULAR_FILE) | _listed("well_known_domains.txt")) - SHARED


# Query parameters that say who shared a link and how, not what it shows: dropped from its landing.
_TRACKING = re.compile(
    r"^(?:utm_\w+|fbclid|gclid|dclid|msclkid|mc_cid|mc_eid|igshid|si|ref|ref_src|feature|share)$", re.I
)


@dataclass(frozen=True, slots=True)
class Link:
    url: str  # normalised: lower-case scheme and host, forward slashes
    host: str
    domain: str  # registrable domain (or the IP / bare host when there is none)
    suffix: str
    subdomain_depth: int
    landing: str  # what it shows: see :func:`landing`


def landing(host: str, path: str, query: str) -> str:
    """Where a link lands, as two links to the same page compare: host without ``www.``, path without
    a trailing slash, the query without tracking parameters (``utm_*``, ``fbclid``, ...), no scheme or
    fragment. Two sharers of one article land alike; a share button's links, one per sharer, do not."""
    kept = "&".join(p for p in query.split("&") if p and not _TRACKING.match(p.partition("=")[0]))
    return f"{host.removeprefix('www.')}{path.rstrip('/')}{'?' + kept if kept else ''}"


@lru_cache(maxsize=65_536)
def ascii_host(host: str) -> str:
    """``host`` as hosts are matched: lower case, no trailing dot, IDN labels in punycode
    (UTS #46 mapping, IDNA 2008). A host IDNA cannot encode stays as it is, lower-cased."""
    host = host.lower().rstrip(".")
    if host.isascii():
        return host
    try:
        return idna.encode(host, uts46=True).decode("ascii")
    except (UnicodeError, ValueError):  # idna.IDNAError is a UnicodeError
        return host


def _bare_host(host: str) -> bool:
    """Whether a host written without a scheme is taken for a link: its suffix is on the public
    list (``file.txt``, ``e.g`` are not) and its last label is not capitalised mid-sentence
    (``Hi.How``), unless the whole host is shouted (``EVIL.COM``)."""
    tld = host.rpartition(".")[2]
    if not (tld.islower() or host.isupper()):
        return False
    parts = _EXTRACT(ascii_host(host))
    return bool(parts.suffix and parts.domain)


@lru_cache(maxsize=16_384)  # campaign and popular links repeat across posts
def _normalise(raw: str) -> Link | None:
    s = raw.strip().rstrip(_TRAILING).replace("\\", "/")
    s = re.sub(r"^(https?)\s*:\s*/*", lambda m: m.group(1).lower() + "://", s, flags=re.I)
    if not s.lower().startswith(("http://", "https://")):
        s = "http://" + s
    try:
        parts = urlsplit(s)
        host = ascii_host(parts.hostname or "")
    except ValueError:
        return None
    if not host or "." not in host:
        return None
    domain = registrable(host)
    depth = host.count(".") - domain.count(".")
    path = parts.path or ""
    query = f"?{parts.query}" if parts.query else ""
    suffix = domain.partition(".")[2] if "." in domain and not domain[-1].isdigit() else ""
    url = f"{parts.scheme.lower()}://{host}{path}{query}"
    return Link(url, host, domain, suffix, depth, landing(host, path, parts.query))


def _link(m: re.Match[str]) -> Link | None:
    """The link a :data:`_LINK` match stands for; a bare host only past the suffix check."""
    bare = m.group("bare")
    if bare is not None and not _bare_host(bare.split("/", 1)[0]):
        return None
    return _normalise(m.group(0))


def _found(text: str) -> Iterable[re.Match[str]]:
    """Link candidates in de-fanged ``text``; a text without a dot has none (the cheap common case)."""
    return _LINK.finditer(text) if "." in text else ()


def extract_links(text: str, explicit: Iterable[str] = ()) -> tuple[Link, ...]:
    """Explicit URLs first, then those found in the text; de-duplicated, order kept."""
    links = [*map(_normalise, map(defang, explicit)), *map(_link, _found(defang(text)))]
    seen: dict[str, Link] = {}
    for link in links:
        if link is not None and link.url not in seen:
            seen[link.url] = link
    return tuple(seen.values())


def reduce_links(text: str) -> str:
    """``text`` with each link replaced by its registrable domain: the post's template. A campaign's
    copies with a path of their own each read the same, and so does a share button's sentence with
    each sharer's own link: a template is evidence only beside coordination (workers/state/signals.py)."""
    text = defang(text)
    if "." not in text:
        return text

    def reduced(m: re.Match[str]) -> str:
        link = _link(m)
        return link.domain if link else m.group(0)

    return _LINK.sub(reduced, text)


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
