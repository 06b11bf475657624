"""Every Redis key modstream reads or writes, under one configurable prefix."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Keyspace:
    prefix: str

    def user(self, user_id: str) -> str:
        return f"{self.prefix}user:{user_id}"

    def url(self, url: str) -> str:
        return f"{self.prefix}url:{url}"

    def domain(self, domain: str) -> str:
        return f"{self.prefix}domain:{domain}"

    def ip(self, ip: str) -> str:
        return f"{self.prefix}ip:{ip}"

    def signal(self, name: str) -> str:
        """Stream-kept behaviour state (workers/state/signals.py); every such key has a TTL."""
        return f"{self.prefix}sig:{name}"

    def feedback_applied(self, event_id: str) -> str:
        """Marks a feedback event as counted, so a redelivered one is not counted again."""
        return f"{self.prefix}feedback:applied:{event_id}"

    def reporter(self, actor_id: str) -> str:
        """A reporter's record: how many of their reports moderators confirmed and refuted."""
        return f"{self.prefix}reporter:{actor_id}"

    def reporters(self, post_id: str) -> str:
        """The set of accounts that reported a post, for its moderator's label to judge."""
        return f"{self.prefix}reporters:{post_id}"

    def reported(self, actor_id: str, key: str) -> str:
        """Marks that ``actor_id`` reported the entity whose hash is ``key``: once per entity counts."""
        return f"{self.prefix}feedback:reported:{_pair(actor_id, key)}"

    def judged(self, actor_id: str, post_id: str) -> str:
        """Marks that a label of ``post_id`` was counted on its reporter ``actor_id``'s record."""
        return f"{self.prefix}feedback:judged:{_pair(actor_id, post_id)}"

    @property
    def banned_domains(self) -> str:
        return f"{self.prefix}banned:domains"

    @property
    def banned_ips(self) -> str:
        """Single addresses and CIDR ranges, as strings."""
        return f"{self.prefix}banned:ips"


def _pair(first: str, second: str) -> str:
    """Two ids as one key part. Hashed, not joined: ids and URLs may hold ':' (two pairs could
    join alike) or braces (a hash tag, which would override the slot Layout.beside gives a marker)."""
    return hashlib.blake2b(f"{len(first)}:{first}{second}".encode(), digest_size=16).hexdigest()
