"""The HTTP API fuzzed from its own OpenAPI schema (schemathesis, on Hypothesis): every
operation the schema lists, and the viewer pages (`pages_schema`), with the token and
without, get generated requests, valid and invalid ones. Every answer must be a non-5xx
status the schema documents, with a body the schema allows, and no answer may carry a
byte of the secret files planted beside the runs directory (or reached through links
planted inside it). HTTP clients resolve "." and ".." path segments before sending, so
those are sent raw, straight to the app, in `test_raw_dot_segments_...`.

The server is the real app in process (scripted model, the sample index, one small
stored run). Two things are held back, each for a stated reason:
- evaluations (POST /runs) are checked in full (dataset, strategies, options, run id,
  run folder) and accepted, but their work is not run (`InstantJobs`): an evaluation is
  minutes of work per request; the real one is tested in tests/test_serve.py.
- generated requests name only the baseline strategies when they name a real one
  (`KNOWN_STRATEGIES`): the fuzz is of the HTTP edge; every strategy's own run is
  tests/test_every_strategy.py's.

`fuzz_operation` is shared with benchmarks/fuzz_api.py (the long profile).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis")
schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.generation import GenerationMode  # noqa: E402
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance  # noqa: E402

from marag.llm import ScriptedLLM  # noqa: E402
from marag.llm.scripted import placeholder_reply  # noqa: E402
from marag.serve.app import ServeSettings, create_app  # noqa: E402
from marag.serve.jobs import DONE, Job, Jobs  # noqa: E402
from asgi_scope import http_scope  # noqa: E402

TOKEN = "fuzz-token-of-enough-length"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SECRET = b"FUZZ-SECRET-OUTSIDE-RUNS"  # in every planted file outside runs/
KNOWN_STRATEGIES = ["llm_only", "vanilla_rag"]
CHECKS = [not_a_server_error, response_schema_conformance, status_code_conformance]
FAST_EXAMPLES = 20  # per operation, signed-in state and mode: 25 pairs x 2 x 20 = 1000 requests


class InstantJobs(Jobs):
    """Jobs that finish as soon as they are accepted, without running their work (see the
    module docstring); everything before the work (the checks) is the server's own."""

    def start(self, run_id, work):
        job = Job()
        job.finish(DONE)
        self._jobs[run_id] = job
        return job


@dataclass
class World:
    root: Path
    app: Any
    run_ids: list[str]
    trace_ids: list[str]
    files: list[str]
    qids: list[str]
    operations: dict[str, Any] = field(default_factory=dict)  # label -> schemathesis APIOperation
    sent: Counter = field(default_factory=Counter)  # requests per (operation label, signed in, mode)
    statuses: Counter = field(default_factory=Counter)  # (operation label, signed in, mode, status) -> requests
    failures: list[str] = field(default_factory=list)


def build_world(root: Path, repo: Path, data_dir: Path) -> World:
    """A runs directory with one scripted run (and planted links out of it), the sample
    index, a secret beside the runs directory, and the app serving them."""
    from marag.eval.report import build_report
    from marag.eval.runner import EvalConfig, run_eval
    from marag.index.pipeline import index_corpus
    from marag.index.store import IndexConfig
    from marag.llm import LLMConfig

    runs, indexes, outside = root / "runs", root / "indexes", root / "outside"
    index_corpus(repo / "samples" / "corpus", indexes / "sample", IndexConfig(retrievers=["bm25"]), progress=False)
    cfg = EvalConfig(dataset="hotpotqa_train100", strategies=["llm_only"], limit=2, llm=LLMConfig(backend="scripted"))
    asyncio.run(run_eval(cfg, runs / "demo", data_dir=data_dir, progress=False, llm=ScriptedLLM(fn=placeholder_reply)))
    build_report([runs / "demo"])
    # the secrets: a file beside runs/, a run folder outside it, and links to both from inside
    (root / "secret.md").write_bytes(SECRET + b"\n")
    (root / "config.json").write_bytes(json.dumps({"config": {"dataset": SECRET.decode(), "strategies": ["llm_only"]}}).encode())
    shutil.copytree(runs / "demo", outside)
    (outside / "report.md").write_bytes(SECRET)
    (outside / "config.json").write_text(json.dumps({"config": {"dataset": SECRET.decode(), "strategies": ["llm_only"]}}))
    (runs / "demo" / "leak.md").symlink_to(root / "secret.md")
    (runs / "linked").symlink_to(outside, target_is_directory=True)
    (runs / "half").mkdir()
    (runs / "half" / "config.json").symlink_to(root / "config.json")

    trace_ids = [json.loads(line)["id"] for line in (runs / "demo" / "traces.jsonl").read_text().splitlines() if line.strip()]
    settings = ServeSettings(runs_dir=str(runs), indexes_dir=str(indexes), data_dir=str(data_dir), token=TOKEN,
                             llm={"backend": "scripted"}, max_body_bytes=20_000, max_question_chars=500)  # fmt: skip
    app = create_app(settings, llm=ScriptedLLM(fn=placeholder_reply))
    app.state.serve.jobs = InstantJobs(settings.max_runs)
    names = ["demo", "linked", "half", "...", "..x", "x..", "../secret.md", "demo/..", "%2e%2e", "..%2fsecret.md", "..\\secret.md"]
    files = ["report.md", "config.json", "leak.md", "results.jsonl", "../secret.md", "..", "../../secret.md", "by_type.png"]
    qids = [json.loads(line)["qid"] for line in (runs / "demo" / "results.jsonl").read_text().splitlines() if line.strip()]
    world = World(root, app, names, [*trace_ids, "../" + trace_ids[0], "0" * 6], files, qids)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, headers=AUTH)
    world.operations = {op.label: op for op in (result.ok() for result in schema.get_all_operations())}
    pages = schemathesis.openapi.from_dict(pages_schema(settings))
    pages.app = app  # served by the same app as the API
    world.operations.update((op.label, op) for op in (result.ok() for result in pages.get_all_operations()))
    return world


def pages_schema(settings: ServeSettings) -> dict[str, Any]:
    """The viewer pages (GET / and /view/...) as an OpenAPI document. The API schema
    leaves them out (they are pages, not API); a twin app built with them included gives
    their real parameters, and the error answers are marked JSON, which they are (the
    app's error handlers write them) whatever the page route's own media type."""
    from marag.serve import routes_pages

    hidden = [r for r in routes_pages.router.routes if not r.include_in_schema]
    for route in hidden:
        route.include_in_schema = True
    try:
        doc = create_app(settings, llm=ScriptedLLM(fn=placeholder_reply)).openapi()
    finally:
        for route in hidden:
            route.include_in_schema = False
    doc["paths"] = {p: ops for p, ops in doc["paths"].items() if p == "/" or p.startswith("/view/")}
    for ops in doc["paths"].values():
        for op in ops.values():
            for code, answer in op["responses"].items():
                if code != "200" and "text/html" in answer.get("content", {}):
                    answer["content"] = {"application/json": answer["content"].pop("text/html")}
    return doc


def _steered(world: World, op) -> Any:
    """Generated cases, half of them with real or hostile names put in (run ids, file
    names, trace ids, a strategy, the index, a dataset), each drawn on its own: random
    text alone almost never names anything, so it would never get past the first check.
    Hypothesis draws the choices too, so a failure shrinks and replays like any other."""

    def steer(drawn):
        case, steered, picks = drawn
        if not steered:
            return case
        for key in ("run_id", "trace_id", "name"):
            if case.path_parameters and key in case.path_parameters:
                case.path_parameters[key] = picks[key]
        if isinstance(case.query, dict) and "qid" in case.query:
            case.query["qid"] = picks["qid"]
        if isinstance(case.body, dict):
            if "question" in case.body:
                case.body.update(strategy=picks["strategy"], index=picks["index"])
                case.body["question"] = str(case.body.get("question"))[:200] or "q"
            if "dataset" in case.body:
                case.body.update(dataset="hotpotqa_train100", strategies=picks["strategies"], limit=picks["limit"])
        return case

    # real names weigh twice as much as all the hostile ones together: most steered
    # requests reach a run, a file or a trace (a page needs two real names), the rest
    # try to get out
    def names(real: list[str], hostile: list[str]):
        return st.one_of(st.sampled_from(real), st.sampled_from(real), st.sampled_from(hostile))

    picks = st.fixed_dictionaries({
        "run_id": names(["demo"], world.run_ids), "trace_id": names(world.trace_ids[:-2], world.trace_ids[-2:]),
        "name": names(["report.md", "config.json", "by_type.png"], world.files), "strategy": st.sampled_from(KNOWN_STRATEGIES),
        "index": st.sampled_from(["sample", None, "../indexes/sample", "sample/.."]), "qid": names(world.qids, ["", "../x", "a/b#c?d%e"]),
        "strategies": st.sampled_from([KNOWN_STRATEGIES[:1], KNOWN_STRATEGIES]), "limit": st.integers(1, 2),
    })  # fmt: skip
    return lambda mode: st.tuples(op.as_strategy(generation_mode=mode), st.booleans(), picks).map(steer)


def fuzz_operation(world: World, op, *, signed_in: bool, mode: GenerationMode, max_examples: int, derandomize: bool = True) -> None:
    """Send `max_examples` generated requests to one operation and check each answer;
    a failure is recorded in `world.failures` and raised. `derandomize`: the same
    requests every run (CI stays stable), seeded by the operation, so operations that
    share a parameter (run_id) do not all get the same values."""
    headers = dict(AUTH) if signed_in else {}
    fixed = hypothesis.seed(zlib.crc32(f"{op.label} {signed_in} {mode.value}".encode())) if derandomize else (lambda f: f)

    @fixed
    @settings(max_examples=max_examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate])  # fmt: skip
    @given(case=_steered(world, op)(mode))
    def run(case):
        # an empty or dot-segment path parameter makes another route's path (/runs/ is
        # /runs, answered through a redirect; the client resolves /runs/.. to /): no client
        # can address this operation with it (raw ".." paths: test_raw_dot_segments...)
        segments, template = case.formatted_path.split("/"), op.path.split("/")
        hypothesis.assume(len(segments) == len(template) and all(
            s not in ("", ".", "..") for s, t in zip(segments, template) if t.startswith("{")))  # fmt: skip
        if not signed_in and case.headers:
            case.headers.pop("Authorization", None)  # "not signed in" means no token at all
        world.sent[op.label, signed_in, mode.value] += 1
        response = case.call(headers=headers)
        world.statuses[op.label, signed_in, mode.value, response.status_code] += 1
        where = f"{op.label} {case.path_parameters or ''} {str(case.body)[:200]!r}: {response.status_code}"
        try:
            assert SECRET not in response.content, f"{where}: the answer holds the secret"
            case.validate_response(response, checks=CHECKS)
        except Exception as exc:
            world.failures.append(f"{where}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
            raise

    run()


@pytest.fixture(scope="module")
def world(tmp_path_factory, repo, data_dir) -> World:
    return build_world(tmp_path_factory.mktemp("fuzz"), repo, data_dir)


# operations that take input: fuzzed with invalid input too (the others have none to make invalid)
WITH_INPUT = ["POST /ask", "GET /traces/{trace_id}", "POST /runs", "GET /runs/{run_id}", "GET /runs/{run_id}/events",
              "GET /runs/{run_id}/files/{name}"]  # fmt: skip
PAGES = ["GET /view/runs/{run_id}", "GET /view/runs/{run_id}/traces/{trace_id}", "GET /view/traces/{trace_id}",
         "GET /view/runs/{run_id}/question"]  # fmt: skip
WITH_INPUT += PAGES
LABELS = ["GET /health", "GET /strategies", "GET /indexes", "GET /runs", "GET /", *WITH_INPUT]
MODES = {label: [GenerationMode.POSITIVE, *([GenerationMode.NEGATIVE] if label in WITH_INPUT else [])] for label in LABELS}


def test_the_schema_lists_every_operation_fuzzed_here(world):
    assert sorted(world.operations) == sorted(LABELS)


@pytest.mark.parametrize("signed_in", [True, False], ids=["token", "no-token"])
@pytest.mark.parametrize(("label", "mode"), [(label, mode) for label in LABELS for mode in MODES[label]], ids=str)
def test_generated_requests_get_documented_answers_and_never_a_secret(world, label, mode, signed_in):
    fuzz_operation(world, world.operations[label], signed_in=signed_in, mode=mode, max_examples=FAST_EXAMPLES)


def test_the_fuzz_reached_every_operation_signed_in_and_was_refused_without_the_token(world):
    """Run after the fuzz above (file order): its requests were not all turned away at
    the door, and without the token nothing but /health was answered."""
    if not world.sent:
        pytest.skip("run with the fuzz tests above")
    assert sum(world.sent.values()) >= 200
    for label in LABELS:
        assert world.statuses[label, True, "positive", 200] > 0, f"{label}: no generated request was answered 200"
        without = {status for (lbl, signed, _, status) in world.statuses if lbl == label and not signed}
        assert without == ({200} if label == "GET /health" else {401}), (label, without)


def _raw_get(app, path: str, query: str = "") -> tuple[int, bytes]:
    """GET `path` exactly as written, straight to the ASGI app: HTTP clients resolve "."
    and ".." segments before sending, a hostile client need not (curl --path-as-is)."""
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = http_scope("GET", path, query, [(b"authorization", AUTH["Authorization"].encode())])
    asyncio.run(app(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


@pytest.mark.parametrize("template", ["/runs/{x}", "/runs/{x}/events", "/runs/{x}/files/report.md", "/runs/demo/files/{x}",
                                      "/traces/{x}", "/runs/{x}/files/{x}", "/view/runs/{x}", "/view/runs/{x}/traces/{x}",
                                      "/view/traces/{x}", "/view/runs/{x}/question?qid=x"])  # fmt: skip
def test_raw_dot_segments_in_path_parameters_are_refused(world, template):
    for x in ("..", ".", "...", "../..", "..%2F..", "demo/../..", "demo%2F..%2F..%2Fsecret.md"):
        path, _, query = template.replace("{x}", x).partition("?")
        status, body = _raw_get(world.app, path, query)
        assert status in (400, 404), (template, x, status, body[:200])
        assert SECRET not in body
