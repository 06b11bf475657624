"""Stage 2: block posts whose link domain (or a parent) or source IP is banned, with no model call."""

from __future__ import annotations

import ipaddress
import logging
import math
import socket
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from schemas import Reason
from schemas.events import canonical_ip
from workers.clients import HashStore
from workers.errors import each
from workers.metrics import BANLIST_SIZE
from workers.records import Failure, Outcome, Post, verdict_for
from workers.state.keyspace import Keyspace
from workers.text.urls import ascii_host, domain_candidates

STAGE = "short_circuit"
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class IPRange:
    """A banned network as integers: matching costs no ``ipaddress`` parse per post."""

    width: int  # 4 or 16 bytes
    first: int
    last: int
    label: str

    @classmethod
    def of(cls, net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> IPRange:
        first = int(net.network_address)
        return cls(net.max_prefixlen // 8, first, first + net.num_addresses - 1, str(net))


def _packed(ip: str) -> bytes:
    return socket.inet_pton(socket.AF_INET6 if ":" in ip else socket.AF_INET, ip)


@dataclass(frozen=True, slots=True)
class BanList:
    domains: frozenset[str]
    ips: frozenset[str]  # canonical text, as events carry them
    networks: tuple[IPRange, ...]

    @classmethod
    def parse(cls, domains: Iterable[str], ips: Iterable[str]) -> BanList:
        addrs: set[str] = set()
        nets: list[IPRange] = []
        for raw in ips:
            net = ipaddress.ip_network(raw.strip(), strict=False)
            if net.num_addresses == 1:
                addrs.add(canonical_ip(str(net.network_address)))
            else:
                nets.append(IPRange.of(net))
        # Links' hosts are in ascii_host's form (punycode), so a ban written in Unicode matches too.
        return cls(frozenset(ascii_host(d.strip()) for d in domains), frozenset(addrs), tuple(nets))

    @classmethod
    def empty(cls) -> BanList:
        return cls(frozenset(), frozenset(), ())

    def __len__(self) -> int:
        return len(self.domains) + len(self.ips) + len(self.networks)

    def domain_hit(self, host: str) -> str | None:
        return next((c for c in domain_candidates(host) if c in self.domains), None)

    def ip_hit(self, ip: str) -> str | None:
        """``ip`` in canonical form (``schemas.events.canonical_ip``)."""
        if ip in self.ips:
            return ip
        if not self.networks:
            return None
        packed = _packed(ip)
        value = int.from_bytes(packed)
        return next((n.label for n in self.networks if n.width == len(packed) and n.first <= value <= n.last), None)


def _check(post: Post, bans: BanList, model_versions: dict[str, str]) -> Outcome | Post:
    """A block verdict when the post's link host (or a parent) or its IP is banned, else the post."""
    reasons = [
        Reason.of("banned_domain", f"{link.host} matches banned {hit}")
        for link in post.links
        if (hit := bans.domain_hit(link.host))
    ]
    if post.event.ip is not None and (ip_hit := bans.ip_hit(post.event.ip)):
        reasons.append(Reason.of("banned_ip", f"{post.event.ip} matches banned {ip_hit}"))
    if not reasons:
        return post
    return verdict_for(
        post,
        decision="block",
        score=1.0,
        reasons=reasons,
        stage_scores={},
        model_versions=model_versions,
        degraded=False,
    )


def short_circuit(
    posts: Sequence[Post], bans: BanList, model_versions: dict[str, str]
) -> tuple[list[Outcome], list[Post], list[Failure]]:
    """(blocked, the rest, the posts this step failed on)."""
    checked, failures = each(STAGE, posts, lambda p: p.msg, lambda p: _check(p, bans, model_versions))
    blocked = [c for c in checked if isinstance(c, Outcome)]
    rest = [c for c in checked if isinstance(c, Post)]
    return blocked, rest, failures


class BanListCache:
    """The ban lists, refreshed from the store at most every ``refresh_s``.

    Bans change rarely and must be matched against parent domains and CIDR ranges,
    which a per-batch set lookup cannot do; a stale list is kept when a refresh fails.
    """

    def __init__(self, store: HashStore, ks: Keyspace, refresh_s: float) -> None:
        self.store = store
        self.ks = ks
        self.refresh_s = refresh_s
        self._bans = BanList.empty()
        self._loaded_at = -math.inf

    async def current(self) -> BanList:
        if time.monotonic() - self._loaded_at >= self.refresh_s:
            try:
                domains, ips = await self.store.members([self.ks.banned_domains, self.ks.banned_ips])
                self._bans = BanList.parse(domains, ips)
                BANLIST_SIZE.set(len(self._bans))
            except Exception:
                log.exception("ban list refresh failed; keeping %d entries", len(self._bans))
            self._loaded_at = time.monotonic()
        return self._bans
