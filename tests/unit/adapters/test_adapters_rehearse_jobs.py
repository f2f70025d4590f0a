"""`fp8rl verl rehearse` runs every job type of the config (fp8rl.adapters.rehearse_jobs): each one's
runner is called once and reported ok, skipped or failed, a failure exits 1, `--jobs` selects, an
unknown job type is refused by name; a missing image venv or verl is a skip that names what builds it;
the fetch job type runs `fp8rl fetch` and `fp8rl data` to their end against the stand-in hub."""

from __future__ import annotations

import dataclasses

import pytest

from fp8rl.adapters import rehearse_jobs
from fp8rl.adapters.image_venv import ROOT
from fp8rl.adapters.rehearse_jobs import JOB_TYPES, Context, Outcome, planned
from fp8rl.adapters.verl_rehearse import job_types
from fp8rl.cli import main
from fp8rl.config_loader import load_config

PAPER = str(ROOT / "config" / "paper.yaml")


@pytest.fixture
def fake_runs(monkeypatch):
    """Every job type's runner replaced by one that records its call and returns `status[name]`."""
    calls: list[str] = []
    status: dict[str, str] = {}

    def runner(name):
        def run(ctx: Context) -> Outcome:
            calls.append(name)
            return Outcome(name, status.get(name, "ok"), f"{name} stand-in")

        return run

    fakes = {name: dataclasses.replace(job, run=runner(name)) for name, job in JOB_TYPES.items()}
    monkeypatch.setattr(rehearse_jobs, "JOB_TYPES", fakes)
    return calls, status


def test_the_command_rehearses_every_job_type_of_the_paper_tier(fake_runs, tmp_path, capsys):
    calls, _ = fake_runs
    assert main(["verl", "rehearse", "--config", PAPER, "--out", str(tmp_path)]) == 0
    want = ["fetch", "train", "data", "export", "eval-lm", "eval-agent", "report", "containers"]
    assert calls == want == [j.name for j in planned(load_config(PAPER))]
    out = capsys.readouterr().out
    for name in want:
        assert f"{name}: ok ({name} stand-in)" in out
    assert f"ok {len(want)}" in out and "failed 0" in out


def test_a_failed_job_type_exits_1_and_a_skipped_one_does_not(fake_runs, tmp_path, capsys):
    calls, status = fake_runs
    status["eval-agent"] = "skipped"
    assert main(["verl", "rehearse", "--config", PAPER, "--out", str(tmp_path)]) == 0
    status["data"] = "failed"
    capsys.readouterr()
    assert main(["verl", "rehearse", "--config", PAPER, "--out", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "failed 1 (data)" in out and "skipped 1 (eval-agent)" in out
    assert calls.count("report") == 2  # the job types after a failure still run


def test_jobs_selects_job_types_and_an_unknown_one_is_refused(fake_runs, tmp_path, capsys):
    calls, _ = fake_runs
    assert (
        main(["verl", "rehearse", "--config", PAPER, "--out", str(tmp_path), "--jobs", "eval-lm,data"]) == 0
    )
    assert calls == ["data", "eval-lm"]  # in the DAG's order
    assert main(["verl", "rehearse", "--config", PAPER, "--out", str(tmp_path), "--jobs", "eval,data"]) == 2
    err = capsys.readouterr().err
    assert "--jobs: eval is not a job type" in err and "eval-lm" in err


def test_run_alone_rehearses_those_training_jobs(fake_runs, tmp_path):
    calls, _ = fake_runs
    run = "grpo/qwen3-8b/fp8/blockwise/seed0"
    assert main(["verl", "rehearse", "--config", PAPER, "--out", str(tmp_path), "--run", run]) == 0
    assert calls == ["train"]
    args = [
        "verl",
        "rehearse",
        "--config",
        PAPER,
        "--out",
        str(tmp_path),
        "--run",
        run,
        "--jobs",
        "train,data",
    ]
    assert main(args) == 0 and calls == ["train", "train", "data"]


def test_a_raising_job_type_fails_and_the_others_still_run(monkeypatch, tmp_path):
    def boom(ctx):
        raise RuntimeError("fp8rl fetch data exited 2")

    jobs = {n: dataclasses.replace(j, run=(boom if n == "fetch" else lambda ctx, n=n: Outcome(n, "ok", "")))
            for n, j in JOB_TYPES.items()}  # fmt: skip
    monkeypatch.setattr(rehearse_jobs, "JOB_TYPES", jobs)
    ctx = Context(load_config(PAPER), PAPER, [], tmp_path, [], echo=lambda line: None)
    outcomes = rehearse_jobs.rehearse_jobs(ctx, ["fetch", "data"])
    assert [(o.job, o.status) for o in outcomes] == [("fetch", "failed"), ("data", "ok")]
    assert "RuntimeError: fp8rl fetch data exited 2" in outcomes[0].detail


def _context(tmp_path) -> Context:
    cfg = load_config(PAPER)
    return Context(cfg, PAPER, [], tmp_path, job_types(cfg), echo=lambda line: None)


@pytest.mark.parametrize(("job", "image"), [("data", "train"), ("export", "train"), ("eval-lm", "eval"),
                                            ("eval-agent", "bfcl"), ("report", "cpu")])  # fmt: skip
def test_an_image_job_without_its_venv_is_skipped_naming_the_make_target(monkeypatch, tmp_path, job, image):
    monkeypatch.setattr(rehearse_jobs, "_venv", lambda image: tmp_path / f"venv-{image}")
    monkeypatch.setattr(rehearse_jobs, "hub_inputs", lambda ctx: (tmp_path / "hub.json", tmp_path / "data"))
    outcome = JOB_TYPES[job].run(_context(tmp_path))
    assert outcome.status == "skipped", outcome
    assert f"make image-venvs IMAGE_VENVS={image}" in outcome.detail


def test_train_without_verl_is_skipped_naming_how_to_get_it(monkeypatch, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "verl" else real(name, *a)
    )
    outcome = JOB_TYPES["train"].run(_context(tmp_path))
    assert outcome.status == "skipped" and "scripts/verl_test_env.sh" in outcome.detail


@pytest.mark.slow
def test_the_fetch_job_type_runs_the_fetch_and_data_commands_to_their_end(tmp_path):
    ctx = _context(tmp_path)
    outcome = JOB_TYPES["fetch"].run(ctx)
    assert outcome.status == "ok", outcome.detail
    record, data = ctx.inputs["data"]
    assert record.is_file() and (data / "train.jsonl").read_text().count("\n") == 9
    for name in ("qwen3-8b", "qwen3-14b", "qwen2.5-32b"):
        assert (tmp_path / "base" / name / "model.json").is_file()
    # the check has teeth: a model the hub lacks fails the job type, naming the command
    ctx2 = _context(tmp_path / "again")
    ctx2.work.mkdir()
    ctx2.inputs["mirror"] = None
    rehearse_jobs.stand_in_hub(ctx2.work / "stand-in-hub")  # no models
    outcome = JOB_TYPES["fetch"].run(ctx2)
    assert outcome.status == "failed" and "fp8rl fetch model --model qwen3-8b exited 2" in outcome.detail


@pytest.mark.parametrize(
    ("ci", "paper", "status"),
    [("ok", "ok", "ok"), ("skipped", "ok", "ok"), ("ok", "failed", "failed"), ("failed", "ok", "failed"),
     ("skipped", "skipped", "skipped")],
)  # fmt: skip
def test_the_report_job_type_runs_the_ci_report_and_the_configs_report_on_verl_runs(
    monkeypatch, tmp_path, ci, paper, status
):
    """`--jobs report` rehearses the CI tier's report and the config's own (fp8rl.adapters.rehearse_report)
    in the cpu image's venv: it fails when either does, and is skipped only when both are."""
    from fp8rl.adapters import image_rehearse, rehearse_report
    from fp8rl.adapters.image_venv import Result

    def result(job, how):
        return Result(job, how != "failed", f"{job} {how}", skipped=how == "skipped")

    calls = []
    monkeypatch.setattr(rehearse_jobs, "_venv", lambda image: tmp_path / f"venv-{image}")
    monkeypatch.setattr(image_rehearse, "report_job", lambda venv, work: result("report", ci))

    def paper_job(venv, work, config, sets):
        calls.append((venv.name, config, sets))
        return result(rehearse_report.JOB, paper)

    monkeypatch.setattr(rehearse_report, "report_job", paper_job)
    ctx = _context(tmp_path)
    ctx.sets = ["schedule.steps=50"]
    outcome = JOB_TYPES["report"].run(ctx)
    assert outcome.status == status, outcome
    assert calls == [("venv-cpu", PAPER, ["schedule.steps=50"])]  # the config the rehearsal was given
    assert f"report {ci}" in outcome.detail and f"{rehearse_report.JOB} {paper}" in outcome.detail
