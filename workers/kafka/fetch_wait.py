"""How long the consumer's fetches may wait, adapted to the broker.

Tansu answers a fetch only when its wait expires, and a broker that must first read the log
from its storage (Tansu on S3, after a restart or behind a backlog) may answer nothing within
a short wait, again and again: the consumer then makes no progress at all. So while fetches
keep coming back empty with records known to be waiting, the wait grows; once the consumer
has caught up and sees nothing more to read, it goes back to the configured wait (which
bounds per-hop latency on Tansu).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# Each back-off step multiplies the wait by this.
GROWTH = 5


@dataclass(slots=True)
class FetchWait:
    base_s: float  # the configured wait
    max_s: float  # the longest it may grow to
    stall_s: float  # how long polls must come back empty before the wait changes
    current_s: float = 0.0
    _empty_since: float | None = None

    def __post_init__(self) -> None:
        self.current_s = self.base_s

    def rebalanced(self) -> None:
        """The group rebalanced (partitions assigned, revoked or lost): the stall clock starts
        afresh. The empty polls while the group was joining say nothing of this broker's fetches;
        counting them backed the wait off (a rejoin) right after every restart, and, when another
        member was joining, left a group on Tansu without an owner for its partitions."""
        self._empty_since = None

    def observe(self, got_records: bool, now: float, lag: Callable[[], int | None]) -> float | None:
        """After a poll at ``now`` (monotonic seconds): the new wait, or None to keep it.
        ``lag`` (records waiting on the assigned partitions, None while unknown: no partitions
        yet) is asked only after a stall."""
        if got_records:
            self._empty_since = None
            return None
        if self._empty_since is None:
            self._empty_since = now
            return None
        if now - self._empty_since < self.stall_s:
            return None
        self._empty_since = now  # the next decision after another stall_s
        waiting = lag()
        if waiting is None:
            return None
        if waiting > 0 and self.current_s < self.max_s:
            self.current_s = min(self.current_s * GROWTH, self.max_s)
        elif waiting <= 0 and self.current_s > self.base_s:
            self.current_s = self.base_s
        else:
            return None
        return self.current_s
