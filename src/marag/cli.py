"""The `marag` command. Thin: parse options, call the library, print."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from marag.cli_options import (
    HELP_NAMES,
    DataDirOpt,
    DeterministicOpt,
    LlmBaseUrlOpt,
    LlmOpt,
    LlmOptions,
    PromptCacheOpt,
    ThreadsOpt,
    parse_set,
    usable_cores,
    with_llm_options,
)
from marag.errors import MaragError, MaragWarning

if TYPE_CHECKING:
    from marag.eval.answering import EvalConfig
    from marag.index.config import IndexConfig
    from marag.llm import LLMConfig

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    context_settings=HELP_NAMES,
    help="Multi-agent retrieval-augmented generation: index documents, answer questions, trace every step.",
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"marag {version('marag')}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print marag's version and exit.")
    ] = False,
) -> None:
    """Multi-agent retrieval-augmented generation: index documents, answer questions, trace every step."""


def _add_subcommands() -> None:
    from marag.models_cli import models_app
    from marag.train_cli import train_app

    app.add_typer(models_app, name="models")
    app.add_typer(train_app, name="train")


_add_subcommands()


DOCS_HINT = "give a path to a JSONL file, a folder of .txt/.md files, or a dataset folder name inside --data-dir"
QUESTIONS_HINT = ('give a questions JSONL file, one {"question": ..., "answers": [...]} per line '
                  "(e.g. samples/questions.jsonl), or a dataset folder name inside --data-dir (`marag datasets`)")  # fmt: skip


def _resolve_docs(docs: str, data_dir: Path | None, hint: str = DOCS_HINT) -> Path:
    """A path, or the name of a folder inside the data directory (e.g. hotpotqa_train100)."""
    p = Path(docs)
    if p.exists():
        return p
    from marag.config import data_dir as find_data_dir

    root = find_data_dir(data_dir, required=False)
    if root is not None and (root / docs).exists():
        return root / docs
    raise MaragError(f"no such file or folder: {docs}", hint=hint)


# IndexConfig's fields as `marag index` names them (for errors that name the option to fix)
INDEX_OPTIONS = {"chunk_size": "--chunk-size", "chunk_overlap": "--chunk-overlap", "retrievers": "--retrievers",
                 "embedder": "--embedder", "ann": "--ann", "collection_field": "--collection-field", "split": "--split"}  # fmt: skip


@app.command()
def index(
    docs: Annotated[str, typer.Argument(help="JSONL file, folder of .txt/.md files, or a dataset folder/name.")],
    out: Annotated[
        str, typer.Option("--out", "-o", help="Where the index goes: a directory, milvus:PATH.db#NAME or milvus://HOST:PORT/NAME.")
    ],
    format: Annotated[str, typer.Option(help="Input format (auto-detected by default).")] = "auto",
    on_error: Annotated[str, typer.Option("--on-error", help="Malformed input lines: fail or skip.")] = "fail",
    chunk_size: Annotated[int, typer.Option(help="Chunk size in words.")] = 512,
    chunk_overlap: Annotated[int, typer.Option(help="Overlap between chunks in words.")] = 80,
    retrievers: Annotated[str, typer.Option(help="Comma-separated: bm25, dense.")] = "bm25,dense",
    embedder: Annotated[str, typer.Option(help="Embedding model for the dense index.")] = "minilm",
    ann: Annotated[str, typer.Option(help="Dense search: exact or hnsw (needs marag\\[faiss]).")] = "exact",
    collection_field: Annotated[
        Optional[str], typer.Option(help="Metadata field that splits the corpus into named collections.")
    ] = None,
    split: Annotated[
        Optional[str], typer.Option(help="kmeans:N groups the documents into N topical collections by their embeddings.")
    ] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing index.")] = False,
    batch_size: Annotated[
        int, typer.Option(help="Milvus: chunks per insert; a killed build resumes after the last one (rerun the command).")
    ] = 256,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
    data_dir: DataDirOpt = None,
) -> None:
    """Build an index (BM25 + vectors + manifest) from documents, in a directory or in Milvus."""
    from marag.index.pipeline import index_corpus
    from marag.index.store import IndexConfig
    from marag.index.uri import backend, close_index

    from pydantic import ValidationError

    from marag.strategies.base import settings_error

    if on_error not in ("fail", "skip"):
        raise MaragError(f"--on-error must be fail or skip, not {on_error!r}",
                         hint="--on-error skip leaves malformed lines out and lists them; fail stops at the first")  # fmt: skip
    try:
        config = IndexConfig(
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            retrievers=[r.strip() for r in retrievers.split(",") if r.strip()],
            embedder=embedder,
            ann=ann,
            collection_field=collection_field,
            split=split,
        )
    except ValidationError as exc:
        raise settings_error("marag index", exc, None, options=INDEX_OPTIONS) from None
    t0 = time.perf_counter()
    idx = index_corpus(
        _resolve_docs(docs, data_dir), out, config, format=format, on_error=on_error, overwrite=overwrite,
        progress=not quiet, batch_size=batch_size,
    )
    m = idx.manifest
    close_index(idx)  # a Lite file stays locked while it is open
    typer.echo(
        f"indexed {m['counts']['documents']} documents as {m['counts']['chunks']} chunks "
        f"({', '.join(config.retrievers)}) into {out} in {time.perf_counter() - t0:.1f}s"
    )
    skipped = backend(out).skipped_file(out)
    if skipped.exists():
        typer.echo(f"skipped records, each with its line and what was wrong: {skipped}")


def _lora(lora: Path | None, roles: str | None) -> dict:
    """LLM config fields for `--lora` / `--lora-roles`: the adapter and the roles whose
    calls carry it, resolved now (given, else the adapter's adapter.json) so that the
    run's recorded config says which roles ran on it."""
    if lora is None:
        if roles:
            raise MaragError("--lora-roles needs --lora", hint="add --lora PATH/adapter.gguf (from `marag train finetune`)")
        return {}
    from marag.llm.llamacpp import adapter_file, resolve_lora_roles
    from marag.strategies.base import warn_bare_roles

    if roles:  # qualified names (mrag.planner); a bare one still works, kept as written
        warn_bare_roles(_csv(roles), "--lora-roles")
    lora = adapter_file(lora)  # a folder from `marag train finetune` names its adapter.gguf
    return {"lora": str(lora.resolve()), "lora_roles": resolve_lora_roles(lora, _csv(roles) if roles else None)}


def _llm_config(options: LlmOptions, deterministic: bool | None = None) -> LLMConfig:
    """The strategies' `LLMConfig` from the shared LLM options (`deterministic` None: the
    model's own setting)."""
    from marag.llm import LLMConfig

    return LLMConfig.from_spec(
        options.llm, base_url=options.llm_base_url, threads=options.threads, cache_dir=options.cache_dir,
        deterministic=deterministic, n_ctx=options.n_ctx, prompt_cache_mb=options.prompt_cache_mb, **_lora(options.lora, options.lora_roles),
    )  # fmt: skip


@app.command()
@with_llm_options
def ask(
    questions: Annotated[Optional[list[str]], typer.Argument(help="One or more questions.")] = None,
    index: Annotated[
        Optional[str], typer.Option("--index", "-i", help="Index (from `marag index`): a directory or an index URI (milvus:...).")
    ] = None,
    strategy: Annotated[str, typer.Option("--strategy", "-s", help="Strategy name (see `marag strategies`).")] = "vanilla_rag",
    retriever: Annotated[Optional[str], typer.Option(help="bm25, dense or hybrid (default: hybrid when both exist).")] = None,
    set_: Annotated[
        Optional[list[str]], typer.Option("--set", help="Strategy config override KEY=VALUE (JSON value), repeatable.")
    ] = None,
    questions_file: Annotated[
        Optional[str], typer.Option("--questions", help="Read questions from a file or dataset folder.")
    ] = None,
    limit: Annotated[int, typer.Option(help="With --questions: answer only the first N (0: all of them).")] = 0,
    llm_options: LlmOptions = LlmOptions(),
    trace_out: Annotated[Optional[Path], typer.Option(help="Trace JSONL file (default: .marag/traces/ask-TIME.jsonl).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object per answer.")] = False,
    config: Annotated[
        Optional[Path], typer.Option("--config", help="A run file (TOML): strategy, index, retriever, settings, llm.")
    ] = None,
    deterministic: DeterministicOpt = False,
    data_dir: DataDirOpt = None,
) -> None:
    """Answer questions with a strategy; print answers, sources and where the trace went."""
    from marag.index.uri import close_index, open_index
    from marag.llm import LLMConfig, make_llm
    from marag.strategies import STRATEGIES, make_strategy, run_many
    from marag.trace import write_jsonl

    qs = list(questions or [])
    if blank := [i for i, q in enumerate(qs, 1) if not q.strip()]:
        raise MaragError(f"question {blank[0]} is empty", hint='ask something: marag ask "your question" --index IDX')
    if questions_file:
        from marag.corpus import load_questions

        loaded = load_questions(_resolve_docs(questions_file, data_dir, QUESTIONS_HINT))
        qs += [q.question for q in (loaded[:limit] if limit else loaded)]
    if not qs:
        raise MaragError("no questions given", hint='marag ask "your question" --index IDX (or --questions FILE)')

    llm_cfg = _llm_config(llm_options, deterministic=deterministic or None)
    overrides: dict = {}
    if config is not None:  # a run file: strategy, index, retriever, settings and model; options add to it
        from marag.eval.runfile import ask_config

        saved = ask_config(config)
        strategy, retriever = saved.strategy, retriever or saved.retriever
        index = index or saved.index
        overrides = dict(saved.settings)
        llm_cfg = LLMConfig.model_validate({**saved.llm, "threads": llm_options.threads}) if saved.llm else llm_cfg
    cls = STRATEGIES.get(strategy)
    ret = idx = None
    if cls.needs_retriever or index is not None:
        if index is None:
            raise MaragError(f"strategy {strategy!r} needs an index", hint="pass --index IDX (build it with `marag index`)")
        idx = open_index(index)
    try:
        if idx is not None:
            ret = idx.retriever(retriever)
        overrides |= dict(parse_set(s) for s in (set_ or []))
        if deterministic:
            overrides.setdefault("deadline_s", None)
        model = make_llm(llm_cfg)
        strat = make_strategy(strategy, model, ret, overrides)
        # a bar when there is more than a question or two to wait for (stderr: --json stays clean)
        answers = asyncio.run(run_many(strat, qs, concurrency=llm_options.concurrency, progress=len(qs) > 2))
    finally:
        close_index(idx)  # the connection (a Lite file's lock) is not held past the answers

    trace_out = trace_out or Path(".marag/traces") / f"ask-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    write_jsonl([a.trace for a in answers], trace_out)
    for a in answers:
        if json_out:
            typer.echo(json.dumps({**a.summary(), "trace_file": str(trace_out)}, ensure_ascii=False))
        else:
            typer.echo(_format_answer(a))
    if not json_out:
        typer.echo(f"trace: {trace_out}")


def _format_answer(a) -> str:
    u = a.usage
    lines = [f"Q: {a.question}", f"A: {a.answer}"]
    for i, s in enumerate(a.sources, 1):
        label = s.title or s.doc_id
        lines.append(f"   [{i}] {label}  ({s.chunk_id}, score {s.score:.4f})")
    reused = int(u.get("prompt_tokens_reused", 0))
    lines.append(
        f"   {int(u.get('llm_calls', 0))} LLM calls, {int(u.get('prompt_tokens', 0))}"
        + (f" ({reused} reused)" if reused else "")
        + f"+{int(u.get('completion_tokens', 0))} tokens, {int(u.get('searches', 0))} searches, {a.seconds:.1f}s"
        + (f", stopped by its {a.trace.budget.get('stopped_by')} budget" if u.get("stopped_by_budget") else "")
    )
    return "\n".join(lines) + "\n"


@app.command("eval")
@with_llm_options
def eval_(
    dataset: Annotated[
        Optional[str], typer.Argument(help="Dataset name (see `marag datasets`) or a questions JSONL path.")
    ] = None,
    config: Annotated[
        Optional[Path],
        typer.Option("--config", help="A run file (TOML) or a run's config.json: replays that evaluation (see marag.eval.runfile)."),
    ] = None,
    strategies: Annotated[str, typer.Option(help="Comma-separated strategy names.")] = "llm_only,vanilla_rag",
    limit: Annotated[int, typer.Option(help="Only the first N questions (0 = all).")] = 0,
    skip: Annotated[int, typer.Option(help="Leave out the first N questions (tune on one part of a set, report on another).")] = 0,
    metrics: Annotated[Optional[str], typer.Option(help="Comma-separated metrics (default: lexical + retrieval).")] = None,
    judge_metrics: Annotated[str, typer.Option(help="Comma-separated LLM-judged metrics, e.g. judge_correct,mrag_correctness.")] = "",
    judge_repeats: Annotated[
        Optional[int],
        typer.Option(help="Repeat each judged metric N times; report mean and std (default: 5 with --judge, as in mRAG, else 1)."),
    ] = None,
    judge_temperature: Annotated[
        Optional[float], typer.Option(help="Judge sampling temperature (default: 0.5 when repeating, else 0).")
    ] = None,
    judge_batch: Annotated[
        Optional[int], typer.Option(help="Aspects/nuggets per judge call (default: 1 aspect, as in mRAG; 10 nuggets).")
    ] = None,
    judge: Annotated[
        Optional[str], typer.Option(help="Judge LLM spec (default: the strategy LLM, which then grades itself).")
    ] = None,
    judge_base_url: Annotated[Optional[str], typer.Option(help="Base URL for an OpenAI-compatible judge.")] = None,
    set_: Annotated[
        Optional[list[str]], typer.Option("--set", help="STRATEGY.KEY=VALUE config override, repeatable.")
    ] = None,
    retriever: Annotated[Optional[str], typer.Option(help="bm25, dense or hybrid.")] = None,
    retrievers: Annotated[str, typer.Option(help="Indexes to build: bm25,dense.")] = "bm25,dense",
    split: Annotated[
        Optional[str], typer.Option(help="kmeans:N: index the corpus as N topical collections (RopMura's knowledge agents).")
    ] = None,
    index: Annotated[
        Optional[str],
        typer.Option("--index", "-i", help="Use this index of the dataset's corpus (a directory or an index URI) instead of building one."),
    ] = None,
    llm_options: LlmOptions = LlmOptions(),
    run_id: Annotated[Optional[str], typer.Option(help="Run directory name under --runs (default: derived from the config, so reruns resume).")] = None,
    runs: Annotated[Path, typer.Option(help="Where run directories go.")] = Path("runs"),
    seed: Annotated[int, typer.Option(help="Seed for judges and sampling.")] = 0,
    deterministic: DeterministicOpt = False,
    executor: Annotated[
        Optional[str], typer.Option(help="local (asyncio, one process) or ray (a Ray cluster; local when no address). Default: local, or the run file's.")
    ] = None,
    ray_address: Annotated[Optional[str], typer.Option(help="Ray cluster address for --executor ray.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
    data_dir: DataDirOpt = None,
) -> None:
    """Run strategies on a dataset; write runs/<id>/ with results, traces and report.md (resumable)."""
    if executor not in (None, "local", "ray"):
        raise MaragError(f"unknown executor {executor!r}", hint="choose local or ray")
    from marag.eval.answering import DEFAULT_METRICS, EvalConfig

    strategy_configs = _strategy_configs(set_ or [])
    if config is not None:  # the file says what runs; how fast and where stay options
        cfg = _replayed_config(config, dataset, llm_options.concurrency)
    elif not dataset:
        raise MaragError("name a dataset (see `marag datasets`) or give --config RUNFILE")
    else:
        index_config = _index_config(index, retrievers, split)
        cfg = EvalConfig(
            dataset=dataset,
            strategies=_csv(strategies),
            strategy_configs=strategy_configs,
            limit=limit or None,
            skip=skip,
            metrics=_csv(metrics) if metrics else list(DEFAULT_METRICS),
            judge_metrics=_csv(judge_metrics),
            judge_repeats=judge_repeats,
            judge_temperature=judge_temperature,
            judge_batch=judge_batch,
            llm=_llm_config(llm_options),
            judge=_judge_config(judge, judge_base_url, llm_options),
            retriever=retriever,
            index=index_config,
            index_path=index,
            concurrency=llm_options.concurrency,
            seed=seed,
            deterministic=deterministic,
            executor=executor or "local",
            ray_address=ray_address,
        )
    # executor and ray_address None: the run file's (local without one)
    _run_and_report(cfg, runs / (run_id or cfg.default_run_id()), data_dir, quiet, executor=executor, ray_address=ray_address)


def _strategy_configs(items: list[str]) -> dict[str, dict]:
    """`--set STRATEGY.KEY=VALUE` options as {strategy: {key: value}}."""
    configs: dict[str, dict] = {}
    for item in items:
        key, value = parse_set(item)
        sname, dot, field = key.partition(".")
        if not dot:
            raise MaragError(f"bad --set {item!r}", hint="use STRATEGY.KEY=VALUE, e.g. --set vanilla_rag.k=4")
        configs.setdefault(sname, {})[field] = value
    return configs


def _replayed_config(config: Path, dataset: str | None, concurrency: int) -> EvalConfig:
    """The evaluation a run file (or a run's config.json) describes, at this --concurrency."""
    from marag.eval.runfile import eval_config

    cfg = eval_config(config)
    if dataset and dataset != cfg.dataset:
        raise MaragError(f"{config} evaluates {cfg.dataset!r}, not {dataset!r}", hint="leave out the dataset argument with --config")
    cfg.concurrency = concurrency
    return cfg


def _index_config(index: str | None, retrievers: str, split: str | None) -> IndexConfig:
    """The settings of the index the run uses: those of --index when given (the run opens
    it again), else an index of --retrievers (and --split) to build."""
    from marag.index.store import IndexConfig
    from marag.index.uri import opened_index

    if index:
        with opened_index(index) as idx:
            return idx.config
    return IndexConfig(retrievers=_csv(retrievers), split=split)


def _judge_config(judge: str | None, base_url: str | None, options: LlmOptions) -> LLMConfig | None:
    """The judge's `LLMConfig` (None: the strategies' model judges)."""
    from marag.llm import LLMConfig

    if not judge:
        return None
    return LLMConfig.from_spec(judge, base_url=base_url, threads=options.threads, cache_dir=options.cache_dir)


def _run_and_report(cfg, run_dir: Path, data_dir, quiet: bool, executor: str | None = None, ray_address: str | None = None) -> None:
    from marag.eval.report import build_report, summary_rows
    from marag.eval.runner import run_eval

    asyncio.run(run_eval(cfg, run_dir, data_dir=data_dir, progress=not quiet, executor=executor, ray_address=ray_address))
    report = build_report([run_dir])
    _print_summary(summary_rows(run_dir))
    typer.echo(f"run: {run_dir}\nreport: {report}")


@app.command()
def report(
    runs: Annotated[list[Path], typer.Argument(help="One or more run directories to compare.")],
    out: Annotated[
        Optional[Path],
        typer.Option(help="Directory for report.md and plots (default: the run itself; for several runs a new compare-... beside them)."),
    ] = None,
    baseline: Annotated[
        Optional[str], typer.Option(help="Strategy the others are compared with, paired (default: vanilla_rag).")
    ] = None,
) -> None:
    """Write report.md (+ plots) for one run, or compare several runs side by side."""
    from marag.eval.report import Run, build_report, comparison_dir

    for r in runs:
        Run(r)  # each must be a run before anything is written
    if len(runs) > 1:
        out = comparison_dir(runs, out)  # never into one of the runs compared
    if out:
        out.mkdir(parents=True, exist_ok=True)
    typer.echo(f"report: {build_report(runs, out, baseline=baseline)}")


@app.command()
def datasets(data_dir: DataDirOpt = None) -> None:
    """List the registered evaluation datasets and whether their data is present."""
    from marag.config import data_dir as find_data_dir
    from marag.eval.datasets import DATASETS

    root = find_data_dir(data_dir, required=False)
    for name in DATASETS.names():
        spec = DATASETS.get(name)
        paths = [DATASETS.get(p).path for p in spec.parts] if spec.parts else [spec.path]
        present = "ok " if root is not None and all((root / p).exists() for p in paths) else "-- "
        pool = "no corpus" if spec.pool == "none" else f"{spec.pool} pool"
        typer.echo(f"{present}{name:20s} [{pool}, {spec.answer_style} answers] {spec.description}")
    if root is None:
        typer.echo("(data directory not found: pass --data-dir or set MARAG_DATA)")


@app.command()
def metrics() -> None:
    """List the registered metrics."""
    from marag.eval.metrics import METRICS

    for name in METRICS.names():
        m = METRICS.get(name)
        tag = " (LLM judge)" if m.needs_judge else ""
        typer.echo(f"{name:20s} {m.description}{tag}")


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _print_summary(rows: list[dict]) -> None:
    from marag.eval.report import summary_table

    if rows:
        typer.echo(summary_table(rows))


@app.command()
def synth(
    index: Annotated[str, typer.Option("--index", "-i", help="Index to draw documents from (a directory or an index URI).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Questions JSONL to write (rerun to continue it).")],
    n: Annotated[int, typer.Option("--n", help="How many questions.")] = 20,
    style: Annotated[str, typer.Option(help="datamorgana (categories) or synagent (single/multi-hop with solutions).")] = "datamorgana",
    spec: Annotated[Optional[Path], typer.Option(help="Category spec (JSON) for the datamorgana style.")] = None,
    min_score: Annotated[int, typer.Option(help="synagent: keep questions the verifier scores at least this (0-5).")] = 4,
    seed: Annotated[int, typer.Option(help="Seed for categories and documents.")] = 0,
    llm: LlmOpt = "llamacpp",
    llm_base_url: LlmBaseUrlOpt = None,
    threads: ThreadsOpt = usable_cores(),
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Generate evaluation questions from an index; then `marag eval OUT --index INDEX`."""
    from marag.index.uri import opened_index
    from marag.llm import LLMConfig, make_llm
    from marag.synth import generate, load_spec

    model = make_llm(LLMConfig.from_spec(llm, base_url=llm_base_url, threads=threads))
    with opened_index(index) as idx:
        path = asyncio.run(
            generate(model, idx, n, out, style=style, spec=load_spec(spec), seed=seed, min_score=min_score, progress=not quiet)
        )
    typer.echo(f"wrote {n} questions to {path}\nevaluate them: marag eval {path} --index {index} --strategies vanilla_rag,mrag")


@app.command()
def serve(
    runs: Annotated[Path, typer.Option(help="Runs directory the viewer shows and POST /runs writes to.")] = Path("runs"),
    indexes: Annotated[
        Optional[list[str]],
        typer.Option(help="A directory whose subdirectories are indexes (by name), or an index URI (named by its collection); repeatable."),
    ] = None,
    host: Annotated[str, typer.Option(help="Address to bind (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8321,
    token_env: Annotated[
        Optional[str], typer.Option(help="Environment variable holding a bearer token every request must send.")
    ] = None,
    llm: LlmOpt = "llamacpp",
    llm_base_url: LlmBaseUrlOpt = None,
    threads: ThreadsOpt = usable_cores(),
    prompt_cache_mb: PromptCacheOpt = None,
    max_body: Annotated[int, typer.Option(help="Largest request body in bytes.")] = 64_000,
    max_concurrency: Annotated[int, typer.Option(help="Questions answered at once (more wait; past the queue, 429).")] = 4,
    body_timeout: Annotated[
        float, typer.Option(help="Seconds a request body has to arrive whole (then 408 and the connection is closed).")
    ] = 15.0,
    shutdown_grace: Annotated[
        float, typer.Option(min=0, help="Seconds requests in progress get to finish when the server is stopped (SIGTERM, Ctrl-C); then they are cut.")
    ] = 10.0,
    data_dir: DataDirOpt = None,
) -> None:
    """Serve the HTTP API and the trajectory viewer (http://127.0.0.1:8321/; with a token, sign in at /signin)."""
    import os

    import uvicorn

    from marag.config import data_dir as find_data_dir
    from marag.llm import LLMConfig
    from marag.serve.app import ServeSettings, create_app
    from marag.serve.auth import MAKE_TOKEN, MIN_TOKEN_CHARS
    from marag.serve.memory import fix_mmap_threshold

    token = os.environ.get(token_env) if token_env else None
    if token_env and not token:
        raise MaragError(f"${token_env} is empty", hint=f"export {token_env}=... before starting the server")
    if token is not None and len(token) < MIN_TOKEN_CHARS:  # a short token is guessed even at 20 tries a minute
        raise MaragError(f"${token_env} holds a token of {len(token)} characters; it needs at least {MIN_TOKEN_CHARS}",
                         hint=f"make one: export {token_env}=$({MAKE_TOKEN})")  # fmt: skip
    from marag.serve.http import KEEP_ALIVE_S, LOOPBACK_NAMES

    if host not in LOOPBACK_NAMES and not token:
        warnings.warn(f"serving on {host} without a token: anyone who can reach it can use it (pass --token-env)", MaragWarning, stacklevel=1)
    data = find_data_dir(data_dir, required=False)
    indexes_dir, index_uris = _serve_indexes(indexes or [])
    settings = ServeSettings(
        runs_dir=str(runs), indexes_dir=indexes_dir, index_uris=index_uris, data_dir=str(data) if data else None,
        llm=LLMConfig.from_spec(llm, base_url=llm_base_url, threads=threads, prompt_cache_mb=prompt_cache_mb).model_dump(), token=token,
        max_body_bytes=max_body, max_concurrency=max_concurrency, body_timeout_s=body_timeout,
        allowed_hosts=list(LOOPBACK_NAMES) if host in LOOPBACK_NAMES else None,  # a loopback server: no DNS rebinding
    )  # fmt: skip
    fix_mmap_threshold()  # its memory stays level over evaluations (marag.serve.memory)
    warmed_in = _warm_kernels()  # before it listens: the first questions do not wait for numba
    if warmed_in > 5:
        typer.echo(f"retrieval kernels compiled in {warmed_in:.0f} s (once per install)", err=True)
    sock = _listening_socket(host, port)  # before saying it serves: a bad or busy port fails here
    signin = "; sign in there with the token" if token else ""
    typer.echo(f"marag serving on http://{host}:{port}/ (API docs at /docs{signin})")
    # On SIGTERM uvicorn waits for the requests in progress; a client following an
    # evaluation's events (GET /runs/{id}/events) is one until the evaluation ends, which
    # kept a stopped server running for as long (benchmarks/soak.py). Past the grace the
    # requests are cut and the evaluation is cancelled between answers (what it wrote
    # stays; POST /runs with the same request resumes it).
    config = uvicorn.Config(create_app(settings), log_level="warning", timeout_graceful_shutdown=shutdown_grace,
                            timeout_keep_alive=KEEP_ALIVE_S)  # fmt: skip
    uvicorn.Server(config).run(sockets=[sock])


def _warm_kernels() -> float:
    import time

    from marag.index.warm import warm_kernels

    t0 = time.perf_counter()
    warm_kernels()
    return time.perf_counter() - t0


def _listening_socket(host: str, port: int):
    import socket

    if not 1 <= port <= 65535:
        raise MaragError(f"--port {port} is not a port number", hint="give one from 1 to 65535, e.g. --port 8321")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise MaragError(f"cannot listen on {host}: {exc}", hint="give an address of this machine: --host 127.0.0.1") from None
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise MaragError(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                         hint=f"another program may be using the port: try --port {port + 1 if port < 65535 else 8321}")  # fmt: skip
    return sock


def _serve_indexes(values: list[str]) -> tuple[str | None, dict[str, str]]:
    """(the directory of index directories, {name: index URI}) from `--indexes` values;
    each URI is opened now, so a wrong one fails before the server starts."""
    from marag.index.uri import opened_index, scheme_of

    dirs = [v for v in values if scheme_of(v) == "dir"]
    if len(dirs) > 1:
        raise MaragError("--indexes takes one directory of indexes", hint="put the index directories side by side in one directory")
    for d in dirs:
        if not Path(d).is_dir():
            warnings.warn(f"no folder {d}: the server starts with no indexes from it (build one: marag index DOCS --out {d}/NAME)",
                          MaragWarning, stacklevel=1)  # fmt: skip
        elif not any((sub / "manifest.json").is_file() for sub in Path(d).iterdir()):
            warnings.warn(f"{d} holds no index (no subfolder with a manifest.json): build one with marag index DOCS --out {d}/NAME",
                          MaragWarning, stacklevel=1)  # fmt: skip
    uris: dict[str, str] = {}
    for v in values:
        if scheme_of(v) != "dir":
            with opened_index(v) as idx:  # closed again: the server opens it for itself
                name = idx.name
            if name in uris:
                raise MaragError(f"two --indexes URIs are both named {name!r}", hint="give the collections different names")
            uris[name] = v
    return (dirs[0] if dirs else None), uris


@app.command()
def view(
    run: Annotated[Path, typer.Argument(help="A run directory (runs/<id>).")],
    out: Annotated[Optional[Path], typer.Option(help="Where to write the pages (default: RUN/view).")] = None,
) -> None:
    """Write a run's viewer pages (run, trajectories, side-by-side questions) as static HTML."""
    from marag.serve.view import write_static

    if not (run / "config.json").is_file():
        raise MaragError(f"no run at {run}", hint="give a directory written by `marag eval` (runs/<id>; `ls runs` lists them)")
    typer.echo(f"open {write_static(run, out or run / 'view')}")


@app.command("strategies")
def list_strategies(
    all_: Annotated[bool, typer.Option("--all", help="Also list the variants (paper modes, ablations, other k).")] = False,
) -> None:
    """The strategies: what each does, its paper, and the LLM calls a question typically takes."""
    from marag.strategies import STRATEGIES

    names = [n for n in STRATEGIES.names() if all_ or STRATEGIES.get(n).variant_of is None]
    width = max(map(len, names), default=0)
    for name in names:
        cls = STRATEGIES.get(name)
        low, high = cls.calls
        calls = f"{low} call" if low == high == 1 else f"{low}-{high} calls" if low != high else f"{low} calls"
        # the paper, unless the description already names it
        source = f"  [{cls.paper}]" if cls.paper and cls.variant_of is None and cls.paper.split()[0] not in cls.description else ""
        retrieval = "" if cls.needs_retriever else ", no retrieval"
        typer.echo(f"{name:{width}s}  {calls:>11s}{retrieval}  {cls.description}{source}")
    if not all_:
        variants = sum(1 for n in STRATEGIES.names() if STRATEGIES.get(n).variant_of is not None)
        typer.echo(f"({variants} variants: paper modes and ablations, `marag strategies --all`)")


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """marag's own warnings as one `warning:` line (no source file and line of marag's
    code); other libraries' warnings as Python prints them."""
    if issubclass(category, MaragWarning):
        typer.secho(f"warning: {message}", fg="yellow", err=True)
    else:
        _python_showwarning(message, category, filename, lineno, file, line)


_python_showwarning = warnings.showwarning


def main() -> None:
    from pydantic import ValidationError

    warnings.showwarning = _show_warning
    try:
        app()
    except ValidationError as exc:  # any settings object the CLI built: one line, not a traceback
        from marag.strategies.base import settings_error

        _fail(settings_error(exc.title, exc, None))
    except MaragError as exc:
        _fail(exc)


def _fail(exc: MaragError) -> None:
    typer.secho(f"error: {exc.message}", fg="red", err=True)
    if exc.hint:
        typer.echo(f"  hint: {exc.hint}", err=True)
    sys.exit(2)



if __name__ == "__main__":
    main()
