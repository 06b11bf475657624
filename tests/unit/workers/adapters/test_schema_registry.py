"""Records framed by a Confluent Schema Registry (MODSTREAM_INPUT_FORMAT=registry-json|avro).

No registry server can be installed here (Karapace, Apicurio and Confluent's are not packaged on
PyPI or Debian), so the registry is confluent-kafka's own test double, ``MockSchemaRegistryClient``
(what ``SchemaRegistryClient.new_client`` returns for a ``mock://`` URL), and the records are framed
by confluent-kafka's real serializers. An unreachable registry is the real HTTP client on a closed port.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

import fastavro
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, SchemaRegistryError
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pydantic import ValidationError

from schemas import PostEvent, Verdict
from schemas.avro import avro_schema
from tests.unit.fakes import body
from tests.unit.workers.test_moderation import make_worker
from workers.adapters.schema_registry import RegistryFraming, verdict_schema
from workers.config import Settings
from workers.errors import Outage
from workers.metrics import UNKNOWN_FIELDS
from workers.records import InMsg
from workers.stages.validate import validate
from workers.text.encoder import TextEncoder

TOPIC = "posts"
CTX = SerializationContext(TOPIC, MessageField.VALUE)

# What a producer on Avro might register for its posts: integer ids, epoch-ms times, an optional ip,
# and a field modstream does not know.
PRODUCER_AVRO = {
    "type": "record",
    "name": "Post",
    "fields": [
        {"name": "post_id", "type": "long"},
        {"name": "user_id", "type": "string"},
        {"name": "created_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "text", "type": "string"},
        {"name": "ip", "type": ["null", "string"], "default": None},
        {"name": "lang", "type": "string"},
    ],
}


def mock_registry() -> Any:
    return SchemaRegistryClient.new_client({"url": "mock://modstream-tests"})


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def framed_json(client: Any, fields: dict[str, Any], ctx: SerializationContext = CTX) -> bytes:
    """A post as a JSON Schema producer writes it, with PostEvent's schema from ``modstream schema``."""
    out: bytes = JSONSerializer(json.dumps(PostEvent.model_json_schema()), client)(fields, ctx)
    return out


def framed_avro(client: Any, fields: dict[str, Any]) -> bytes:
    out: bytes = AvroSerializer(client, json.dumps(PRODUCER_AVRO))(fields, CTX)
    return out


def msgs(*values: bytes) -> list[InMsg]:
    return [InMsg(TOPIC, 0, i, f"k{i}".encode(), v, 0.0) for i, v in enumerate(values)]


def test_a_registry_json_record_is_read_by_the_tolerant_contract() -> None:
    client = mock_registry()
    value = framed_json(client, body("p1", post_id=42, ip=None, extra_field=1))
    assert value[0] == 0 and struct.unpack(">I", value[1:5])[0] >= 1  # the frame: magic byte, schema id
    before = unknown_fields_counted()
    posts, failures = validate(msgs(value), framing=RegistryFraming(client, "registry-json"))
    assert not failures and posts[0].event.post_id == "42" and posts[0].event.ip is None
    assert posts[0].event.unknown_fields() == {"extra_field"}
    # Counted once, under its name or, once other tests have used up the label budget, under "other".
    assert unknown_fields_counted() == before + 1


def unknown_fields_counted() -> float:
    return sum(s.value for m in UNKNOWN_FIELDS.collect() for s in m.samples if s.name.endswith("_total"))


def test_an_avro_record_is_read_by_the_tolerant_contract() -> None:
    client = mock_registry()
    fields = {"post_id": 7, "user_id": "u/=+", "created_at": 1795255200000, "text": "hi", "ip": None, "lang": "en"}
    posts, failures = validate(msgs(framed_avro(client, fields)), framing=RegistryFraming(client, "avro"))
    assert not failures
    event = posts[0].event
    assert (event.post_id, event.user_id, event.created_at.isoformat()) == ("7", "u/=+", "2026-11-21T10:00:00+00:00")
    assert event.unknown_fields() == {"lang"}


@pytest.mark.parametrize(
    ("value", "error_class"),
    [
        (json.dumps(body("plain")).encode(), "SerializationError"),  # plain JSON: no magic byte
        (b"\x00", "error"),  # a frame cut short
        (b"\x00\x00\x00\x03\xe7{}", "SchemaRegistryError"),  # schema id 999: the registry has none
    ],
    ids=["no-magic-byte", "short-frame", "unknown-schema-id"],
)
def test_an_unreadable_frame_is_a_dead_letter(value: bytes, error_class: str) -> None:
    client = mock_registry()
    framed_json(client, body("registered"))  # the registry holds a schema, not this record's
    posts, failures = validate(msgs(value), framing=RegistryFraming(client, "registry-json"))
    assert not posts and len(failures) == 1
    assert failures[0].stage == "validate" and failures[0].error_class == error_class
    assert "\n" not in failures[0].error_message


def test_a_framed_record_the_contract_refuses_is_a_dead_letter_naming_the_field() -> None:
    client = mock_registry()
    # The producer's own schema may allow what PostEvent refuses: its writer's schema is not the contract.
    loose = JSONSerializer(json.dumps({"type": "object"}), client)({"post_id": "x", "created_at": "noon"}, CTX)
    _, failures = validate(msgs(loose), framing=RegistryFraming(client, "registry-json"))
    assert failures[0].error_class == "ValidationError" and "created_at" in failures[0].error_message


def failing(status: int) -> Any:
    """The registry double, answering every schema lookup with ``status``."""
    client = mock_registry()

    def get_schema(*args: object, **kwargs: object) -> Schema:
        raise SchemaRegistryError(status, -1, "down")

    client.get_schema = get_schema
    return client


@pytest.mark.parametrize(
    "client",
    [
        SchemaRegistryClient({"url": f"http://127.0.0.1:{closed_port()}", "max.retries": 0, "timeout": 1}),
        failing(503),
        failing(401),
    ],
    ids=["unreachable", "5xx", "refused-credentials"],
)
def test_a_registry_that_does_not_answer_fails_the_batch_and_blames_no_record(client: Any) -> None:
    value = framed_json(mock_registry(), body("p1"))
    with pytest.raises(Outage):
        validate(msgs(value), framing=RegistryFraming(client, "registry-json"))


async def test_an_outage_in_the_worker_stores_nothing_and_dead_letters_nothing(encoder: TextEncoder) -> None:
    batch = msgs(framed_json(mock_registry(), body("p1")), framed_json(mock_registry(), body("p2")))
    w = make_worker(encoder, batch)
    w.framing = RegistryFraming(failing(503), "registry-json")
    with pytest.raises(Outage):
        await w.handle(batch)
    assert not w.sink.records and not w.source.stored  # type: ignore[attr-defined]


def consumer_side(client: Any, fmt: str) -> Any:
    """How a platform reads the verdicts: confluent-kafka's deserializer, writer schema by id."""
    return AvroDeserializer(client) if fmt == "avro" else JSONDeserializer(None, schema_registry_client=client)


@pytest.mark.parametrize("fmt", ["registry-json", "avro"])
async def test_framed_posts_round_trip_to_framed_verdicts(encoder: TextEncoder, fmt: str) -> None:
    client = mock_registry()
    if fmt == "avro":
        good = framed_avro(client, {"post_id": 1, "user_id": "u", "created_at": 0, "text": "cheap pills", "lang": "x"})
    else:
        good = framed_json(client, body("1", text="cheap pills", ip=None))
    batch = msgs(good, b"not framed")
    w = make_worker(encoder, batch)
    w.framing = RegistryFraming(client, fmt)  # type: ignore[arg-type]
    schema_id = w.framing.register("verdicts")
    await w.handle(batch)

    records = {r[0]: r for r in w.sink.records}  # type: ignore[attr-defined]
    topic, key, value = records["verdicts"][:3]
    assert key == b"1" and value[0] == 0 and struct.unpack(">I", value[1:5])[0] == schema_id
    fields = consumer_side(client, fmt)(value, SerializationContext(topic, MessageField.VALUE))
    verdict = Verdict.model_validate_json(json.dumps(fields))  # the JSON form, times as RFC 3339 text
    assert verdict.post_id == "1" and verdict.decision in ("allow", "review", "block") and verdict.features
    assert records["posts.dlq"][2] == b"not framed"  # a dead letter keeps the original bytes untouched
    assert w.source.stored == {(TOPIC, 0): 2}  # type: ignore[attr-defined]


def test_the_verdict_schemas_are_those_of_the_contract() -> None:
    assert json.loads(verdict_schema("registry-json").schema_str) == Verdict.model_json_schema()
    avro = avro_schema(Verdict)
    assert [f["name"] for f in avro["fields"]] == list(Verdict.model_json_schema()["properties"])
    fastavro.parse_schema(avro)  # a valid Avro schema


def test_a_registry_format_needs_a_registry_and_keeps_its_credentials_secret() -> None:
    with pytest.raises(ValidationError, match="MODSTREAM_SCHEMA_REGISTRY_URL"):
        Settings(input_format="avro")
    s = Settings(
        input_format="registry-json",
        schema_registry_url="https://sr.example:8081",
        schema_registry_basic_auth="key:secret",
        schema_registry_extra={"cache.capacity": 5000},
    )
    conf = s.schema_registry_conf()
    assert conf["basic.auth.user.info"] == "key:secret" and conf["cache.capacity"] == 5000
    assert "secret" not in repr(s)
    SchemaRegistryClient(conf)  # settings confluent-kafka's client accepts
