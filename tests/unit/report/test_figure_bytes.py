"""A report figure written twice from the same data is the same bytes (fp8rl.report.plot_base.save_figure):
a re-published tier whose data did not change changes no figure file."""

from __future__ import annotations

import matplotlib.pyplot as plt

from fp8rl.report.paths import PLOT_FORMATS
from fp8rl.report.plot_base import save_figure


def _figure() -> plt.Figure:
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1, 2], [0.2, 0.5, 0.4], label="bf16")
    ax.fill_between([0, 1, 2], [0.1, 0.4, 0.3], [0.3, 0.6, 0.5], alpha=0.3)  # clip paths carry ids
    ax.legend()
    fig.suptitle("reward")
    return fig


def test_the_same_figure_saves_to_the_same_bytes(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    paths_a = save_figure(_figure(), first, "reward")
    paths_b = save_figure(_figure(), second, "reward")
    assert [p.suffix[1:] for p in paths_a] == list(PLOT_FORMATS)
    for a, b in zip(paths_a, paths_b, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name
    svg = paths_a[[p.suffix for p in paths_a].index(".svg")].read_text()
    assert "<dc:date>" not in svg and 'clip-path="url(#' in svg  # ids drawn, but from the fixed salt
