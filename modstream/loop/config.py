"""What the loop reads of the workers' one ``Settings``: narrow views, each a Protocol that ``Settings``
meets as it is, so a loop function names what it reads and a test can hand it just that."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from workers.bundle.load import ScorerSettings


class Reading(Protocol):
    """A reader of the workers' cluster."""

    @property
    def kafka_bootstrap(self) -> str: ...

    def consumer_conf(self, group_id: str | None = None, *, transactional: bool = False) -> dict[str, Any]: ...


class Topics(Reading, Protocol):
    """The workers' topics, read back, and written to for dead letters and replays."""

    @property
    def input_topic(self) -> str: ...
    @property
    def output_topic(self) -> str: ...
    @property
    def feedback_topic(self) -> str: ...
    @property
    def max_text_chars(self) -> int: ...
    @property
    def dead_letter_max_bytes(self) -> int: ...
    @property
    def publish_timeout_s(self) -> float: ...

    def producer_conf(self, transactional_id: str | None = None) -> dict[str, Any]: ...


class Triton(Protocol):
    """The workers' Triton, called under the workers' deadline, and the served and challenger's model names on it."""

    @property
    def triton_url(self) -> str: ...
    @property
    def triton_timeout_s(self) -> float: ...
    @property
    def shadow_triton_model(self) -> str: ...
    @property
    def triton_model(self) -> str: ...


class TritonScoring(Triton, ScorerSettings, Protocol):
    """Text models scored through the workers' Triton."""


class Retraining(Topics, ScorerSettings, Protocol):
    """A retrain: the topics it reads, and the workers' scoring knobs for its in-process rescoring."""


class Replaying(Topics, TritonScoring, Protocol):
    """A replay: the topics it reads and writes, and the Triton that scores another text model."""


class Serving(Triton, Protocol):
    """The links the workers serve and shadow, and the Triton repository a promotion loads text models into."""

    @property
    def model_dir(self) -> Path: ...
    @property
    def shadow_model_dir(self) -> Path | None: ...
    @property
    def model_reload_s(self) -> float: ...
    @property
    def triton_repo(self) -> Path | None: ...
    @property
    def triton_model(self) -> str: ...
