"""What each route answers, as the OpenAPI schema documents it: the error body every
route can send, with its statuses, and the shape of each success.

These models document; they do not filter (routes pass them as `responses`, not
`response_model`): a field a route adds is still sent, and a mismatch is caught by the
schema fuzz (tests/test_fuzz_api.py), which checks every answer against them, instead
of turning into a 500 for the client.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class ErrorAnswer(BaseModel):
    """Every error: what went wrong and, mostly, what to do about it."""

    error: str
    hint: str | None = None


# The statuses any route can answer with besides its own success, and when. Declared
# once for the whole app: the Gate (marag.serve.http) answers 401/408/411/413/429 before
# a route runs, and 503 to any request the server's stop cut short, so every route can give them.
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorAnswer, "description": why}
    for code, why in [
        (400, "a bad request: an unknown or ill-formed name, invalid options, a request addressed to a non-loopback name"),
        (401, "no token, or a wrong one"),
        (404, "no such run, trace, file or index"),
        (408, "the body did not arrive in time"),
        (409, "a run folder the server will not write into"),
        (411, "a body without Content-Length"),
        (413, "a body over the size limit"),
        (422, "a body or parameter of the wrong shape"),
        (429, "too many questions, evaluations or wrong tokens at once (see Retry-After)"),
        (503, "the server is stopping and did not answer in its grace (see Retry-After)"),
    ]
}


class Health(BaseModel):
    status: str
    version: str


class StrategyInfo(BaseModel):
    name: str
    description: str
    needs_retriever: bool


class AskAnswer(BaseModel):
    model_config = ConfigDict(extra="allow")  # the strategy's own fields (`Answer.summary`)

    question: str
    answer: str
    strategy: str
    trace_id: str


class RunListed(BaseModel):
    run_id: str
    dataset: str
    strategies: list[str]
    status: str


class RunStarted(BaseModel):
    run_id: str
    status: str


class RunState(BaseModel):
    run_id: str
    status: str
    done: int | None
    total: int | None
    error: str | None
    config: dict[str, Any] | None  # None: failed before it wrote anything
    summary: list[dict[str, Any]]


def ok(model: Any) -> dict[int | str, dict[str, Any]]:
    """`responses` for a route answering `model` as JSON."""
    return {200: {"model": model, "description": "Successful Response"}}


# One server-sent event of GET /runs/{id}/events (each event, not the stream: that is
# how OpenAPI tools read a text/event-stream schema): its data is JSON, a progress event
# (done, total, strategy, qid, error) or, last, the final state (status, done, total, error).
RUN_EVENT: dict[str, Any] = {
    "type": "object",
    "required": ["data"],
    "properties": {
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {
                "type": "object",
                "required": ["done", "total", "error"],
                "properties": {
                    "status": {"type": "string"},
                    "done": {"type": ["integer", "null"]},
                    "total": {"type": ["integer", "null"]},
                    "strategy": {"type": "string"},
                    "qid": {"type": "string"},
                    "error": {"type": ["string", "null"]},
                },
            },
        }
    },
}


def ok_as(schemas: dict[str, dict[str, Any]]) -> dict[int | str, dict[str, Any]]:
    """`responses` for a route answering a file or a stream, not JSON: media type -> schema."""
    return {200: {"description": "Successful Response", "content": {m: {"schema": s} for m, s in schemas.items()}}}


# GET /runs/{id}/files/{name}: the report, a plot, or config.json as it is on disk
RUN_FILE: dict[str, dict[str, Any]] = {"text/markdown": {"type": "string"}, "image/png": {"type": "string"}, "application/json": {}}
