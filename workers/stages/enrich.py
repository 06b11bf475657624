"""Stage 3: user, URL, domain and IP history from Redis, in one pipelined round trip per batch."""

from __future__ import annotations

from collections.abc import Sequence

from workers.clients import HashStore
from workers.features import Profile
from workers.keyspace import Keyspace
from workers.records import Post

STAGE = "enrich"
_PARTS = ("user", "url", "domain", "ip")


def profile_keys(post: Post, ks: Keyspace) -> tuple[str | None, ...]:
    """Keys in ``_PARTS`` order; None where the post has no such entity (no link)."""
    link = post.links[0] if post.links else None
    return (
        ks.user(post.event.user_id),
        ks.url(link.url) if link else None,
        ks.domain(link.domain) if link else None,
        ks.ip(str(post.event.ip)),
    )


async def enrich(posts: Sequence[Post], store: HashStore, ks: Keyspace) -> list[Profile]:
    """Raises on store errors; the caller decides how to degrade."""
    per_post = [profile_keys(p, ks) for p in posts]
    # Each key once: a burst from one user or one domain shares its hashes.
    flat = list(dict.fromkeys(k for keys in per_post for k in keys if k is not None))
    found = dict(zip(flat, await store.hgetall_many(flat), strict=True)) if flat else {}
    return [
        Profile(**{part: found.get(k, {}) if k else {} for part, k in zip(_PARTS, keys, strict=True)})
        for keys in per_post
    ]
