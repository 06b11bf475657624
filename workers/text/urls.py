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

# Shared hosts where a path names one user's own space (``github.com/<user>``, ``youtube.com/@<user>``):
# a link there is that user's content, not the host's, so a burst of people linking their own pages
# is not many accounts pointing at one site.
_SEGMENT = r"[^/?#]+"
USER_PATHS: dict[str, re.Pattern[str]] = {
    host: re.compile(rf"/({pattern})", re.I)
    for host, pattern in {
        "github.com": _SEGMENT,
        "gitlab.com": _SEGMENT,
        "codeberg.org": _SEGMENT,
        "bitbucket.org": _SEGMENT,
        "huggingface.co": _SEGMENT,
        "youtube.com": rf"@{_SEGMENT}|(?:c|channel|user)/{_SEGMENT}",
        "medium.com": rf"@{_SEGMENT}",
        "tiktok.com": rf"@{_SEGMENT}",
        "twitter.com": _SEGMENT,
        "x.com": _SEGMENT,
        "instagram.com": _SEGMENT,
        "facebook.com": _SEGMENT,
        "linkedin.com": rf"in/{_SEGMENT}",
        "reddit.com": rf"(?:u|user|r)/{_SEGMENT}",
    }.items()
}
# Popular and institutional registrable domains (workers/data/DATA_CARD.md), and the shared hosts above.
WELL_KNOWN: frozenset[str] = frozenset(
    line
    for line in files("workers.data").joinpath("well_known_domains.txt").read_text().split("\n")
    if line and not line.startswith("#")
) | frozenset(USER_PATHS)


@dataclass(frozen=True, slots=True)
class Link:
    url: str  # normalised: lower-case scheme and host, forward slashes
    host: str
    domain: str  # registrable domain (or the IP / bare host when there is none)
    suffix: str
    subdomain_depth: int
    site: str  # whose content it is: see :func:`site`


def site(domain: str, path: str, query: str) -> str:
    """What a link's stream signals count it under. A user's own page on a shared host is that
    user's site (``github.com/alice``); on a well-known host each link is its own content (a video, an
    article: a share button's distinct links are not copies); elsewhere the registrable domain, which
    whoever runs it controls, paths and all."""
    if (pattern := USER_PATHS.get(domain)) is not None and (m := pattern.match(path)):
        return f"{domain}/{m.group(1).lower()}"
    if domain in WELL_KNOWN:
        return f"{domain}{path.rstrip('/')}{query}"
    return domain


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
    return Link(f"{parts.scheme.lower()}://{host}{path}{query}", host, domain, suffix, depth, site(domain, path, query))


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
    """``text`` with each link replaced by its :func:`site`: copies of a campaign that differ only in
    their link paths on its own domain (one per copy, to track or to dodge filters) read the same;
    a share button's sentence with each sharer's own video or repository does not."""
    text = defang(text)
    if "." not in text:
        return text

    def reduced(m: re.Match[str]) -> str:
        link = _link(m)
        return link.site if link else m.group(0)

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
