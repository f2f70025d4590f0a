"""runs.md stays a table whatever a run's reason says: a line break, a `|` or HTML in an exception's
message is one cell of text, never a broken row or markup."""

from __future__ import annotations

import json

from report_fixtures import FAILED, write_tier

from fp8rl.report.load import load_tier
from fp8rl.report.markdown import to_markdown
from fp8rl.report.pipeline import runs_table
from fp8rl.report.writer import markdown_cells

REASON = "RuntimeError: boom\nat step 3 | rank 0\r\n<script>alert(1)</script> & more"


def test_a_reason_with_line_breaks_pipes_and_html_is_one_escaped_cell(tmp_path):
    cfg = write_tier(tmp_path)
    summary = tmp_path / "results" / cfg.tier / "runs" / FAILED / "summary.json"
    summary.write_text(json.dumps(json.loads(summary.read_text()) | {"reason": REASON}))
    runs = runs_table(load_tier(cfg))
    md = to_markdown("runs", markdown_cells(runs))
    rows = [line for line in md.splitlines() if line.startswith("|")]
    assert len(rows) == len(runs) + 2  # header, rule, one line per run
    row = next(r for r in rows if FAILED in r)
    cells = row.replace("\\|", "\0").split("|")[1:-1]
    assert len(cells) == len(runs.columns)
    assert "RuntimeError: boom at step 3 \\| rank 0 &lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in row
    assert "<script>" not in md
    assert runs.set_index("run_id").loc[FAILED, "reason"] == REASON  # the CSV keeps the text as it is


def test_control_characters_in_a_cell_or_a_column_name_are_shown_escaped():
    """An ANSI colour code, a NUL or a bidirectional mark in a reason or an eval column named after a task
    reached the Markdown table raw (a terminal ran the colour code, a viewer reordered the row)."""
    import pandas as pd

    from fp8rl.report.html import _table

    frame = pd.DataFrame({"arith\x1b[31m_mc/acc": ["RuntimeError: \x1b[31mred\x00\u202eevil"], "n": [3]})
    md = to_markdown("t", markdown_cells(frame))
    assert "arith\\x1b[31m_mc/acc" in md and "RuntimeError: \\x1b[31mred\\x00\\u202eevil" in md
    assert not [c for c in md if c != "\n" and (ord(c) < 32 or c == "\u202e")]
    page = _table(frame)  # report.html's tables likewise
    assert "arith\\x1b[31m_mc/acc" in page and "\\x00\\u202eevil" in page
    assert not [c for c in page if c != "\n" and (ord(c) < 32 or c == "\u202e")]
