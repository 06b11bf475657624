"""The profile-field contract: which Redis keys and fields a platform supplies, and how.

Everything here is derived from the :mod:`schemas.profiles` models' JSON Schema, so the
contract ``modstream profile-contract`` prints, the values the ingester writes, and the
schema producers validate against cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from schemas.profiles import INITIAL_ONLY, PROFILE_FIELDS, ProfileUpdate
from workers.state.keyspace import Keyspace

# Beside each field written newest-wins: the updated_at of the value stored, in epoch µs
# (an integer, exact in Lua's doubles), so a late older update cannot overwrite it.
STAMP_SUFFIX = ":updated_us"
_EPOCH = datetime.fromisoformat("1970-01-01T00:00:00+00:00")
KEYS: dict[str, Callable[[Keyspace, str], str]] = {"user": Keyspace.user, "domain": Keyspace.domain}


@dataclass(frozen=True, slots=True)
class Encoding:
    describes: str
    encode: Callable[[Any], str]


# By JSON Schema type (or format): what the decision model's features parse back.
ENCODINGS: dict[str, Encoding] = {
    "boolean": Encoding("1 or 0", lambda v: "1" if v else "0"),
    "integer": Encoding("decimal integer", str),
    "number": Encoding("decimal number", repr),
    "date-time": Encoding("epoch seconds, integer", lambda v: str(int(v.timestamp()))),
}


@dataclass(frozen=True, slots=True)
class FieldSpec:
    name: str
    kind: str  # a key of ENCODINGS
    initial_only: bool
    schema: Mapping[str, Any]  # the value's JSON Schema (bounds, description)

    def describe(self) -> dict[str, Any]:
        bounds = {k: v for k, v in self.schema.items() if k in ("minimum", "maximum")}
        return {
            "encoding": ENCODINGS[self.kind].describes,
            **bounds,
            "write": "if absent" if self.initial_only else f"newest updated_at wins (kept in <field>{STAMP_SUFFIX})",
            **({"description": self.schema["description"]} if "description" in self.schema else {}),
        }


def _spec(name: str, prop: Mapping[str, Any]) -> FieldSpec:
    (value,) = [b for b in prop["anyOf"] if b.get("type") != "null"]
    return FieldSpec(name, value.get("format", value["type"]), bool(prop.get(INITIAL_ONLY)), {**prop, **value})


SPECS: dict[str, dict[str, FieldSpec]] = {
    entity: {name: _spec(name, prop) for name, prop in model.model_json_schema()["properties"].items()}
    for entity, model in PROFILE_FIELDS.items()
}


def contract(keyspace: Keyspace) -> dict[str, Any]:
    """The contract as JSON-ready data: key pattern and fields per entity."""
    return {
        "record": "ProfileUpdate (`modstream schema`), one per record on the profiles topic",
        "entities": {
            entity: {
                "key": KEYS[entity](keyspace, "{id}"),
                "fields": {name: spec.describe() for name, spec in specs.items()},
            }
            for entity, specs in SPECS.items()
        },
    }


@dataclass(frozen=True, slots=True)
class ProfileWrite:
    """One update's writes to one hash."""

    entity: str
    key: str
    at_us: int  # updated_at, epoch microseconds
    newest: tuple[tuple[str, str], ...]  # (field, value), applied when at_us is not older
    initial: tuple[tuple[str, str], ...]  # (field, value), applied only while absent


def epoch_us(at: datetime) -> int:
    return (at - _EPOCH) // timedelta(microseconds=1)


def plan(updates: Sequence[ProfileUpdate], keyspace: Keyspace) -> list[ProfileWrite]:
    """The writes for a batch, in record order; fields left out or null are not written."""
    writes = []
    for update in updates:
        u, specs = update.root, SPECS[update.root.entity]
        given = [(specs[name], value) for name, value in u.fields if value is not None]
        encoded = [(spec, (spec.name, ENCODINGS[spec.kind].encode(value))) for spec, value in given]
        writes.append(
            ProfileWrite(
                u.entity,
                KEYS[u.entity](keyspace, u.id),
                epoch_us(u.updated_at),
                tuple(fv for spec, fv in encoded if not spec.initial_only),
                tuple(fv for spec, fv in encoded if spec.initial_only),
            )
        )
    return writes
