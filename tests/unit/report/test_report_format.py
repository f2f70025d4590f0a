"""One formatter for every figure with its interval: the three numbers of a cell share their decimals."""

from __future__ import annotations

import math

import pytest

from fp8rl.report.markdown import figures, fmt_ci


@pytest.mark.parametrize(
    "est,low,high,cell",
    [
        (0.0011, 0.0004023, 0.0021, "0.00110 [0.00040, 0.00210]"),  # was 0.0011 [0.0004023, 0.0021]
        (0.0196, 0.0156, 0.0240, "0.0196 [0.0156, 0.0240]"),
        (0.433, 0.353, 0.513, "0.433 [0.353, 0.513]"),
        (0.967, 0.823, 1.0, "0.97 [0.82, 1.00]"),  # the top is 1: three significant digits there
        (1.764, 1.170, 2.357, "1.76 [1.17, 2.36]"),
        (52.0, 10.25, 95.5, "52.0 [10.2, 95.5]"),
        (1234.0, 1100.0, 1400.0, "1234 [1100, 1400]"),
        (1.256e-08, 4.82e-10, 3.093e-08, "1.26e-08 [0.05e-08, 3.09e-08]"),
        (0.5, 0.5, 0.5, "0.500 [0.500, 0.500]"),
        (0.0, 0.0, 0.0, "0.00 [0.00, 0.00]"),
    ],
)
def test_a_figure_and_its_interval_share_their_decimals(est, low, high, cell):
    assert fmt_ci(est, low, high, "no CI") == cell
    decimals = {
        len(part.split(".")[1].split("e")[0]) if "." in part else 0 for part in figures([est, low, high])
    }
    assert len(decimals) == 1


def test_signs_blanks_and_open_ends():
    assert fmt_ci(0.0070, -0.0005172, 0.0134, "no CI", signed=True) == "+0.0070 [-0.0005, 0.0134]"
    assert fmt_ci(-0.00003, -0.0004, 0.0003, "no CI", signed=True) == "-0.30e-04 [-4.00e-04, 3.00e-04]"
    assert fmt_ci(-0.0000001, -0.02, 0.03, "no CI") == "0.0000 [-0.0200, 0.0300]"  # no "-0.0000"
    assert fmt_ci(0.42, math.nan, math.nan, "n=1, no CI") == "0.420 (n=1, no CI)"
    assert fmt_ci(math.nan, 0.1, 0.2, "no CI") == ""
    assert figures([4.0, 2.96, math.inf]) == ["4.00", "2.96", "inf"]
    assert figures([math.nan, 4.002, 7.997]) == ["", "4.00", "8.00"]
