"""An Avro schema derived from a model's JSON Schema (``modstream schema``), for writing it Avro-framed.

Derived, not written by hand, so it cannot drift from the model. It covers what modstream's own
records use: strings (an enum, a pattern or a date-time stays a string, exactly as the JSON form
has it), numbers, integers, booleans, lists, string-keyed maps, nested models and optional fields.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

_SCALARS = {"string": "string", "number": "double", "integer": "long", "boolean": "boolean", "null": "null"}


def avro_schema(model: type[BaseModel], namespace: str = "modstream") -> dict[str, Any]:
    """The Avro record schema of ``model``; a record's fields are its JSON fields, in order."""
    root = model.model_json_schema()
    defs: dict[str, Any] = root.get("$defs", {})
    named: set[str] = set()  # Avro defines a named type once; later uses name it

    def convert(node: dict[str, Any]) -> Any:
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            if name in named:
                return f"{namespace}.{name}"
            return convert(defs[name])
        if "anyOf" in node:
            branches = [convert(b) for b in node["anyOf"]]
            # A default must match a union's first branch: null first where null is a branch.
            return sorted(branches, key=lambda b: b != "null")
        kind = node.get("type")
        if kind == "array":
            return {"type": "array", "items": convert(node["items"])}
        if kind == "object" and "properties" in node:
            named.add(node["title"])
            return {
                "type": "record",
                "name": node["title"],
                "namespace": namespace,
                "fields": [field(name, prop) for name, prop in node["properties"].items()],
            }
        if kind == "object":
            return {"type": "map", "values": convert(node.get("additionalProperties", {"type": "string"}))}
        if kind in _SCALARS:
            return _SCALARS[kind]
        raise ValueError(f"no Avro type for the JSON Schema {node}")

    def field(name: str, prop: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"name": name, "type": convert(prop)}
        if "default" in prop:
            out["default"] = prop["default"]
        return out

    schema: dict[str, Any] = convert(root)
    return schema
