"""The base-model table reads what `fp8rl sft` writes: one row per base, per seed with sft.per_seed."""

from __future__ import annotations

import json

from fp8rl import numerics
from fp8rl.report.base_models import COLUMNS, base_model_table, runs_numerics


def _sft_json(path, seed, acc):
    """The keys `fp8rl.engine.sft.run_sft` writes (a subset: provenance etc. left out)."""
    path.mkdir(parents=True)
    info = {"model": "tiny", "seed": seed, "sft_seed": 1234 if seed is None else 1234 + 1_000_003 * (seed + 1),
            "parameters": 409216, "steps": 800, "batch_size": 64, "lr": 0.003, "loss/first": 3.1,
            "loss/final": 0.42, "acc/test_greedy": acc, "acc/test_sampled": acc / 2, "n_test": 200,
            "seconds": 35.1, "threads": 1}  # fmt: skip
    (path / "sft.json").write_text(json.dumps(info))


def test_one_row_per_seeded_base_in_seed_order(tmp_path):
    for seed, acc in ((1, 0.3), (0, 0.26), (2, 0.45)):
        _sft_json(tmp_path / "base" / "tiny" / f"seed{seed}", seed, acc)
    table = base_model_table(tmp_path)
    assert list(table.columns) == COLUMNS
    assert table["seed"].tolist() == [0, 1, 2] and table["acc/test_greedy"].tolist() == [0.26, 0.3, 0.45]
    assert "seconds" not in table  # the table holds no timing: it must reproduce byte for byte


def test_a_shared_base_has_no_seed_and_no_base_gives_an_empty_table(tmp_path):
    assert base_model_table(tmp_path).empty
    _sft_json(tmp_path / "base" / "tiny", None, 0.4)
    table = base_model_table(tmp_path)
    assert len(table) == 1 and table["seed"].isna().all()


def test_the_runs_numerics_are_collected_from_their_summaries(tmp_path):
    """What `fp8rl.provenance` writes into summary.json: the mode, the CPU and the pinned variables of
    each run (this process's own `numerics.state()` for one run, a `fast` one elsewhere, one from before
    the record)."""
    numerics.pin_gemms()  # in reproducible mode: every GEMM on the pinned OpenBLAS kernel
    pinned = numerics.state()
    fast = {"mode": "fast", "env": dict.fromkeys(pinned["env"]), "cpu": {"model": "Intel Xeon"}}
    for i, state in enumerate((pinned, fast, None)):
        run = tmp_path / "runs" / f"grpo/tiny/bf16/none/seed{i}"
        run.mkdir(parents=True)
        (run / "summary.json").write_text(json.dumps({"status": "ok", "provenance": {"numerics": state}}))
    assert runs_numerics(tmp_path / "runs") == {
        "modes": sorted([pinned["mode"], "fast", "unrecorded"]),
        "cpus": sorted({pinned["cpu"]["model"], "Intel Xeon"}),
        "mkl": sorted({pinned["env"]["MKL_CBWR"] or "auto", "auto"}),
        "gemms": sorted(
            {f"OpenBLAS {pinned['pinned_blas']['core']}" if "pinned_blas" in pinned else "MKL", "MKL"}
        ),
    }


def test_an_sft_json_that_is_a_directory_or_damaged_is_a_data_problem(tmp_path):
    """The report crashed on `base/.../sft.json` as a directory; now the base is left out and named."""
    _sft_json(tmp_path / "base" / "tiny" / "seed0", 0, 0.26)
    (tmp_path / "base" / "tiny" / "seed1" / "sft.json").mkdir(parents=True)
    (tmp_path / "base" / "tiny" / "seed2").mkdir(parents=True)
    (tmp_path / "base" / "tiny" / "seed2" / "sft.json").write_bytes(b"\xff{")
    problems: list[str] = []
    table = base_model_table(tmp_path, problems)
    assert table["seed"].tolist() == [0]
    assert len(problems) == 2
    assert "seed1/sft.json: a directory; base model left out" in problems[0]
    assert "seed2/sft.json: unreadable" in problems[1]
