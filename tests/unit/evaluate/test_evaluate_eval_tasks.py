"""Task resolution: the shipped task YAMLs load and bind to the data directory; every kind of bad
input is an EvalInputError that names the file."""

import shutil
from pathlib import Path

import pytest

from fp8rl.evaluate.eval_tasks import EVALS_DIR, EvalInputError, plan_tasks


def test_shipped_smoke_tasks_bind_to_the_data_dir(data_dir, tmp_path):
    plan = plan_tasks("lm_eval", ["arith_gen", "arith_mc"], data_dir, cache_dir=tmp_path / "cache")
    assert [s["task"] for s in plan.lm_eval_specs] == ["arith_gen", "arith_mc"]
    for spec in plan.lm_eval_specs:
        kwargs = spec["dataset_kwargs"]
        assert kwargs["data_files"] == {"test": str((data_dir / "test.jsonl").resolve())}
        assert kwargs["cache_dir"] == str(tmp_path / "cache")
    assert not plan.needs_builtin_tasks and plan.bfcl == []
    agent = plan_tasks("agent", ["tool_call"], data_dir)
    assert agent.lm_eval_specs[0]["dataset_kwargs"]["data_files"]["test"].endswith("tool_test.jsonl")
    assert callable(agent.lm_eval_specs[0]["process_results"])


def test_paper_task_names_map_to_lm_eval_and_bfcl(data_dir):
    plan = plan_tasks("lm_eval", ["gsm8k", "math500", "aime24", "aime25"], data_dir)
    assert plan.lm_eval_specs == ["gsm8k", "minerva_math500", "aime24", "aime25"]
    assert plan.report_names["minerva_math500"] == "math500"
    assert plan.needs_builtin_tasks
    agent = plan_tasks("agent", ["bfcl_simple", "bfcl_multiple", "bfcl_parallel"], data_dir)
    assert agent.bfcl == ["simple", "multiple", "parallel"] and agent.lm_eval_specs == []


@pytest.fixture
def evals_copy(tmp_path):
    root = tmp_path / "evals"
    shutil.copytree(EVALS_DIR, root)
    return root


def _plan(root, data_dir, name="arith_gen"):
    return plan_tasks("lm_eval", [name], data_dir, root=root)


def test_broken_yaml_names_file_and_line(evals_copy, data_dir):
    path = evals_copy / "lm_eval" / "arith_gen.yaml"
    path.write_text(path.read_text().replace("output_type: generate_until", "output_type: [generate_until"))
    with pytest.raises(EvalInputError, match=r"arith_gen\.yaml: line \d+: invalid YAML"):
        _plan(evals_copy, data_dir)


def test_unknown_key_names_file_and_key(evals_copy, data_dir):
    path = evals_copy / "lm_eval" / "arith_gen.yaml"
    path.write_text(path.read_text() + "output_typo: 1\n")
    with pytest.raises(EvalInputError, match=r"arith_gen\.yaml: unknown key output_typo"):
        _plan(evals_copy, data_dir)


def test_missing_function_module_names_file(evals_copy, data_dir):
    (evals_copy / "lm_eval" / "arith_utils.py").unlink()
    with pytest.raises(EvalInputError, match=r"arith_mc\.yaml: .*arith_utils"):
        _plan(evals_copy, data_dir, "arith_mc")


def test_task_name_must_match_file(evals_copy, data_dir):
    path = evals_copy / "lm_eval" / "arith_gen.yaml"
    path.write_text(path.read_text().replace("task: arith_gen", "task: other"))
    with pytest.raises(EvalInputError, match=r"arith_gen\.yaml: `task` is 'other'"):
        _plan(evals_copy, data_dir)


def test_missing_data_file_names_it(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(EvalInputError, match=r"arith_gen\.yaml: data file .*empty/test\.jsonl .* not found"):
        plan_tasks("lm_eval", ["arith_gen"], empty)


def test_unknown_agent_task(data_dir):
    with pytest.raises(EvalInputError, match=r"eval\.agent: unknown task 'nope'"):
        plan_tasks("agent", ["nope"], data_dir)


def test_tasks_dir_override_by_environment(evals_copy, data_dir, monkeypatch):
    (evals_copy / "lm_eval" / "arith_gen.yaml").rename(evals_copy / "lm_eval" / "mine.yaml")
    path = evals_copy / "lm_eval" / "mine.yaml"
    path.write_text(path.read_text().replace("task: arith_gen", "task: mine"))
    monkeypatch.setenv("FP8RL_EVALS_DIR", str(evals_copy))
    assert plan_tasks("lm_eval", ["mine"], data_dir).lm_eval_specs[0]["task"] == "mine"
    assert Path(EVALS_DIR).name == "evals"


def test_bfcl_handler_per_model_from_the_config(tmp_path, monkeypatch):
    """bfcl-eval has no handler under Qwen2.5-32B's hub id: the config names one per model."""
    from fp8rl.config_loader import load_config
    from fp8rl.evaluate.bfcl import bfcl_model_name
    from fp8rl.rundir import RunDir

    monkeypatch.delenv("FP8RL_BFCL_MODEL", raising=False)
    paper = load_config(Path(__file__).resolve().parents[3] / "config" / "paper.yaml")
    run = tmp_path / "run"
    run.mkdir()
    RunDir(run).summary.write_text('{"run_id": "dapo/qwen2.5-32b/bf16/none/seed0"}')
    assert bfcl_model_name(paper, run / "checkpoint") == "Qwen/Qwen3-32B"  # bfcl-eval has no Qwen2.5
    monkeypatch.setenv("FP8RL_BFCL_MODEL", "other")
    assert bfcl_model_name(paper, run / "checkpoint") == "other"
