"""The evaluation-suite registry (fp8rl.evaluate.suites): every suite of the vocabulary is registered
with its own subcommand and result file; the DAG's evaluation jobs are one per run on the host and one
per image with containers; `fp8rl eval run` of several suites in one process writes what each suite's
own command writes, score for score and sample for sample."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fp8rl.cli import build_parser, main
from fp8rl.config_loader import validate_config
from fp8rl.evaluate.suites import REGISTRY, EvalSuite, eval_jobs, get_suite, register_suite
from fp8rl.run_files import EVAL_FILES
from fp8rl.vocabulary import EVAL_SUITES

CFG = validate_config(
    {
        "tier": "smoke",
        "models": [{"name": "tiny", "source": "scratch", "arch": {"hidden_size": 32, "num_layers": 1}}],
        "matrix": {"algorithms": ["grpo"], "models": ["tiny"], "variants": ["bf16"], "seeds": [0]},
        "eval": {"lm_eval_tasks": ["arith_gen", "arith_mc"], "agent": ["tool_call"], "limit": 6},
        "resources": {"default": {"threads": 1, "mem_mb": 2000, "runtime": 10}},
    },
    source="test",
)


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    """A random-init tiny Llama with the trainer's char tokenizer, saved the trainer's way."""
    from fp8rl.config import ArchConfig
    from fp8rl.engine.model import build_model, save_hf
    from fp8rl.engine.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    model = build_model(
        ArchConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64), tok, seed=0
    )
    return save_hf(model, tok, tmp_path_factory.mktemp("run") / "checkpoint")


def _subcommands(parser, *path):
    for action in parser._actions:
        if hasattr(action, "choices") and isinstance(action.choices, dict):
            if not path:
                return set(action.choices)
            return _subcommands(action.choices[path[0]], *path[1:])
    return set()


def test_every_suite_of_the_vocabulary_is_registered_with_its_command_and_result_file():
    assert list(EVAL_SUITES[:3]) == ["lm_eval", "agent", "heldout"]
    assert list(REGISTRY) == list(EVAL_SUITES)
    commands = _subcommands(build_parser(), "eval")
    assert commands == {s.command for s in REGISTRY.values()} | {"run"}
    assert {name: f"eval/{name}.json" for name in EVAL_SUITES} == EVAL_FILES
    assert [get_suite(n).rule for n in ("lm_eval", "agent", "heldout")] == [
        "eval_lm",
        "eval_agent",
        "eval_heldout",
    ]
    with pytest.raises(ValueError, match="unknown eval suite 'nope'; allowed: "):
        get_suite("nope")


def test_a_suite_is_registered_once_under_a_vocabulary_name_with_a_command_of_its_own():
    lm = get_suite("lm_eval")
    with pytest.raises(ValueError, match="'lm_eval' is registered twice"):
        register_suite(lm)
    fields = {k: getattr(lm, k) for k in EvalSuite.__dataclass_fields__}
    with pytest.raises(ValueError, match="'echo' is not in fp8rl.vocabulary.EVAL_SUITES"):
        register_suite(EvalSuite(**fields | {"name": "echo"}))
    REGISTRY.pop("lm_eval")
    try:
        with pytest.raises(ValueError, match="command 'agent' is taken by agent"):
            register_suite(EvalSuite(**fields | {"command": "agent"}))
        with pytest.raises(ValueError, match="command 'run' is taken"):
            register_suite(EvalSuite(**fields | {"command": "run"}))
        with pytest.raises(ValueError, match="data 'eval'; allowed: train, test, tool"):
            register_suite(EvalSuite(**fields | {"data": "eval"}))
    finally:
        REGISTRY["lm_eval"] = lm


def test_the_dag_runs_a_runs_suites_in_one_job_on_the_host_and_one_job_per_image_with_containers():
    data = CFG.model_dump(mode="json")
    heldout = validate_config(data | {"eval": data["eval"] | {"heldout": {"prompts": 8}}}, source="test")
    host = eval_jobs(heldout, lambda role: "")
    assert [(j.rule, [s.name for s in j.suites]) for j in host] == [("eval", ["lm_eval", "agent", "heldout"])]
    assert host[0].sections == ("numerics", "eval", "backend", "task", "schedule")
    images = {"eval": "apptainer exec eval.sif ", "agent": "apptainer exec bfcl.sif ", "train": "x "}
    cluster = eval_jobs(heldout, images.__getitem__)
    assert [(j.rule, [s.name for s in j.suites]) for j in cluster] == [
        ("eval_lm", ["lm_eval"]), ("eval_agent", ["agent"]), ("eval_heldout", ["heldout"])
    ]  # fmt: skip
    shared = eval_jobs(heldout, lambda role: "" if role == "train" else "apptainer exec one.sif ")
    assert [(j.rule, [s.name for s in j.suites]) for j in shared] == [
        ("eval_lm_eval_agent", ["lm_eval", "agent"]), ("eval", ["heldout"])
    ]  # fmt: skip
    no_agent = validate_config(
        CFG.model_dump(mode="json") | {"eval": {"lm_eval_tasks": ["arith_gen"]}}, source="t"
    )
    assert [[s.name for s in j.suites] for j in eval_jobs(no_agent, lambda role: "")] == [["lm_eval"]]


@pytest.mark.slow
def test_one_process_writes_what_each_suites_own_command_writes(tiny_checkpoint, data_dir, tmp_path, capsys):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(json.dumps(CFG.model_dump(mode="json")))
    common = ["--config", str(cfg), "--checkpoint", str(tiny_checkpoint), "--data", str(data_dir)]
    for command, suite in (("lm-eval", "lm_eval"), ("agent", "agent")):
        assert main(["eval", command, *common, "--out", str(tmp_path / "apart" / f"{suite}.json")]) == 0
    assert main(["eval", "run", "lm_eval", "agent", *common, "--out-dir", str(tmp_path / "one")]) == 0
    err = capsys.readouterr().err
    assert (
        f"wrote {tmp_path / 'one' / 'lm_eval.json'}" in err
        and f"wrote {tmp_path / 'one' / 'agent.json'}" in err
    )
    apart, one = tmp_path / "apart", tmp_path / "one"
    assert sorted(p.name for p in one.iterdir()) == sorted(p.name for p in apart.iterdir()) == [
        "agent.json", "lm_eval.json", "lm_eval.native.json", "lm_eval.samples.jsonl"
    ]  # fmt: skip
    for suite in ("lm_eval", "agent"):
        a, b = (json.loads((d / f"{suite}.json").read_text()) for d in (apart, one))
        assert a["suite"] == b["suite"] == suite and a["results"] == b["results"]
        assert a["checkpoint_digest"] == b["checkpoint_digest"]
        assert a["provenance"]["eval"] == b["provenance"]["eval"]
    samples = [(d / "lm_eval.samples.jsonl").read_bytes() for d in (apart, one)]
    assert samples[0] == samples[1]


def test_eval_run_refuses_an_unknown_or_repeated_suite_and_an_unwritable_out_before_any_work(
    tmp_path, capsys
):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(json.dumps(CFG.model_dump(mode="json")))
    common = ["--config", str(cfg), "--checkpoint", str(tmp_path / "none"), "--data", str(tmp_path)]
    assert main(["eval", "run", "lm_eval", "bleu", *common, "--out-dir", str(tmp_path / "o")]) == 2
    assert "unknown eval suite 'bleu'; allowed: " in capsys.readouterr().err
    assert main(["eval", "run", "agent", "agent", *common, "--out-dir", str(tmp_path / "o")]) == 2
    assert "a suite is named twice" in capsys.readouterr().err
    (tmp_path / "o2").mkdir()
    (tmp_path / "o2" / "agent.json").mkdir()  # a folder where a result file goes
    assert main(["eval", "run", "lm_eval", "agent", *common, "--out-dir", str(tmp_path / "o2")]) == 2
    assert f"--out {tmp_path / 'o2' / 'agent.json'}: is a directory" in capsys.readouterr().err
    assert not (tmp_path / "o2" / "lm_eval.json").exists()
    # a missing checkpoint is named with its suite, before any model is loaded
    assert main(["eval", "run", "lm_eval", "agent", *common, "--out-dir", str(tmp_path / "o3")]) == 2
    assert "lm_eval: " in capsys.readouterr().err


def test_the_suite_modules_say_what_they_are(tmp_path):
    for suite in REGISTRY.values():
        module = Path(__import__(suite.run.__module__, fromlist=["_"]).__file__)
        assert module.stem == suite.name and module.parent.name == "suites"
        assert suite.usage.strip() and f"fp8rl eval {suite.command}" in suite.usage
