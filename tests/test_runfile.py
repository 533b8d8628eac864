"""Run files: an evaluation written as TOML (or a run's own config.json) is replayed
exactly; unknown keys are named; `marag ask --config` reads strategy, index and
settings from a file."""

from __future__ import annotations

import json

import pytest

from marag.errors import MaragError
from marag.eval.runfile import ask_config, eval_config



def test_toml_run_file_and_unknown_keys(tmp_path, marag):
    f = tmp_path / "run.toml"
    f.write_text(
        'dataset = "hotpotqa_train100"\nstrategies = ["vanilla_rag", "mrag"]\nlimit = 5\n'
        '[llm]\nbackend = "scripted"\n[index]\nretrievers = ["bm25"]\n'
        '[strategy_configs.mrag]\nmax_agent_calls = 12\n[strategy_configs.mrag.role_llms.answerer]\nbackend = "scripted"\n'
    )
    cfg = eval_config(f)
    assert cfg.strategies == ["vanilla_rag", "mrag"] and cfg.limit == 5 and cfg.llm.backend == "scripted"
    assert cfg.strategy_configs["mrag"]["role_llms"]["answerer"] == {"backend": "scripted"}
    f.write_text('dataset = "x"\nstrategies = ["vanilla_rag"]\nlimt = 5\n')
    with pytest.raises(MaragError, match="unknown key 'limt'") as info:
        eval_config(f)
    assert "limit" in info.value.hint
    f.write_text('dataset = "x"\nstrategies = ["vanilla_rag"]\n[llm]\nbakend = "scripted"\n')
    with pytest.raises(MaragError, match="llm.bakend"):
        eval_config(f)
    f.write_text("dataset = \n")
    with pytest.raises(MaragError, match="not valid TOML"):
        eval_config(f)


def test_a_runs_config_json_replays_the_run(data_dir, tmp_path, marag):
    runs = tmp_path / "runs"
    base = ["--runs", str(runs), "--data-dir", str(data_dir), "-q"]
    code, _, err = marag("eval", "hotpotqa_train100", "--strategies", "vanilla_rag", "--llm", "scripted",
                       "--retrievers", "bm25", "--limit", "3", "--run-id", "first", *base)  # fmt: skip
    assert code == 0, err
    code, _, err = marag("eval", "--config", str(runs / "first" / "config.json"), "--run-id", "again", *base)
    assert code == 0, err
    first, again = (json.loads((runs / r / "config.json").read_text()) for r in ("first", "again"))
    assert first["fingerprint"] == again["fingerprint"] and first["config"] == again["config"]
    preds = [sorted((json.loads(line)["qid"], json.loads(line)["prediction"]) for line in (runs / r / "results.jsonl").open()) for r in ("first", "again")]
    assert preds[0] == preds[1] and len(preds[0]) == 3


def test_ask_run_file(tmp_path, repo, marag):
    idx = tmp_path / "idx"
    marag("index", str(repo / "samples/corpus"), "--out", str(idx), "--retrievers", "bm25", "-q")
    f = tmp_path / "ask.toml"
    f.write_text(f'strategy = "vanilla_rag"\nindex = "{idx}"\n[settings]\nk = 3\n[llm]\nbackend = "scripted"\n')
    assert ask_config(f).settings == {"k": 3}
    code, out, err = marag("ask", "Who created Python?", "--config", str(f), "--json")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["config"]["k"] == 3 and len(answer["sources"]) == 3


def test_a_run_file_holds_where_it_runs(tmp_path, repo, marag):
    """The index (a directory or an index URI), the model endpoint and the Ray address in
    one file; an index named without an [index] table brings its own settings."""
    idx = tmp_path / "idx"
    marag("index", str(repo / "samples/corpus"), "--out", str(idx), "--retrievers", "bm25", "--chunk-size", "300", "-q")
    f = tmp_path / "cluster.toml"
    f.write_text(
        f'dataset = "hotpotqa_train100"\nstrategies = ["vanilla_rag"]\nindex_path = "{idx}"\nexecutor = "ray"\n'
        'ray_address = "ray://ray-head:10001"\n[llm]\nbackend = "openai"\nmodel = "m"\nbase_url = "http://vllm:8000/v1"\n'
    )
    cfg = eval_config(f)
    assert (cfg.executor, cfg.ray_address, cfg.index_path) == ("ray", "ray://ray-head:10001", str(idx))
    assert cfg.llm.base_url == "http://vllm:8000/v1" and cfg.index.chunk_size == 300 and cfg.index.retrievers == ["bm25"]
    f.write_text(f.read_text().replace('executor = "ray"', 'executor = "spark"'))
    with pytest.raises(MaragError, match="executor"):
        eval_config(f)
