"""Batch sizes after the worker takes partitions over: start small, then double.

A worker that takes over a crashed one's partitions finds a backlog. Polled at full size,
its first batch is the whole of ``batch_max_size`` (512 posts, about 3.6 s of the model on
2 cores) before any verdict comes out; a small first batch puts verdicts out within a
fraction of that, and doubling reaches the full size after a few batches, so throughput
under load is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class BatchRamp:
    start: int  # the first batch's size after an assignment
    max_size: int  # what the ramp grows to, and stays at
    size: int = field(init=False)

    def __post_init__(self) -> None:
        if not 1 <= self.start <= self.max_size:
            raise ValueError(f"a batch ramp needs 1 <= start ({self.start}) <= max_size ({self.max_size})")
        self.size = self.start

    def reset(self) -> None:
        """Partitions were assigned: the next batch starts small again."""
        self.size = self.start

    def polled(self, got: int) -> None:
        """A poll returned ``got`` records: grow after a batch, never while idle."""
        if got:
            self.size = min(self.max_size, self.size * 2)
