"""Stage 3: user, URL, domain and IP history from Redis, and the stream-kept signals (each post
read as before it, then counted), in one pipelined round trip per batch."""

from __future__ import annotations

from collections.abc import Sequence

from workers.clients import HashStore
from workers.records import Post
from workers.state import signals
from workers.state.features import Profile
from workers.state.keyspace import Keyspace

STAGE = "enrich"


def profile_keys(post: Post, ks: Keyspace) -> tuple[str | None, ...]:
    """Keys in :class:`Profile` order (user, url, domain, ip); None where the post has no such entity."""
    link, ip = post.links[0] if post.links else None, post.event.ip
    return (
        ks.user(post.event.user_id),
        ks.url(link.url) if link else None,
        ks.domain(link.domain) if link else None,
        ks.ip(ip) if ip is not None else None,
    )


async def enrich(posts: Sequence[Post], store: HashStore, ks: Keyspace, snapshot_ttl_s: int) -> list[Profile]:
    """Raises on store errors; the caller decides how to degrade. ``posts`` are counted in order."""
    per_post = [profile_keys(p, ks) for p in posts]
    # Each key once: a burst from one user or one domain shares its hashes.
    flat = list(dict.fromkeys(k for keys in per_post for k in keys if k is not None))
    plans = signals.plans(posts, ks, snapshot_ttl_s)
    hashes, seen = await store.enrich(flat, plans)
    found = dict(zip(flat, hashes, strict=True))

    def get(key: str | None) -> dict[str, str]:
        return found.get(key, {}) if key else {}

    return [
        Profile(get(user), get(url), get(domain), get(ip), signals=signals.values(plan, counted))
        for (user, url, domain, ip), plan, counted in zip(per_post, plans, seen, strict=True)
    ]
