"""`marag train run PLAN.toml`: the whole loop (sample, reward, select, export per source,
fine-tune, evaluate teacher / base student / tuned student, report) over the bundled
sample corpus with scripted models and a stand-in trainer; resumption after a kill, a
stage refused when its settings changed, a plan that would evaluate on its training
questions refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_train import unirag_script

from marag.errors import MaragError
from marag.llm import ScriptedLLM
from marag.train.plan import Plan, PlanRun, load_plan

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = str(REPO / "samples" / "questions.jsonl")


@pytest.fixture(scope="module")
def sample_index(tmp_path_factory) -> str:
    from marag.index.pipeline import index_corpus
    from marag.index.store import IndexConfig

    out = tmp_path_factory.mktemp("idx") / "sample"
    index_corpus(REPO / "samples" / "corpus", out, IndexConfig(retrievers=["bm25"]), progress=False)
    return str(out)


def plan_of(index: str, **changes) -> Plan:
    # min_reward None: the scripted teacher answers none of the sample questions right
    raw = {"strategy": "unirag", "teacher": "llamacpp:/models/teacher.gguf", "student": "llamacpp:/models/student.gguf", "trajectories": 2, "reward": "reference",
           "settings": {"max_searches": 2}, "concurrency": 2, "min_reward": None,
           "questions": [{"dataset": QUESTIONS, "index": index, "limit": 3}],
           "finetune": {"steps": 5},
           "evaluate": {"dataset": QUESTIONS, "index": index, "skip": 3, "limit": 2, "retriever": "bm25"}}  # fmt: skip
    return Plan.model_validate({**raw, **changes})


class Models:
    """Scripted models by configuration, counting the calls each made."""

    def __init__(self):
        self.made: list[str] = []
        self.llms: list[ScriptedLLM] = []

    def __call__(self, cfg):
        name = Path(cfg.model_path).stem
        self.made.append(name + ("+lora" if cfg.lora else ""))
        llm = ScriptedLLM(fn=unirag_script, model=name)
        self.llms.append(llm)
        return llm

    def calls(self) -> int:
        return sum(len(llm.calls) for llm in self.llms)


class Trainer:
    """Stands in for the LoRA run: records what it was given, writes an adapter folder."""

    def __init__(self, fail_first: bool = False):
        self.given: list[dict] = []
        self.fail_first = fail_first

    def __call__(self, sft, out, model, **kw):
        self.given.append({"sft": Path(sft), "out": Path(out), "model": model, **kw})
        if self.fail_first and len(self.given) == 1:
            raise KeyboardInterrupt  # killed mid-training
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "adapter.gguf").write_bytes(b"GGUF")
        (Path(out) / "adapter.json").write_text(json.dumps({"roles": kw["roles"], **kw["provenance"]}))
        return {"examples": sum(1 for _ in open(sft)), "first_loss": 2.0, "last_loss": 1.0, "adapter": str(Path(out) / "adapter.gguf")}


def test_the_whole_loop_resumes_after_a_kill(sample_index, tmp_path):
    models, trainer, said = Models(), Trainer(fail_first=True), []
    plan = plan_of(sample_index)
    with pytest.raises(KeyboardInterrupt):
        PlanRun(plan, tmp_path / "loop", make_llm=models, finetune=trainer, echo=said.append, progress=False).run()
    stages = json.loads((tmp_path / "loop" / "plan.json").read_text())["stages"]
    source = next(iter(plan.questions)).name
    assert [stages[f"{s} {source}"]["state"] for s in ("sample", "reward", "select", "export")] == ["done"] * 4
    assert stages[f"sample {source}"]["trajectories"] == 6 and stages["finetune"]["state"] == "interrupted"
    # the scripted teacher does the same thing every time, at the same cost: nothing to choose between
    assert {k: stages[f"reward {source}"][k] for k in ("rewards", "questions", "unique_best")} == {"rewards": 6, "questions": 3, "unique_best": 0}
    sampled = models.calls()
    assert sampled > 0

    report = PlanRun(plan, tmp_path / "loop", make_llm=models, finetune=trainer, echo=said.append, progress=False).run()
    assert f"[sample {source}] done earlier" in "\n".join(said)
    stages = json.loads((tmp_path / "loop" / "plan.json").read_text())["stages"]
    assert all(rec["state"] == "done" for rec in stages.values()) and set(stages) >= {
        "finetune", "evaluate teacher", "evaluate student-base", "evaluate student-tuned"}  # fmt: skip
    # the student was trained on the teacher's examples of its trainable roles, and knows its teacher
    given = trainer.given[-1]
    assert given["model"] == "/models/student.gguf" and given["out"].name == "student"
    assert given["roles"] == ["unirag.planner", "unirag.reflector"] and given["provenance"]["teacher"] == "/models/teacher.gguf"
    assert {json.loads(x)["role"] for x in given["sft"].read_text().splitlines()} == {"unirag.planner", "unirag.reflector"}
    # the three contenders answered the two held-back questions; the tuned one carried the adapter
    assert {"teacher", "student", "student+lora"} <= set(models.made)
    text = report.read_text()
    for label in ("teacher:unirag", "student-base:unirag", "student-tuned:unirag"):
        assert label in text
    for label in ("teacher", "student-base", "student-tuned"):
        assert len((tmp_path / "loop" / "eval" / label / "results.jsonl").read_text().splitlines()) == 2

    # a third start has nothing left to do: no model call at all
    before = models.calls()
    PlanRun(plan, tmp_path / "loop", make_llm=models, finetune=trainer, echo=said.append, progress=False).run()
    assert models.calls() == before


def test_a_stage_done_with_other_settings_is_refused(sample_index, tmp_path):
    models, trainer = Models(), Trainer()
    PlanRun(plan_of(sample_index, evaluate=None), tmp_path / "loop", make_llm=models, finetune=trainer, echo=lambda _: None,
            progress=False).run()  # fmt: skip
    with pytest.raises(MaragError, match="finished earlier with other settings"):
        PlanRun(plan_of(sample_index, trajectories=3, evaluate=None), tmp_path / "loop", make_llm=models, finetune=trainer,
                echo=lambda _: None, progress=False).run()  # fmt: skip


def test_another_selection_reuses_the_sampled_trajectories(sample_index, tmp_path):
    models, trainer = Models(), Trainer()
    run = lambda plan: PlanRun(plan, tmp_path / "loop", make_llm=models, finetune=trainer, echo=lambda _: None, progress=False).run()  # noqa: E731
    run(plan_of(sample_index, evaluate=None))
    sampled = models.calls()
    with pytest.raises(MaragError, match="nothing the teacher did is worth imitating") as err:  # every answer wrong
        run(plan_of(sample_index, evaluate=None, min_reward=0.5))
    assert "rewards.md" in err.value.hint and "min_reward" in err.value.hint
    assert models.calls() == sampled  # the trajectories were kept: only the selection ran again
    stages = json.loads((tmp_path / "loop" / "plan.json").read_text())["stages"]
    source = "questions-1-3"
    assert stages[f"sample {source}"]["state"] == "done" and stages[f"select {source}"]["state"] == "interrupted"


def test_plans_that_would_leak_or_do_not_parse_are_refused(tmp_path):
    overlap = tmp_path / "overlap.toml"
    overlap.write_text('[[questions]]\ndataset = "hotpotqa_train100"\nlimit = 40\n\n'
                       '[evaluate]\ndataset = "hotpotqa_train100"\nskip = 30\nlimit = 20\n')  # fmt: skip
    with pytest.raises(MaragError, match="overlap the training ones") as info:
        load_plan(overlap)
    assert "\n" not in info.value.message
    # a source without a limit runs to the end of its set: it overlaps any later slice
    (tmp_path / "open.toml").write_text('[[questions]]\ndataset = "hotpotqa_train100"\nskip = 10\n\n'
                                        '[evaluate]\ndataset = "hotpotqa_train100"\nskip = 80\nlimit = 20\n')  # fmt: skip
    with pytest.raises(MaragError, match=r"overlap the training ones \(11\.\.end\)"):
        load_plan(tmp_path / "open.toml")
    (tmp_path / "apart.toml").write_text('[[questions]]\ndataset = "hotpotqa_train100"\nlimit = 80\n\n'
                                         '[evaluate]\ndataset = "hotpotqa_train100"\nskip = 80\n')  # fmt: skip
    assert load_plan(tmp_path / "apart.toml").evaluate.skip == 80
    (tmp_path / "bad.toml").write_text("strategy = \n")
    with pytest.raises(MaragError, match="not valid TOML"):
        load_plan(tmp_path / "bad.toml")
    (tmp_path / "typo.toml").write_text('[[questions]]\ndataset = "x"\ntrajectory = 3\n')
    with pytest.raises(MaragError, match="questions.0.trajectory"):
        load_plan(tmp_path / "typo.toml")
    with pytest.raises(MaragError, match="no plan at"):
        load_plan(tmp_path / "missing.toml")


def test_the_shipped_plan_parses_and_holds_its_questions_back(tmp_path):
    plan = load_plan(REPO / "plans" / "unirag-student.toml")
    assert plan.teacher == "qwen2.5-1.5b" and plan.student == "qwen2.5-0.5b" and plan.reward == "reference"
    assert plan.evaluate is not None and not any(s.overlaps(plan.evaluate) for s in plan.questions)
    assert PlanRun(plan, tmp_path / "d", echo=lambda _: None).adapter_dir() == tmp_path / "d" / "adapters" / "qwen2.5-0.5b"
