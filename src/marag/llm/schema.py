"""JSON schemas for constrained decoding, derived from pydantic output models.

Small models decode reliably only inside a tight grammar, so the schema we send is
stricter than the one pydantic validates against:
- every object is closed (`additionalProperties: false`) and lists all its properties
  as required, so the grammar never has to guess which keys come next;
- `$defs` references are inlined (some servers and strict modes reject `$ref` with
  sibling keys; recursive models keep their `$defs`);
- strings and arrays get an upper bound when the model author gave none, because an
  unbounded string can run into `max_tokens` and leave the JSON unterminated.
  Authors should still set `Field(max_length=...)`: the default bound is a safety net.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

DEFAULT_MAX_LENGTH = 400
DEFAULT_MAX_ITEMS = 8


def output_schema(
    model: type[BaseModel],
    max_length: int = DEFAULT_MAX_LENGTH,
    max_items: int = DEFAULT_MAX_ITEMS,
    inline: bool = True,
) -> dict[str, Any]:
    """The schema `ChatModel.generate` sends to the backend for `output=model`."""
    schema = bounded_schema(model, max_length=max_length, max_items=max_items)
    if inline:
        schema = inline_refs(schema)
    _walk(schema, _close_object)
    return schema


def bounded_schema(
    model: type[BaseModel] | dict[str, Any],
    max_length: int = DEFAULT_MAX_LENGTH,
    max_items: int = DEFAULT_MAX_ITEMS,
) -> dict[str, Any]:
    """`model`'s JSON schema with `maxLength` on every free-text string and `maxItems` on
    every array that lacks one (enums and constants are left alone)."""
    schema = copy.deepcopy(model if isinstance(model, dict) else model.model_json_schema())

    def bound(node: dict[str, Any]) -> None:
        if node.get("type") == "string" and not ({"enum", "const", "maxLength"} & node.keys()):
            node["maxLength"] = max_length
        elif node.get("type") == "array" and "maxItems" not in node:
            node["maxItems"] = max_items

    _walk(schema, bound)
    return schema


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """Replace `{"$ref": "#/$defs/X"}` by a copy of X. Recursive schemas are returned
    unchanged (their grammar needs the reference)."""
    defs = schema.get("$defs", {})
    if not defs:
        return schema

    def resolve(node: Any, seen: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [resolve(v, seen) for v in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            name = ref.removeprefix("#/$defs/")
            if name in seen:
                raise _Recursive
            target = resolve(copy.deepcopy(defs[name]), seen + (name,))
            # keys beside the $ref (e.g. a field's description) describe this use of it
            return {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return {k: resolve(v, seen) for k, v in node.items() if k != "$defs"}

    try:
        return resolve(schema, ())
    except _Recursive:
        return schema


class _Recursive(Exception):
    pass


def _close_object(node: dict[str, Any]) -> None:
    if isinstance(node.get("properties"), dict):
        node["additionalProperties"] = False
        node["required"] = list(node["properties"])
    # every property is required now, so a default is never used by the grammar;
    # some strict servers reject the keyword
    node.pop("default", None)


_DATA_KEYS = frozenset({"default", "enum", "const", "examples"})


def _walk(node: Any, fn) -> None:
    """Call `fn` on every sub-schema of `node`, parents before children. `properties`
    and `$defs` map names to schemas (so `fn` skips the mapping itself); values such as
    `default` or `enum` are data, not schemas, and are not visited."""
    if isinstance(node, list):
        for v in node:
            _walk(v, fn)
    elif isinstance(node, dict):
        fn(node)
        for key, v in node.items():
            if key in _DATA_KEYS:
                continue
            if key in ("properties", "$defs") and isinstance(v, dict):
                for sub in v.values():
                    _walk(sub, fn)
            else:
                _walk(v, fn)
