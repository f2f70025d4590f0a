"""The report's one table writer: a `ReportTable` is what a table builder (fp8rl.report.pipeline)
returns, `write_tables` writes each one's `tables/{name}.csv` and `tables/{name}.md`, and
`html_sections` hands the same tables, in the same order, to the HTML page (fp8rl.report.html).
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import pandas as pd

from fp8rl.io import atomic_write_text
from fp8rl.report.html import visible
from fp8rl.report.markdown import to_markdown
from fp8rl.report.paths import ReportPaths


def markdown_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with its text cells and column names safe in a Markdown table (a run's reason is free
    text, an exception's message; an eval column is named after a task): line breaks as spaces, other
    control characters escaped (`html.visible`), `|` escaped, `&`, `<` and `>` as HTML entities."""

    def cell(v):
        return (
            html.escape(visible(" ".join(v.splitlines())), quote=False).replace("|", "\\|")
            if isinstance(v, str)
            else v
        )

    return frame.map(cell).rename(columns=cell)


@dataclass(frozen=True)
class ReportTable:
    """One table of the report: `tables/{name}.csv` (`frame`, written with `float_format`) and
    `tables/{name}.md` (`# {tier title}: {title}`, the notes, the view), and the HTML section `heading`
    (notes and view). No `name`: an HTML section only; no `heading`: files only. `markdown`: the whole
    Markdown text where it is not the view as one table (the comparison's, grouped); `escape`: make the
    view's free-text cells safe in Markdown (`markdown_cells`; the HTML escapes its own)."""

    name: str | None
    heading: str | None
    title: str
    view: pd.DataFrame
    notes: list[str]
    frame: pd.DataFrame | None = None
    float_format: str = "%.6g"
    markdown: str | None = None
    escape: bool = False


def write_tables(tables: list[ReportTable], paths: ReportPaths, title: str) -> None:
    """Each table's CSV and Markdown file (those with a `name`)."""
    for t in tables:
        if t.name is None:
            continue
        atomic_write_text(
            paths.table(t.name, "csv"), t.frame.to_csv(index=False, float_format=t.float_format)
        )
        view = markdown_cells(t.view) if t.escape else t.view
        text = t.markdown or to_markdown(f"{title}: {t.title}", view, t.notes)
        atomic_write_text(paths.table(t.name, "md"), text)


def html_sections(tables: list[ReportTable]) -> list[tuple[str, list[str], pd.DataFrame]]:
    """The HTML report's sections, in the order of `tables`."""
    return [(t.heading, t.notes, t.view) for t in tables if t.heading is not None]
