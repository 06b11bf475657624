"""Every Redis key modstream reads or writes, under one configurable prefix."""

from __future__ import annotations

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
        """Stream-kept behaviour state (workers/signals.py); every such key has a TTL."""
        return f"{self.prefix}sig:{name}"

    def feedback_applied(self, event_id: str) -> str:
        """Marks a feedback event as counted, so a redelivered one is not counted again."""
        return f"{self.prefix}feedback:applied:{event_id}"

    @property
    def banned_domains(self) -> str:
        return f"{self.prefix}banned:domains"

    @property
    def banned_ips(self) -> str:
        """Single addresses and CIDR ranges, as strings."""
        return f"{self.prefix}banned:ips"
