"""The one settings object. Every client is configured from here.

Env vars are ``MODSTREAM_*``. Durations are seconds (``*_s``, floats) everywhere in the
code; librdkafka's millisecond keys are mapped in :meth:`Settings.consumer_conf`. The
former millisecond variables (``MODSTREAM_BATCH_MAX_WAIT_MS`` and the like) are still
read, converted once, so existing deployments keep working. librdkafka keys pass through unchanged via
``MODSTREAM_KAFKA_EXTRA`` (a JSON object of dotted keys), so SASL/TLS work
without code changes; the only secret among them is given separately as
``MODSTREAM_KAFKA_SASL_PASSWORD``.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from schemas.events import TEXT_JUDGED_CHARS
from workers.logs import LIBRDKAFKA, LogFormat

# Duration settings that used to be given in milliseconds, as MODSTREAM_<NAME>_MS.
FORMERLY_MS = ("session_timeout_s", "fetch_wait_max_s", "batch_max_wait_s", "redis_timeout_s", "triton_timeout_s")


# What a verdict the campaign signals decided becomes (workers/stages/decide.py).
CampaignAction = Literal["review", "block"]
DEFAULT_CAMPAIGN_ACTION: CampaignAction = "block"


def cache_root() -> Path:
    """The per-user cache of trained models: ``$MODSTREAM_CACHE_DIR`` or ``~/.cache/modstream``."""
    env = os.environ.get("MODSTREAM_CACHE_DIR")
    return Path(env).expanduser() if env else Path("~/.cache/modstream").expanduser()


def default_model_dir() -> Path:
    """The bundle ``modstream models`` links as ``current`` in the cache."""
    return cache_root() / "current"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MODSTREAM_", frozen=True, extra="ignore")

    # Kafka
    kafka_bootstrap: str = "127.0.0.1:9092"
    kafka_extra: dict[str, str | int | bool] = Field(default_factory=dict)
    kafka_sasl_password: SecretStr | None = None
    group_id: str = "modstream-moderation"
    input_topic: str = "posts"
    output_topic: str = "verdicts"
    dlq_topic: str = "posts.dlq"
    feedback_topic: str = "feedback"
    profiles_topic: str = "profiles"
    profiles_dlq_topic: str = "profiles.dlq"
    profiles_group_id: str = "modstream-profiles"
    # at_least_once: a crash can repeat a batch's verdicts. exactly_once: each batch's verdicts,
    # dead letters and input offsets commit in one Kafka transaction, so a read_committed
    # reader sees every output once, at the cost of a commit round trip per batch.
    processing_guarantee: Literal["at_least_once", "exactly_once"] = "at_least_once"
    # This replica's stable name: its transactional id (zombie fencing across restarts) and its
    # static group membership derive from it. The same across restarts, distinct between replicas.
    instance_id: Annotated[str, Field(min_length=1)] = Field(default_factory=socket.gethostname)
    # A killed worker's partitions wait for its session to expire: this bounds recovery. Apache
    # Kafka accepts 6 s and up by default (group.min.session.timeout.ms); Tansu any, and there
    # a join itself waits about one session, so the embedded stack runs with 1 s.
    session_timeout_s: Annotated[float, Field(ge=0.001)] = 6.0
    # Static membership (group.instance.id = instance_id): on Apache Kafka a restarted replica
    # takes its partitions back at once, without a rebalance. Tansu 0.6 makes every static
    # join wait a whole session, so it is off by default.
    static_membership: bool = False
    # Apache Kafka answers a fetch as soon as data arrives, so there this only sets how often an
    # idle consumer asks; Tansu answers only when it expires, so it bounds per-hop latency. Each
    # fetch costs Tansu about 0.8 ms of CPU, asked for or not: at 20 ms a consumer took it 4% of a
    # core, 0.2 ms per post at the bench's rate (docs/PERFORMANCE.md, seventh round).
    fetch_wait_max_s: Annotated[float, Field(ge=0.001, le=10)] = 0.1
    # A broker that reads its log from storage may answer nothing within that wait, over and over
    # (Tansu on S3 behind a backlog): after fetches came back empty for fetch_stall_s with records
    # waiting, the wait grows, up to fetch_wait_backoff_max_s, until the consumer catches up.
    fetch_wait_backoff_max_s: Annotated[float, Field(ge=0.001, le=30)] = 2.0
    # Unset: the session timeout. A rebalance holds every member's fetches for a join round (about
    # half a session on Tansu), and a stall shorter than that is the group's, not the broker's:
    # growing the wait means leaving and rejoining, and on Tansu a member that leaves while another
    # joins wedged the group (for over 200 s in our runs).
    fetch_stall_s: Annotated[float, Field(gt=0)] | None = None

    # How often every client refreshes topic metadata (librdkafka's default is 5 minutes): a worker
    # started before its input topic exists, or after the broker moved, finds it within this.
    kafka_metadata_refresh_s: Annotated[float, Field(ge=1, le=3600)] = 5.0
    # cooperative-sticky: a rebalance moves only the partitions that change owner, the others keep
    # flowing (Apache Kafka 2.4+; Tansu accepts it). range (eager) stops the whole group per rebalance.
    # Every member of a group must name the same protocol: switching is a full stop and start.
    kafka_assignment_strategy: Literal["cooperative-sticky", "range", "roundrobin"] = "cooperative-sticky"

    # How often librdkafka reports statistics (consumer lag per partition, group state) to the
    # metrics exporter; 0 turns them off. Lag for a scaler comes from the broker (KEDA), not this.
    kafka_stats_interval_s: Annotated[float, Field(ge=0, le=3600)] = 5.0

    # Micro-batching: a batch is what has arrived, up to max_size; an idle worker waits up to
    # max_wait for the first record. Batches grow with load instead of waiting to fill. A batch's
    # texts are sorted by length, then cut into requests where the lengths jump: at 512 the
    # requests' tokens are 1.4% padding, at 256 2.7% (docs/PERFORMANCE.md, seventh round).
    batch_max_size: Annotated[int, Field(ge=1, le=10_000)] = 512
    batch_max_wait_s: Annotated[float, Field(ge=0.001, le=60)] = 0.05
    # After partitions are assigned (a start, a rebalance), batches start at this size and double
    # up to batch_max_size: a worker taking over a backlog puts its first verdicts out sooner.
    batch_start_size: Annotated[int, Field(ge=1, le=10_000)] = 16
    # Batches handled at once: the next one is prepared while the last is in the model.
    max_batches_in_flight: Annotated[int, Field(ge=1, le=16)] = 2
    # How long to wait for delivery reports before giving the batch up for redelivery.
    publish_timeout_s: Annotated[float, Field(gt=0)] = 30.0
    # Exactly-once: librdkafka's timeout for each transactional call (init, begin, send_offsets,
    # commit, abort). A call still running a little past it is taken as wedged (seen after a broker
    # restart): its producer is abandoned and replaced under the same transactional id.
    transaction_timeout_s: Annotated[float, Field(gt=0)] = 10.0
    # A dead letter keeps at most this much of its original (with its size and hash): keep it
    # under the producer's message.max.bytes (1,000,000 by default) and the DLQ topic's limit.
    dead_letter_max_bytes: Annotated[int, Field(ge=1024)] = 512 * 1024
    # After an error no step caught fails a batch, each record is retried alone this many
    # times; one that still fails is dead-lettered, so it cannot stall its partition.
    max_record_attempts: Annotated[int, Field(ge=1, le=100)] = 3
    # A post's text is judged on its first this many characters; a longer one is cut, not
    # dead-lettered, and its verdict carries the reason "text_truncated".
    max_text_chars: Annotated[int, Field(ge=1, le=1_000_000)] = TEXT_JUDGED_CHARS

    # How input records are framed. json: plain JSON. registry-json, avro: framed by a Confluent
    # Schema Registry (a magic byte and the schema id, then the payload), read by confluent-kafka's
    # deserializers into the fields the tolerant PostEvent validates; verdicts are then written the
    # same way, their schema registered under <output topic>-value. Dead letters keep the original bytes.
    input_format: Literal["json", "registry-json", "avro"] = "json"
    schema_registry_url: str | None = None  # one URL, or several comma-separated
    # "<user>:<password>" for HTTP basic auth (Confluent Cloud: the API key and secret).
    schema_registry_basic_auth: SecretStr | None = None
    # More of confluent-kafka's registry client settings, e.g. {"ssl.ca.location": "/etc/ca.pem"}.
    schema_registry_extra: dict[str, str | int | bool] = Field(default_factory=dict)
    # Per request, retries included, so a new schema id cannot hold the event loop for long.
    schema_registry_timeout_s: Annotated[float, Field(gt=0, le=60)] = 5.0

    # Redis
    redis_url: SecretStr = SecretStr("redis://127.0.0.1:6379/0")
    # A Redis Cluster (redis_url names any of its nodes): the cluster client, every script's
    # keys in one slot, and each stream-kept signal's hash split over this many slots
    # (workers/adapters/redis_layout.py). Changing the shard count starts those counts afresh.
    redis_cluster: bool = False
    redis_signal_shards: Annotated[int, Field(ge=1, le=16384)] = 64
    redis_prefix: str = "modstream:"
    redis_timeout_s: Annotated[float, Field(ge=0.001)] = 0.5
    # How long the stream-kept signals a post saw are kept under its id: a redelivery within
    # this window is decided from exactly the same values (workers/state/signals.py).
    signal_snapshot_ttl_s: Annotated[int, Field(ge=1)] = 600
    banlist_refresh_s: Annotated[float, Field(gt=0)] = 5.0

    # Triton
    triton_url: str = "127.0.0.1:8001"
    triton_model: str = "spam_text"
    # The model repository Triton serves from (explicit model control): `modstream models promote` writes a
    # bundle's other text model into <triton_repo>/<triton_model>/<n>/ and loads it there before switching.
    triton_repo: Path | None = None
    # Queueing included: on a 2-core CPU a 512-post batch takes one to two seconds of inference.
    triton_timeout_s: Annotated[float, Field(ge=0.001)] = 5.0
    # Measured on CPU (docs/PERFORMANCE.md): requests of at most 16 texts (at least half that,
    # cut where lengths jump), enough in flight to keep one instance per core busy. On a GPU,
    # larger sub-batches (64+) with MODSTREAM_TRITON_PAD_MULTIPLE.
    triton_sub_batch: Annotated[int, Field(ge=1)] = 16
    triton_max_in_flight: Annotated[int, Field(ge=1)] = 8
    # Round padded widths up to a multiple of this: 1 for the ragged python backend, ~16 on GPU.
    triton_pad_multiple: Annotated[int, Field(ge=1, le=512)] = 1
    # Tokens per text; None means the length the content model was trained with (its card).
    max_tokens: Annotated[int, Field(ge=8, le=512)] | None = None
    text_cache_size: Annotated[int, Field(ge=0)] = 50_000

    # Models: a directory holding text/ (tokenizer.json, card.json) and decision/ (model.txt, card.json).
    model_dir: Path = Field(default_factory=default_model_dir)
    # How often the worker looks whether model_dir (the `current` link `modstream models promote`
    # swaps) points at another bundle, between batches; 0 never looks.
    model_reload_s: Annotated[float, Field(ge=0)] = 5.0
    # A challenger bundle decided beside the served one, its verdicts published to shadow_topic only.
    shadow_model_dir: Path | None = None
    shadow_topic: str = "verdicts.shadow"
    # The Triton model name serving the challenger's text model, when it is not the served one
    # (`modstream build-repo --shadow-model`); the champion's is triton_model.
    shadow_triton_model: str = "spam_text_shadow"

    # The cascade: a bundle's first stage (decision/first_stage/) decides the posts it is sure of without
    # the transformer, the rest are scored and decided in full (workers/stages/decide.py). Off: every
    # post is scored. A share of the first stage's verdicts is decided by the full model too, off the
    # verdict path, and the pairs counted (modstream_cascade_audits_total).
    cascade: bool = True
    cascade_audit_share: Annotated[float, Field(ge=0, le=1)] = 0.01

    # A post the campaign signals took out of "allow" (a coordinated wave: near-copies, one
    # journey from many accounts to one domain) is blocked, or held for review by a person.
    campaign_action: CampaignAction = DEFAULT_CAMPAIGN_ACTION

    metrics_port: Annotated[int, Field(ge=0, le=65535)] = 9400  # 0 disables the exporter and the probes
    # /livez on the metrics port fails once the event loop has not run its 1 s heartbeat for this
    # long: longer than any CPU step of a batch, so only a stuck loop trips it.
    liveness_stale_s: Annotated[float, Field(gt=1)] = 30.0
    # text for a terminal; json: one JSON object per line, librdkafka's lines included.
    log_format: LogFormat = "text"

    @model_validator(mode="after")
    def _registry_named(self) -> Settings:
        if self.input_format != "json" and not self.schema_registry_url:
            raise ValueError(f"MODSTREAM_INPUT_FORMAT={self.input_format} needs MODSTREAM_SCHEMA_REGISTRY_URL")
        return self

    def schema_registry_conf(self) -> dict[str, Any]:
        """confluent-kafka's SchemaRegistryClient settings."""
        conf: dict[str, Any] = {
            "url": self.schema_registry_url,
            "timeout": self.schema_registry_timeout_s,
            # Its retries sleep on the event loop (the client is synchronous): one, short.
            "max.retries": 1,
            "retries.wait.ms": 200,
            **self.schema_registry_extra,
        }
        if self.schema_registry_basic_auth is not None:
            conf["basic.auth.user.info"] = self.schema_registry_basic_auth.get_secret_value()
        return conf

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The former names rank below the current ones: MODSTREAM_X_S wins over MODSTREAM_X_MS.
        legacy = _FormerMilliseconds(settings_cls)
        return init_settings, env_settings, legacy, dotenv_settings, file_secret_settings

    def kafka_common(self) -> dict[str, Any]:
        """librdkafka settings shared by every client: the one place dotted keys are mapped."""
        conf: dict[str, Any] = {
            "bootstrap.servers": self.kafka_bootstrap,
            # librdkafka's own log lines through Python logging (served by the clients' poll), not raw to stderr.
            "logger": LIBRDKAFKA,
            "topic.metadata.refresh.interval.ms": _ms(self.kafka_metadata_refresh_s),
            **self.kafka_extra,
        }
        if self.kafka_sasl_password is not None:
            conf["sasl.password"] = self.kafka_sasl_password.get_secret_value()
        return conf

    def consumer_conf(self, group_id: str | None = None, *, transactional: bool = False) -> dict[str, Any]:
        """For the moderation worker's group, or another consumer's ``group_id``; ``transactional``
        when its offsets are committed in the producer's transactions instead."""
        return {
            **self.kafka_common(),
            "group.id": group_id or self.group_id,
            "partition.assignment.strategy": self.kafka_assignment_strategy,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": _ms(self.session_timeout_s),
            # librdkafka's default (3 s) must stay under the session: a third of it, as Kafka advises.
            "heartbeat.interval.ms": max(1, _ms(self.session_timeout_s / 3)),
            **({"group.instance.id": f"{self.instance_id}"} if self.static_membership and group_id is None else {}),
            "fetch.wait.max.ms": _ms(self.fetch_wait_max_s),
            # Outputs of an open or aborted transaction are never read (librdkafka's default, stated).
            "isolation.level": "read_committed",
            # At-least-once: offsets are stored by the commit policy only after every
            # output of a message is acknowledged; librdkafka then commits what was stored.
            # Exactly-once: offsets are committed only inside the output transaction.
            "enable.auto.offset.store": False,
            "enable.auto.commit": not transactional,
            "auto.commit.interval.ms": 1000,
            "statistics.interval.ms": _ms(self.kafka_stats_interval_s),
        }

    @property
    def fetch_stall(self) -> float:
        """How long fetches must come back empty, with records waiting, before the wait grows."""
        return self.session_timeout_s if self.fetch_stall_s is None else self.fetch_stall_s

    @property
    def exactly_once(self) -> bool:
        return self.processing_guarantee == "exactly_once"

    @property
    def transactional_id(self) -> str | None:
        """The moderation worker's transactional id in exactly-once mode: a restarted replica
        fences its predecessor and aborts the transaction it left open."""
        return f"{self.group_id}-{self.instance_id}" if self.exactly_once else None

    def producer_conf(self, transactional_id: str | None = None) -> dict[str, Any]:
        return {
            **self.kafka_common(),
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            **({"transactional.id": transactional_id} if transactional_id else {}),
        }


def _ms(seconds: float) -> int:
    """librdkafka's integer milliseconds."""
    return round(seconds * 1000)


class _FormerMilliseconds(PydanticBaseSettingsSource):
    """``MODSTREAM_<NAME>_MS`` for the settings now named ``<name>_s``, converted to seconds."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        raise NotImplementedError  # __call__ reads every field at once

    def __call__(self) -> dict[str, Any]:
        env = {k.upper(): v for k, v in os.environ.items()}  # case-insensitive, like the other variables
        seconds = {}
        for name in FORMERLY_MS:
            var = f"MODSTREAM_{name.removesuffix('_s').upper()}_MS"
            if var in env:
                try:
                    seconds[name] = float(env[var]) / 1000
                except ValueError:
                    raise ValueError(f"{var}={env[var]!r} is not a number of milliseconds") from None
        return seconds
