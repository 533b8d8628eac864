"""The HTTP API as a Markdown page, written from the server's own OpenAPI schema, so
the documented names are the code's: `python -m marag.serve.apidoc > docs/http-api.md`
(a test checks that the page is up to date)."""

from __future__ import annotations

import tempfile
from typing import Any

INTRO = """# HTTP API

`marag serve` answers these requests (generated from its OpenAPI schema; the running
server also shows it at `/docs` and `/openapi.json`). With `--token-env VAR`, every
request but `/health` needs `Authorization: Bearer $VAR`. Errors are JSON with `error`
and `hint`. See [the server and the viewer](server.md) for limits and security.
"""


def _type(prop: dict[str, Any]) -> str:
    if "anyOf" in prop:
        return " or ".join(_type(p) for p in prop["anyOf"])
    kind = prop.get("type", "object")
    if kind == "array":
        return f"list of {_type(prop.get('items', {}))}"
    return "null" if kind == "null" else kind


def _fields(schema: dict[str, Any]) -> list[str]:
    required = set(schema.get("required", []))
    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for name, prop in schema.get("properties", {}).items():
        default = "required" if name in required else f"`{prop['default']!r}`" if "default" in prop else ""
        rows.append(f"| `{name}` | {_type(prop)} | {default} | {prop.get('description', '')} |")
    return rows


def openapi_markdown(schema: dict[str, Any]) -> str:
    parts = [INTRO]
    components = schema.get("components", {}).get("schemas", {})
    for path, operations in schema["paths"].items():
        for method, op in operations.items():
            parts.append(f"## `{method.upper()} {path}`\n")
            if op.get("description"):
                parts.append(" ".join(op["description"].split()) + "\n")
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if body and "$ref" in body:
                name = body["$ref"].rsplit("/", 1)[-1]
                parts.append(f"Body: `{name}`\n")
                parts.append("\n".join(_fields(components[name])) + "\n")
    return "\n".join(parts)


def current_schema() -> dict[str, Any]:
    from marag.serve.app import ServeSettings, create_app

    with tempfile.TemporaryDirectory() as runs:
        return create_app(ServeSettings(runs_dir=runs, llm={"backend": "scripted"})).openapi()


if __name__ == "__main__":
    print(openapi_markdown(current_schema()), end="")
