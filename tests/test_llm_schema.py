from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from marag.llm import bounded_schema, output_schema
from marag.llm.schema import inline_refs


class Evidence(BaseModel):
    doc_id: str
    quote: str = Field(max_length=50)


class Verdict(BaseModel):
    """A judgement with its evidence."""

    label: Literal["yes", "no"]
    reason: str = Field(description="why")
    evidence: list[Evidence]
    confidence: float = 0.5
    note: str | None = None


class Node(BaseModel):
    name: str
    children: list[Node] = []


def test_bounded_schema_bounds_free_strings_and_arrays_only():
    s = bounded_schema(Verdict, max_length=123, max_items=4)
    props = s["properties"]
    assert props["reason"]["maxLength"] == 123
    assert props["evidence"]["maxItems"] == 4
    assert "maxLength" not in props["label"]  # an enum is already bounded
    assert s["$defs"]["Evidence"]["properties"]["doc_id"]["maxLength"] == 123
    assert s["$defs"]["Evidence"]["properties"]["quote"]["maxLength"] == 50  # author's bound kept
    assert {"type": "string", "maxLength": 123} in props["note"]["anyOf"]


def test_output_schema_is_closed_inlined_and_fully_required():
    s = output_schema(Verdict)
    assert "$defs" not in s and "$ref" not in str(s)
    assert s["additionalProperties"] is False
    assert s["required"] == ["label", "reason", "evidence", "confidence", "note"]
    item = s["properties"]["evidence"]["items"]
    assert item["additionalProperties"] is False and item["required"] == ["doc_id", "quote"]
    assert "default" not in s["properties"]["confidence"]
    assert s["properties"]["reason"]["description"] == "why"


def test_output_schema_does_not_mutate_pydantic_schema():
    before = Verdict.model_json_schema()
    output_schema(Verdict)
    assert Verdict.model_json_schema() == before


def test_recursive_models_keep_their_refs():
    s = output_schema(Node)
    assert "$defs" in s and "$ref" in str(s)
    assert s["$defs"]["Node"]["additionalProperties"] is False


def test_inline_refs_keeps_sibling_keys():
    schema = {
        "$defs": {"A": {"type": "string"}},
        "type": "object",
        "properties": {"x": {"$ref": "#/$defs/A", "description": "the x"}},
    }
    assert inline_refs(schema)["properties"]["x"] == {"type": "string", "description": "the x"}


def test_field_named_like_a_keyword_is_not_treated_as_schema():
    class Odd(BaseModel):
        type: str
        default: str

    s = output_schema(Odd)
    assert s["required"] == ["type", "default"]
    assert s["properties"]["default"]["maxLength"] == 400
