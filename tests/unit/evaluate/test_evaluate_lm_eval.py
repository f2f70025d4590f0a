"""The shipped task YAMLs through real lm-eval with scripted models: an oracle must score 1, a model
that is always off by one must score 0, and the number-extracting filter must find the answer inside
chatty text. Then the whole `fp8rl eval` command on a tiny random Hugging Face checkpoint."""

import json

import pytest
from lm_eval.api.model import LM

from fp8rl.checkpoint_files import checkpoint_digest
from fp8rl.cli import main
from fp8rl.config_loader import validate_config
from fp8rl.evaluate.eval_tasks import plan_tasks
from fp8rl.evaluate.lm_eval_runner import run_lm_eval
from fp8rl.evaluate.schema import SUITES

CFG = validate_config(
    {
        "tier": "smoke",
        "models": [{"name": "tiny", "source": "scratch"}],
        "matrix": {"algorithms": ["grpo"], "models": ["tiny"], "variants": ["bf16"], "seeds": [0]},
        "eval": {"lm_eval_tasks": ["arith_gen", "arith_mc"], "agent": ["tool_call"], "limit": 12},
    }
)


def solve(prompt: str, offset: int = 0) -> tuple[int, str]:
    """The result and the call of an `a+b=` / `tool:a-b=` prompt, `offset` added to the last number."""
    body = prompt.removeprefix("tool:").removesuffix("=")
    op = "+" if "+" in body else "-"
    a, b = (int(x) for x in body.split(op))
    value = (a + b if op == "+" else a - b) + offset
    return value, f"calc({'add' if op == '+' else 'sub'},{a},{b + offset})"


class ScriptedLM(LM):
    """Answers from the prompt itself: `offset` shifts every answer, `chatty` wraps it in words."""

    def __init__(self, offset: int = 0, chatty: bool = False):
        super().__init__()
        self.offset, self.chatty = offset, chatty

    def generate_until(self, requests, disable_tqdm=False):
        out = []
        for req in requests:
            context = req.args[0]
            value, call = solve(context, self.offset)
            if context.startswith("tool:"):
                out.append(call)
            else:
                out.append(f"I think it is {value}, surely 7" if self.chatty else str(value))
        return out

    def loglikelihood(self, requests, disable_tqdm=False):
        out = []
        for req in requests:
            context, continuation = req.args
            value, _ = solve(context, self.offset)
            out.append((0.0 if continuation == str(value) else -5.0, False))
        return out

    def loglikelihood_rolling(self, requests, disable_tqdm=False):
        raise NotImplementedError


def scores(data_dir, tmp_path, lm, suite="lm_eval"):
    names = CFG.eval.lm_eval_tasks if suite == "lm_eval" else CFG.eval.agent
    plan = plan_tasks(suite, names, data_dir, cache_dir=tmp_path / "cache")
    return {(r.task, r.metric): r for r in run_lm_eval(CFG, tmp_path / "ckpt", plan, lm=lm)}


def test_oracle_scores_one_and_off_by_one_scores_zero(data_dir, tmp_path):
    good = scores(data_dir, tmp_path, ScriptedLM())
    assert set(good) == {("arith_gen", "exact_match"), ("arith_mc", "acc")}
    assert all(r.value == 1.0 and r.n == 12 for r in good.values())
    bad = scores(data_dir, tmp_path, ScriptedLM(offset=1))
    assert bad["arith_gen", "exact_match"].value == 0.0
    # the off-by-one model prefers answer+1, which is one of arith_mc's near misses
    assert bad["arith_mc", "acc"].value == 0.0


def test_number_filter_extracts_the_first_integer(data_dir, tmp_path):
    chatty = scores(data_dir, tmp_path, ScriptedLM(chatty=True))
    assert chatty["arith_gen", "exact_match"].value == 1.0


def test_agent_task_scores_calls_by_ast(data_dir, tmp_path):
    good = scores(data_dir, tmp_path, ScriptedLM(), suite="agent")
    assert {m: r.value for (_, m), r in good.items()} == {
        "ast_accuracy": 1.0,
        "name_accuracy": 1.0,
        "parse_rate": 1.0,
    }
    bad = scores(data_dir, tmp_path, ScriptedLM(offset=1), suite="agent")
    assert bad["tool_call", "ast_accuracy"].value == 0.0
    assert bad["tool_call", "name_accuracy"].value == 1.0
    assert bad["tool_call", "parse_rate"].value == 1.0


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


@pytest.mark.slow
@pytest.mark.parametrize(("command", "suite"), [("lm-eval", "lm_eval"), ("agent", "agent")])
def test_eval_command_on_a_real_checkpoint(command, suite, tiny_checkpoint, data_dir, tmp_path, capsys):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(json.dumps(CFG.model_dump(mode="json")))
    out = tmp_path / "eval" / f"{suite}.json"
    (tmp_path / "eval" / f".{suite}.json.killed.tmp" / "datasets").mkdir(parents=True)  # a killed eval's
    args = ["eval", command, "--config", str(cfg), "--checkpoint", str(tiny_checkpoint)]
    assert main([*args, "--data", str(data_dir), "--out", str(out), "--set", "eval.limit=5"]) == 0
    # stderr is no terminal here, as in a DAG log: progress bars are lines, no carriage returns
    err = capsys.readouterr().err
    assert "\r" not in err and "(5 examples each)" in err
    doc = json.loads(out.read_text())
    assert doc["suite"] == suite in SUITES and doc["checkpoint"] == str(tiny_checkpoint)
    assert doc["checkpoint_digest"] == checkpoint_digest(tiny_checkpoint)  # the checkpoint it scored
    left = {p.name for p in out.parent.iterdir()}
    beside = [f"{suite}.samples.jsonl", f"{suite}.native.json"] if suite == "lm_eval" else []
    assert left == {out.name, *beside}  # no temp, no lock
    assert doc["provenance"]["eval"]["model"] == "hf" and doc["provenance"]["config_digest"]
    tasks = {r["task"] for r in doc["results"]}
    assert tasks == ({"arith_gen", "arith_mc"} if suite == "lm_eval" else {"tool_call"})
    for r in doc["results"]:
        assert set(r) == {"task", "metric", "value", "stderr", "n"}
        assert 0.0 <= r["value"] <= 1.0 and r["n"] == 5
    samples = out.with_name(f"{suite}.samples.jsonl")
    if suite == "lm_eval":  # greedy smoke protocol, one response per sample, kept beside the scores
        rows = [json.loads(line) for line in samples.read_text().splitlines()]
        assert {r["task"] for r in rows} == tasks and len(rows) == 5 * len(tasks)
        assert all(len(r["responses"]) == 1 for r in rows if r["task"] == "arith_gen")
        assert doc["provenance"]["eval"]["temperature"] is None
        # lm-eval's own results JSON, as `lm_eval --output_path` writes it, holds the flat file's values
        native = json.loads(out.with_name(f"{suite}.native.json").read_text())
        assert {"results", "configs", "versions", "n-samples", "config"} <= set(native)
        assert "samples" not in native and set(native["results"]) >= tasks
        for r in doc["results"]:  # a metric of one filter is named without it in the flat file
            (key,) = [k for k in native["results"][r["task"]] if k.split(",")[0] == r["metric"]]
            assert native["results"][r["task"]][key] == pytest.approx(r["value"])
    else:
        assert not samples.exists()


def test_missing_checkpoint_exits_2_naming_it(data_dir, tmp_path, capsys):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(json.dumps(CFG.model_dump(mode="json")))
    missing = tmp_path / "runs" / "x" / "checkpoint"
    rc = main(
        [
            "eval",
            "lm-eval",
            "--config",
            str(cfg),
            "--checkpoint",
            str(missing),
            "--data",
            str(data_dir),
            "--out",
            str(tmp_path / "o.json"),
        ]
    )
    assert rc == 2
    assert f"checkpoint {missing} not found" in capsys.readouterr().err
    assert not (tmp_path / "o.json").exists()


def test_an_unwritable_out_exits_2_before_any_evaluation(
    data_dir, tiny_checkpoint, tmp_path, capsys, monkeypatch
):
    import fp8rl.evaluate.lm_eval_runner as runner

    monkeypatch.setattr(runner, "run_lm_eval", lambda *a, **k: pytest.fail("evaluated before checking --out"))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(json.dumps(CFG.model_dump(mode="json")))
    (tmp_path / "a_file").write_text("")
    args = [
        "eval",
        "lm-eval",
        "--config",
        str(cfg),
        "--checkpoint",
        str(tiny_checkpoint),
        "--data",
        str(data_dir),
    ]
    for out, message in ((tmp_path / "a_file" / "lm_eval.json", "cannot create its folder"),
                         (tmp_path, "is a directory")):  # fmt: skip
        assert main([*args, "--out", str(out)]) == 2
        assert f"--out {out}: {message}" in capsys.readouterr().err


def test_a_bad_test_row_exits_2_naming_file_and_line(
    data_dir, tiny_checkpoint, tmp_path, capsys, monkeypatch
):
    import fp8rl.evaluate.lm_eval_runner as runner

    monkeypatch.setattr(runner, "run_lm_eval", lambda *a, **k: pytest.fail("evaluated a bad data file"))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(json.dumps(CFG.model_dump(mode="json")))
    with open(data_dir / "test.jsonl", "a") as fh:
        fh.write('{"id": "x", "prompt": "1+1="}\n')
    args = [
        "eval",
        "lm-eval",
        "--config",
        str(cfg),
        "--checkpoint",
        str(tiny_checkpoint),
        "--data",
        str(data_dir),
    ]
    assert main([*args, "--out", str(tmp_path / "eval" / "lm_eval.json")]) == 2
    assert f"{data_dir / 'test.jsonl'}:25: no 'answer' field" in capsys.readouterr().err


@pytest.mark.slow
def test_a_crashing_harness_is_recorded_on_the_last_attempt(tiny_checkpoint, data_dir, tmp_path, monkeypatch):
    """bfcl-eval crashes (a fake `bfcl` that exits 1): by default the command fails (Snakemake resubmits);
    with `--on-failure record` the lm-eval task that finished is written, the BFCL one is listed as failed,
    and the report's loader names it."""
    import subprocess

    from fp8rl.report.load import _eval_values

    fake = tmp_path / "bfcl"
    fake.write_text("#!/bin/sh\necho 'no handler for this model' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("FP8RL_BFCL", str(fake))
    monkeypatch.setenv("FP8RL_BFCL_MODEL", "Qwen/Qwen3-8B")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        json.dumps(CFG.model_dump(mode="json") | {"eval": {"agent": ["tool_call", "bfcl_simple"]}})
    )
    out = tmp_path / "eval" / "agent.json"
    args = ["eval", "agent", "--config", str(cfg), "--checkpoint", str(tiny_checkpoint), "--data", str(data_dir),
            "--out", str(out), "--set", "eval.limit=3"]  # fmt: skip
    with pytest.raises(subprocess.CalledProcessError):
        main(args)
    assert not out.exists()  # nothing half-written
    assert main([*args, "--on-failure", "record"]) == 0
    doc = json.loads(out.read_text())
    assert {r["task"] for r in doc["results"]} == {"tool_call"}
    assert doc["failed"] == [{"tasks": ["bfcl_simple"], "reason": doc["failed"][0]["reason"]}]
    assert doc["failed"][0]["reason"].startswith("CalledProcessError")
    problems: list[str] = []
    values = _eval_values(out, "agent", problems, tiny_checkpoint)
    assert {v["metric"].split("/")[0] for v in values} == {"tool_call"}
    assert len(problems) == 1 and "bfcl_simple failed (CalledProcessError" in problems[0]


def test_a_damaged_checkpoint_exits_2_naming_the_file(data_dir, tmp_path, capsys, monkeypatch):
    """One byte flipped in a trainer checkpoint's `model.safetensors`: refused against the sha256 its
    `state.json` records, before any model is loaded or any result written."""
    import fp8rl.evaluate.lm_eval_runner as runner
    from fp8rl.config import ArchConfig
    from fp8rl.engine.checkpoint import save_checkpoint
    from fp8rl.engine.model import build_model
    from fp8rl.engine.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    model = build_model(
        ArchConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64), tok, seed=0
    )
    ckpt = tmp_path / "run" / "checkpoint"
    save_checkpoint(ckpt, model, tok, {}, {"step": 1})
    monkeypatch.setattr(runner, "run_lm_eval", lambda *a, **k: pytest.fail("evaluated a damaged checkpoint"))
    weights = bytearray((ckpt / "model.safetensors").read_bytes())
    weights[len(weights) // 2] ^= 0x01
    (ckpt / "model.safetensors").write_bytes(weights)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(json.dumps(CFG.model_dump(mode="json")))
    out = tmp_path / "eval" / "lm_eval.json"
    args = ["eval", "lm-eval", "--config", str(cfg), "--checkpoint", str(ckpt), "--data", str(data_dir)]
    assert main([*args, "--out", str(out)]) == 2
    assert (
        f"{ckpt / 'model.safetensors'}: corrupt (sha256 differs from state.json)" in capsys.readouterr().err
    )
    assert not out.exists()


def test_a_chat_template_added_to_a_finished_checkpoint_exits_2_naming_it(
    data_dir, tmp_path, capsys, monkeypatch
):
    """`state.json` does not record it, and it would switch lm-eval to chat prompts: refused before any
    model is loaded or any result written."""
    import fp8rl.evaluate.lm_eval_runner as runner
    from fp8rl.config import ArchConfig
    from fp8rl.engine.checkpoint import save_checkpoint
    from fp8rl.engine.model import build_model
    from fp8rl.engine.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    model = build_model(
        ArchConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64), tok, seed=0
    )
    ckpt = tmp_path / "run" / "checkpoint"
    save_checkpoint(ckpt, model, tok, {}, {"step": 1})
    monkeypatch.setattr(runner, "run_lm_eval", lambda *a, **k: pytest.fail("evaluated an altered checkpoint"))
    (ckpt / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(json.dumps(CFG.model_dump(mode="json")))
    out = tmp_path / "eval" / "lm_eval.json"
    args = ["eval", "lm-eval", "--config", str(cfg), "--checkpoint", str(ckpt), "--data", str(data_dir)]
    assert main([*args, "--out", str(out)]) == 2
    assert f"{ckpt / 'chat_template.jinja'}: not a file the checkpoint recorded" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        (lambda c: _replace_with_dir(c / "model.safetensors"), "model.safetensors: not a file"),
        (lambda c: _replace_with_dir(c / "tokenizer_config.json"), "tokenizer_config.json: not a file"),
        (lambda c: (c / "tokenizer_config.json").write_text("{broken"), "tokenizer_config.json: not a readable"),
    ],
)  # fmt: skip
def test_a_damaged_checkpoint_file_is_named(tiny_checkpoint, tmp_path, damage, named):
    """A weights or tokenizer file that is a directory, or a tokenizer config that is not JSON: the
    error names that file (before: a directory passed, or transformers asked for sentencepiece)."""
    import shutil

    from fp8rl.evaluate.eval_tasks import EvalInputError
    from fp8rl.evaluate.lm_eval_runner import check_checkpoint

    ckpt = tmp_path / "checkpoint"
    shutil.copytree(tiny_checkpoint, ckpt)
    check_checkpoint(ckpt)
    damage(ckpt)
    with pytest.raises(EvalInputError, match=named):
        check_checkpoint(ckpt)


def _replace_with_dir(path):
    path.unlink()
    path.mkdir()


def test_a_full_disk_while_building_a_task_is_named_as_such(data_dir, tmp_path, monkeypatch):
    """`datasets` wraps ENOSPC in a dataset error; the message said the dataset was broken."""
    import errno

    from lm_eval.tasks import TaskManager

    from fp8rl.evaluate.eval_tasks import EvalInputError
    from fp8rl.evaluate.lm_eval_runner import build_tasks

    def full(self, specs):
        try:
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "cache" / "x.arrow"))
        except OSError as exc:
            raise RuntimeError("An error occurred while generating the dataset") from exc

    monkeypatch.setattr(TaskManager, "load", full)
    plan = plan_tasks("lm_eval", ["arith_gen"], data_dir, cache_dir=tmp_path / "cache")
    with pytest.raises(EvalInputError, match=r"arith_gen\.yaml: no space left on the device .*x\.arrow"):
        build_tasks(CFG, plan)


def test_a_chat_template_that_loops_for_ever_is_refused_in_bounded_time(tiny_checkpoint, tmp_path):
    """Nested loops of the sandbox's largest ranges hung the eval; rendering is bounded before any work."""
    import shutil
    import time

    from fp8rl.evaluate.eval_tasks import EvalInputError
    from fp8rl.evaluate.lm_eval_runner import check_chat_template

    ckpt = tmp_path / "checkpoint"
    shutil.copytree(tiny_checkpoint, ckpt)
    check_chat_template(ckpt)  # none: nothing to render
    (ckpt / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    check_chat_template(ckpt)
    (ckpt / "chat_template.jinja").write_text(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    )
    start = time.monotonic()
    with pytest.raises(
        EvalInputError, match=r"chat_template\.jinja: the chat template takes more than 0\.5 s"
    ):
        check_chat_template(ckpt, seconds=0.5)
    assert time.monotonic() - start < 5


LOOPS_ON_A_WORD = (
    "{% if 'slow' in messages[-1]['content'] %}{% for i in range(100000) %}{% for j in range(100000) %}"
    "{% endfor %}{% endfor %}{% endif %}{{ messages[-1]['content'] }}"
)


def test_every_eval_render_is_bounded_not_only_the_probe(tiny_checkpoint, data_dir, tmp_path, monkeypatch):
    """A template that loops only on some content passes the one-prompt check; the eval's own renders
    (lm-eval's model calls the tokenizer's apply_chat_template per prompt) are bounded too."""
    import shutil
    import time

    import lm_eval
    from transformers import AutoTokenizer

    import fp8rl.evaluate.lm_eval_runner as runner
    from fp8rl.evaluate.eval_tasks import EvalInputError

    ckpt = tmp_path / "checkpoint"
    shutil.copytree(tiny_checkpoint, ckpt)
    (ckpt / "chat_template.jinja").write_text(LOOPS_ON_A_WORD)
    runner.check_chat_template(ckpt, seconds=0.5)  # the probe has no 'slow'

    def evaluate(model, model_args, apply_chat_template, **kwargs):
        assert apply_chat_template
        tok = AutoTokenizer.from_pretrained(model_args["pretrained"])
        for prompt in ("1+1=", "a slow one"):  # as lm-eval's HFLM.apply_chat_template renders them
            tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False)
        pytest.fail("the looping render was not bounded")

    monkeypatch.setattr(lm_eval, "simple_evaluate", evaluate)
    monkeypatch.setattr(runner, "CHAT_TEMPLATE_SECONDS", 0.5)
    plan = plan_tasks("lm_eval", ["arith_gen"], data_dir, cache_dir=tmp_path / "cache")
    start = time.monotonic()
    with pytest.raises(EvalInputError, match=r"chat_template\.jinja: .* more than 0\.5 s .*'a slow one'"):
        run_lm_eval(CFG, ckpt, plan)
    assert time.monotonic() - start < 30
    tok = AutoTokenizer.from_pretrained(str(ckpt))  # unwrapped again after the eval
    assert tok.apply_chat_template.__func__.__name__ == "apply_chat_template"
