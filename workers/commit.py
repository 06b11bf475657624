"""The commit policy, in one place.

At-least-once: an input offset becomes committable only when every record it
caused (its verdict, or its dead letter) has a successful delivery report. Per
partition we store the offset after the longest fully-delivered prefix of the
batch; anything after a failed delivery is left for redelivery.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from workers.records import InMsg

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Settlement:
    store: dict[TopicPartition, int]  # (topic, partition) -> next offset to consume
    failed: list[InMsg]  # messages whose output was not acknowledged

    @property
    def complete(self) -> bool:
        return not self.failed


def settle(msgs: Sequence[InMsg], undelivered: Collection[int]) -> Settlement:
    """``undelivered`` holds indexes into ``msgs`` whose output was not acknowledged."""
    store: dict[TopicPartition, int] = {}
    blocked: set[TopicPartition] = set()
    for i in sorted(range(len(msgs)), key=lambda j: (msgs[j].topic, msgs[j].partition, msgs[j].offset)):
        msg, tp = msgs[i], (msgs[i].topic, msgs[i].partition)
        if i in undelivered:
            blocked.add(tp)
        elif tp not in blocked:
            store[tp] = msg.offset + 1
    return Settlement(store, [msgs[i] for i in sorted(undelivered)])
