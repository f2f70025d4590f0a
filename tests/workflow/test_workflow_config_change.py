"""A config change reruns what depends on it from any checkout: each job records the digest of the config
sections its output was made under beside the results (`{R}/digests/`), so a DAG started with no
`.snakemake/` metadata (a fresh clone, another working directory) still sees the change."""

from __future__ import annotations

import json
from pathlib import Path

from workflow_helpers import planned_jobs, snakemake, write_config

from fp8rl.config import TRAIN_SECTIONS
from fp8rl.config_loader import load_config

RUN = "grpo/tiny/bf16/none/seed0"


def test_a_changed_section_reruns_its_jobs_from_a_fresh_checkout(tmp_path):
    out = tmp_path / "out"
    first = write_config(tmp_path / "a.yaml", "config/ci.yaml", f"results_dir={out}")
    cfg = load_config(first)
    root = out / cfg.tier
    data = root / "data" / "train.jsonl"
    snakemake(tmp_path / "work1", "--cores", "1", "--configfile", str(first), "--", str(data))
    assert (root / "digests" / "data" / "data" / "train.jsonl.digest").read_text() == cfg.section_digest(
        "task"
    ) + "\n"
    # A finished run, as the train rule leaves it: its summary and the digest it was trained under (the
    # base model's record first, so the run is newer than its inputs).
    base = root / "base" / "tiny" / "sft.json"
    summary = root / "runs" / RUN / "summary.json"
    for path, rule, digest in (
        (base, "sft", cfg.section_digest("numerics", "task", "sft", model="tiny")),
        (summary, "train", cfg.section_digest(*TRAIN_SECTIONS, model="tiny")),
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"status": "ok"}))
        record = root / "digests" / rule / f"{path.relative_to(root)}.digest"
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(digest + "\n")

    def plan(config: Path, target: Path) -> dict[str, int]:  # from a working directory with no metadata
        return planned_jobs(tmp_path / f"fresh{len(list(tmp_path.glob('fresh*')))}", "--configfile",
                            str(config), "--", str(target))  # fmt: skip

    assert plan(first, data) == {} and plan(first, summary) == {}
    changed = write_config(tmp_path / "b.yaml", "config/ci.yaml", f"results_dir={out}", "task.n_train=500")
    assert plan(changed, data) == {"data": 1}
    lr = write_config(tmp_path / "c.yaml", "config/ci.yaml", f"results_dir={out}", "schedule.lr=1e-3")
    assert plan(lr, summary) == {"train": 1}  # the data and base are current
    # the rerun writes the new record: nothing more to do, from a fresh directory or the same one (where
    # Snakemake's own record of the job must not ask for it again); and a change back reruns it again
    snakemake(tmp_path / "work2", "--cores", "1", "--configfile", str(changed), "--", str(data))
    assert plan(changed, data) == {}
    assert planned_jobs(tmp_path / "work2", "--configfile", str(changed), "--", str(data)) == {}
    assert plan(first, data) == {"data": 1}
