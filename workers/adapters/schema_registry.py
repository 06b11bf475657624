"""Records framed by a Confluent Schema Registry, read and written by confluent-kafka's own serializers.

Imported only when ``MODSTREAM_INPUT_FORMAT`` names a registry format (the ``registry`` extra).
A record's fields are then validated by the same tolerant ``PostEvent`` as a plain JSON record's.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, SchemaRegistryError
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from schemas import Verdict
from schemas.avro import avro_schema
from workers.errors import Outage, describe

RegistryFormat = Literal["registry-json", "avro"]

# The registry's answer for a schema id (or guid, or reference) it does not have: that record's fault.
NOT_FOUND = 404

# The writer's schema is the producer's: the tolerant PostEvent is the one contract modstream holds
# records to (a field the writer's schema refuses may be one PostEvent ignores), and a verdict was
# built by the strict Verdict model already. Validating against the schema too would cost CPU per record.
_NO_VALIDATION = {"validate": False}


class GuardedRegistry:
    """A registry client whose errors say whose they are. No such schema (404) is the record's: it
    goes to the dead-letter topic. Anything else (no answer, a 5xx, refused credentials, a rate
    limit) is the registry's, an :class:`Outage`: it would be the same for every record, so
    dead-lettering would empty the stream into the DLQ while the registry is away."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        @functools.wraps(attr)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return attr(*args, **kwargs)
            except SchemaRegistryError as exc:
                if exc.http_status_code == NOT_FOUND:
                    raise
                raise Outage(f"the schema registry answered {describe(exc)}") from exc
            except Exception as exc:
                raise Outage(f"the schema registry did not answer: {describe(exc)}") from exc

        return guarded


@dataclass
class RegistryFraming:
    """:class:`workers.clients.Framing` with a Schema Registry: a record's schema is fetched by the id
    in its frame once, then cached by the client; a verdict's schema is registered once per topic."""

    client: Any  # a SchemaRegistryClient, or a test double of one
    format: RegistryFormat
    _writers: dict[str, Callable[[Any, SerializationContext], bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._registry = GuardedRegistry(self.client)
        self._reader = (
            AvroDeserializer(self._registry)
            if self.format == "avro"
            else JSONDeserializer(None, schema_registry_client=self._registry, conf=_NO_VALIDATION)
        )

    def read(self, topic: str, value: bytes) -> dict[str, Any]:
        fields = self._reader(value, SerializationContext(topic, MessageField.VALUE))
        if not isinstance(fields, dict):
            raise TypeError(f"a {self.format} record must be an object, not {type(fields).__name__}")
        return fields

    def write(self, topic: str, fields: dict[str, Any]) -> bytes:
        out: bytes = self._writer(topic)(fields, SerializationContext(topic, MessageField.VALUE))
        return out

    def register(self, topic: str) -> int:
        """Register the verdict schema under ``topic``'s subject (``<topic>-value``) now: its id,
        or :class:`Outage`. Afterwards :meth:`write` needs no registry round trip."""
        registered = self._registry.register_schema_full_response(f"{topic}-value", verdict_schema(self.format))
        self._writer(topic)  # built now, so the first verdict does not build it
        return int(registered.schema_id)

    def _writer(self, topic: str) -> Callable[[Any, SerializationContext], bytes]:
        if topic not in self._writers:
            schema = verdict_schema(self.format)
            self._writers[topic] = (
                AvroSerializer(self._registry, schema)
                if self.format == "avro"
                else JSONSerializer(schema, self._registry, conf=_NO_VALIDATION)
            )
        return self._writers[topic]


def verdict_schema(fmt: RegistryFormat) -> Schema:
    """The Verdict's schema as registered: its JSON Schema (``modstream schema``), or the Avro schema
    derived from it."""
    if fmt == "avro":
        return Schema(json.dumps(avro_schema(Verdict)), "AVRO")
    return Schema(json.dumps(Verdict.model_json_schema()), "JSON")


def registry_framing(conf: dict[str, Any], fmt: RegistryFormat) -> RegistryFraming:
    """The framing of ``fmt`` with a registry client of ``conf`` (confluent-kafka's client settings)."""
    return RegistryFraming(SchemaRegistryClient(conf), fmt)
