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
    from fp8rl.run_files import RunDir

    monkeypatch.delenv("FP8RL_BFCL_MODEL", raising=False)
    paper = load_config(Path(__file__).resolve().parents[3] / "config" / "paper.yaml")
    run = tmp_path / "run"
    run.mkdir()
    RunDir(run).summary.write_text('{"run_id": "dapo/qwen2.5-32b/bf16/none/seed0"}')
    assert bfcl_model_name(paper, run / "checkpoint") == "Qwen/Qwen3-32B"  # bfcl-eval has no Qwen2.5
    monkeypatch.setenv("FP8RL_BFCL_MODEL", "other")
    assert bfcl_model_name(paper, run / "checkpoint") == "other"


def test_a_task_name_is_never_a_path_and_must_exist(data_dir, tmp_path, capsys, monkeypatch):
    """A task name that walks out of evals/ (whose YAML's `!function` would import and run Python next
    to it) or names no task is refused by the schema, the config checks, `plan_tasks` and `fp8rl eval`
    before any work, naming the key and the allowed names."""

    from fp8rl.cli import main
    from fp8rl.config_loader import ConfigError, load_config
    from fp8rl.validation import CONFIG_CHECKS

    evil = tmp_path / "elsewhere"
    evil.mkdir()
    (evil / "ran.py").write_text("open(__file__ + '.ran', 'w').close()\ndef f(x):\n    return x\n")
    (evil / "evil.yaml").write_text("task: evil\ndoc_to_text: !function ran.f\n")
    shutil.copytree(EVALS_DIR, tmp_path / "repo" / "evals")
    monkeypatch.setenv("FP8RL_EVALS_DIR", str(tmp_path / "repo" / "evals"))
    smoke = Path(__file__).resolve().parents[3] / "config" / "smoke.yaml"
    rel = "../../../elsewhere/evil"  # from evals/lm_eval/ to tmp_path/elsewhere/evil.yaml
    for setting, key, shown in (
        (f"eval.lm_eval_tasks=[{rel}]", "eval.lm_eval_tasks.0", "should match pattern"),
        ("eval.lm_eval_tasks=[arith_gen, hellaswag_typo]", "eval.lm_eval_tasks.1", "unknown task 'hellaswag_typo'"),
        ("eval.agent=[bfcl_nope]", "eval.agent.0", "unknown task 'bfcl_nope'"),
        ("eval.agent=[tool_call, tool_call]", "eval", "'tool_call' named more than once"),
    ):  # fmt: skip
        with pytest.raises(ConfigError) as err:
            load_config(smoke, [setting], checks=CONFIG_CHECKS)
        assert f"{key}: " in str(err.value) and shown in str(err.value), str(err.value)
        if "unknown" in shown:
            assert "allowed: arith_gen, arith_mc" in str(err.value) or "allowed: tool_call" in str(err.value)
    with pytest.raises(EvalInputError, match=r"eval\.lm_eval_tasks: unknown task .*allowed: arith_gen"):
        plan_tasks("lm_eval", [rel], data_dir)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(smoke.read_text())
    args = ["eval", "lm-eval", "--config", str(cfg), "--checkpoint", str(tmp_path / "none"),
            "--data", str(data_dir), "--out", str(tmp_path / "o.json"), "--set"]  # fmt: skip
    assert main([*args, f"eval.lm_eval_tasks=[{rel}]"]) == 2
    assert main([*args, "eval.lm_eval_tasks=[nope]"]) == 2
    assert "eval.lm_eval_tasks.0: unknown task 'nope'" in capsys.readouterr().err
    assert not (evil / "ran.py.ran").exists() and not (tmp_path / "o.json").exists()
