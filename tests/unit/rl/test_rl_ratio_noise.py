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
        # net excess (phantom - missed) is what calibration removes: ~0 after it
        net = r["calib phantom/low_neg"] - r["calib phantom/missed_neg"]
        assert net == pytest.approx(r["calib clip/low_neg"] - ref) and abs(net) < 3 / n_neg
        fixed_net = r["fixed phantom/low_neg"] - r["fixed phantom/missed_neg"]
        assert fixed_net == pytest.approx(r["fixed clip/low_neg"] - ref) and fixed_net > 0
        assert 0.3 * 32_768 < r["calib/ref_tokens"] < 0.7 * 32_768  # the A<0 tokens set the target
        assert r["calib/ref_tokens"] % 128 == 0  # whole sequences: one advantage each


def test_defaults_restore_the_reference_rate_where_population_all_under_clips():
    """The default setup at noise 0.2 (GRPO's 0.2/0.2): 'all' clips 3.3 % of A<0 tokens against the
    reference's 4.2 %, the default ('neg') exactly 4.2 %."""
    default = ratio_noise_study([0.2], clip_low=0.2, clip_high=0.2)[0]
    every = ratio_noise_study([0.2], clip_low=0.2, clip_high=0.2, population="all")[0]
    ref, n_neg = default["ref clip/low_neg"], default["calib/ref_tokens"]
    assert round(100 * ref, 1) == 4.2 and round(100 * every["calib clip/low_neg"], 1) == 3.3
    assert abs(default["calib clip/low_neg"] - ref) <= 1 / n_neg
    assert default["calib/high"] == pytest.approx(1 + 0.2 * (1 - default["calib/low"]) / 0.2)


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
    assert out["clip_high"] == 0.28 and out["population"] == "neg"
    assert any("population neg" in note for note in out["calibration"])
    assert {"calib phantom/missed_neg", "calib/ref_tokens"} <= set(out["rows"][1])
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
    for change in ("population neg", "pooled target", "clamped L", "missed_neg"):
        assert change in " ".join(out.split()), change  # the legend says what the calibrator does
    assert json.loads((tmp_path / "s.json").read_text())["rows"][1]["noise"] == 0.3
    assert main(["study", "ratio-noise", "--levels", "0,abc"]) == 2
    assert main(["study", "ratio-noise", "--tokens", "10"]) == 2
    assert main(["study", "ratio-noise", "--set", "calib.population=neg"]) == 2
    assert "error:" in capsys.readouterr().err
