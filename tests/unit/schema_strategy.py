"""Hypothesis strategies for the JSON Schema subset pydantic exports for the event contracts.

(hypothesis-jsonschema, the general tool, does not run on current Hypothesis: it reaches into
internals that have since changed.) A schema keyword this does not know raises, so a contract
that grows one cannot be silently under-tested.
"""

from __future__ import annotations

from datetime import UTC, timedelta, timezone
from typing import Any

from hypothesis import strategies as st

_KNOWN = {
    "type", "anyOf", "$ref", "$defs", "const", "default", "title", "description", "format",
    "minLength", "maxLength", "pattern", "minimum", "maximum", "items", "maxItems", "minItems",
    "properties", "required", "additionalProperties",
}  # fmt: skip
_OFFSETS = st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))])
_FORMATS: dict[str, st.SearchStrategy[str]] = {
    "date-time": st.datetimes(timezones=_OFFSETS).map(lambda d: d.isoformat()),
    "ipv4": st.ip_addresses(v=4).map(str),
    "ipv6": st.ip_addresses(v=6).map(str),
}
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


def from_schema(schema: dict[str, Any], root: dict[str, Any] | None = None) -> st.SearchStrategy[Any]:
    """Instances valid against ``schema``; unknown properties (where allowed) are arbitrary JSON."""
    root = root or schema
    if unknown := set(schema) - _KNOWN:
        raise ValueError(f"schema keywords this strategy does not cover: {sorted(unknown)}")
    if "$ref" in schema:
        return from_schema(root["$defs"][schema["$ref"].rsplit("/", 1)[1]], root)
    if "const" in schema:
        return st.just(schema["const"])
    if "anyOf" in schema:
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        return st.one_of(*(from_schema({**rest, **branch}, root) for branch in schema["anyOf"]))
    kind = schema.get("type")
    if kind == "string":
        return _string(schema)
    if kind == "integer":
        return st.integers(schema.get("minimum"), schema.get("maximum"))
    if kind == "number":
        return st.floats(schema.get("minimum"), schema.get("maximum"), allow_nan=False, allow_infinity=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        items = from_schema(schema["items"], root)
        return st.lists(items, min_size=schema.get("minItems", 0), max_size=min(schema.get("maxItems", 4), 4))
    if kind == "object":
        return _object(schema, root)
    raise ValueError(f"no strategy for {schema}")


def _string(schema: dict[str, Any]) -> st.SearchStrategy[str]:
    if "format" in schema:
        return _FORMATS[schema["format"]]
    low, high = schema.get("minLength", 0), schema.get("maxLength")
    text = st.from_regex(schema["pattern"], fullmatch=True) if "pattern" in schema else st.text(max_size=high or 40)
    return text.filter(lambda s: len(s) >= low and (high is None or len(s) <= high))


def _object(schema: dict[str, Any], root: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    props = {name: from_schema(sub, root) for name, sub in schema.get("properties", {}).items()}
    required = set(schema.get("required", ()))
    known = st.fixed_dictionaries(
        {k: v for k, v in props.items() if k in required},
        optional={k: v for k, v in props.items() if k not in required},
    )
    if not schema.get("additionalProperties", False):
        return known
    extra = st.dictionaries(st.text(min_size=1, max_size=12).filter(lambda k: k not in props), JSON, max_size=3)
    return st.builds(lambda a, b: {**b, **a}, known, extra)
