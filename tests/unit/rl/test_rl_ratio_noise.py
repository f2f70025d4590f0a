"""The ratio-noise study: the mechanism in isolation, and its CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fp8rl.cli import main
from fp8rl.rl.ratio_noise import RatioNoiseSetup, ratio_noise_study

SMOKE = str(Path(__file__).resolve().parents[3] / "config" / "smoke.yaml")
SETUP = RatioNoiseSetup(n_tokens=32_768, seq_len=128, seed=3)


def test_noise_inflates_fixed_clipping_and_calibration_restores_the_reference():
    levels = [0.0, 0.1, 0.2, 0.4]
    rows = ratio_noise_study(levels, clip_low=0.2, clip_high=0.28, population="neg", setup=SETUP)
    ref = rows[0]["ref clip/low_neg"]
    assert 0.01 < ref < 0.2
    assert rows[0]["fixed clip/low_neg"] == rows[0]["calib clip/low_neg"] == ref
    assert (rows[0]["calib/low"], rows[0]["calib/high"]) == (0.8, 1.28)
    fixed = [r["fixed clip/low_neg"] for r in rows]
    assert fixed == sorted(fixed) and fixed[-1] > 2.5 * ref  # noise alone zeroes many more gradients
    n_neg = 32_768 / 2  # about half the tokens have A<0
    for r in rows[1:]:
        assert r["calib/low"] < 0.8 and r["calib/high"] > 1.28  # bounds widen, proportionally
        assert abs(r["calib clip/low_neg"] - ref) < 3 / n_neg  # matched to the token
        assert r["calib phantom/low_neg"] < r["fixed phantom/low_neg"]


def test_population_all_matches_the_overall_low_fraction_instead():
    rows = ratio_noise_study([0.2], clip_low=0.2, clip_high=0.2, population="all", setup=SETUP)
    assert rows[0]["calib clip/low_neg"] < rows[0]["fixed clip/low_neg"]
    with pytest.raises(ValueError, match="noise levels"):
        ratio_noise_study([-0.1], clip_low=0.2, clip_high=0.2, setup=SETUP)


def test_cli_json_reads_clip_settings_from_the_config(capsys):
    rc = main(
        ["study", "ratio-noise", "--config", SMOKE, "--algo", "dapo", "--levels", "0,0.2",
         "--tokens", "8192", "--json"]
    )  # fmt: skip
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["clip_high"] == 0.28 and out["population"] == "all"
    assert [r["noise"] for r in out["rows"]] == [0.0, 0.2]


def test_cli_table_and_bad_input(capsys, tmp_path):
    assert (
        main(
            [
                "study",
                "ratio-noise",
                "--tokens",
                "4096",
                "--levels",
                "0,0.3",
                "--out",
                str(tmp_path / "s.json"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "low_range" in out and "0.3" in out
    assert json.loads((tmp_path / "s.json").read_text())["rows"][1]["noise"] == 0.3
    assert main(["study", "ratio-noise", "--levels", "0,abc"]) == 2
    assert main(["study", "ratio-noise", "--tokens", "10"]) == 2
    assert main(["study", "ratio-noise", "--set", "calib.population=neg"]) == 2
    assert "error:" in capsys.readouterr().err
