"""Schema Registry-framed posts through the real worker, broker, Redis and tritonserver.

The registry is confluent-kafka's test double (``MockSchemaRegistryClient``), shared by the
producer, the worker and the verdict reader: no registry server is installable here (see
tests/unit/workers/adapters/test_schema_registry.py). Everything else is the real stack."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.serialization import MessageField, SerializationContext

from modstream.harness.traffic import Record
from schemas import Verdict
from tests.integration.conftest import run_worker
from tests.integration.test_pipeline import read_dead_letters
from tests.unit.fakes import KINDS
from tests.unit.workers.adapters.test_schema_registry import consumer_side, framed_json, mock_registry
from workers.adapters.schema_registry import RegistryFraming
from workers.config import Settings

pytestmark = pytest.mark.integration


def test_registry_framed_posts_round_trip_to_registry_framed_verdicts(settings: Settings) -> None:
    client = mock_registry()
    framing = RegistryFraming(client, "registry-json")
    s = settings.model_copy(update={"input_format": "registry-json", "schema_registry_url": "mock://it"})
    ctx = SerializationContext(s.input_topic, MessageField.VALUE)
    # Every kind of post real producers send, framed as a JSON Schema producer frames them.
    records = [Record(str(e["post_id"]), framed_json(client, e, ctx), None) for e in KINDS.values()]
    records.append(Record("unframed", json.dumps(next(iter(KINDS.values()))).encode(), None))
    out = run_worker(s, records, framing=framing).outcomes

    assert out.dead_letters == {"unframed"} and set(out.raw_verdicts) == {r.key for r in records} - {"unframed"}
    read = consumer_side(client, "registry-json")
    for key, value in out.raw_verdicts.items():
        fields = read(value, SerializationContext(s.output_topic, MessageField.VALUE))
        assert Verdict.model_validate_json(json.dumps(fields)).post_id == key
    assert read_dead_letters(s, 1)["unframed"].error_class == "SerializationError"
