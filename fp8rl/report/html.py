"""One self-contained HTML report: tables inline, PNG plots embedded as base64 data URIs.

It opens anywhere (no sibling files, no network): header with tier, config digest and git commit, run
status counts, data problems (malformed lines, unreadable files) and, apart, benign data notes
(zero-width intervals), a short explanation of the mechanism
and of how to read the figures, the comparison and throughput tables
with their notes, the plots, and the per-run status table.
"""

from __future__ import annotations

import base64
import html
import unicodedata
from pathlib import Path

import pandas as pd

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; font-size: 12px; margin-bottom: 1.5em; }
/* a table wider than the window scrolls inside its own box instead of widening the page */
table { display: block; max-width: 100%; overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: right; }
th { background: #f0f0f0; } td:first-child, th:first-child { text-align: left; }
.status-diverged { color: #b35900; font-weight: bold; } .status-failed { color: #b00; font-weight: bold; }
.status-missing { color: #777; font-style: italic; }
img { max-width: 100%; height: auto; border: 1px solid #eee; margin-bottom: 1.5em; }
.notes { font-size: 12px; color: #555; }
.banner { border: 2px solid #b00; padding: 0.6em; color: #b00; font-weight: bold; max-width: 60em; }
dl { max-width: 60em; font-size: 14px; } dt { font-weight: bold; margin-top: 0.6em; } dd { margin-left: 1.5em; }
"""


# The page's renderings of what report.json also records: fp8rl.publication.publish checks that the two agree.
def header_row(key: str, value: object) -> str:
    return f"<tr><th>{html.escape(key)}</th><td>{html.escape(str(value))}</td></tr>"


def status_line(status_counts: dict[str, int]) -> str:
    counts = ", ".join(f'<span class="status-{s}">{s}: {n}</span>' for s, n in status_counts.items())
    return f"<p><b>Runs</b>: {counts}</p>"


def banner_line(banner: str) -> str:
    return f'<p class="banner">{html.escape(banner)}</p>'


def problems_heading(count: int) -> str:
    return f"<h2>Data problems ({count})</h2>"


def notes_heading(count: int) -> str:
    return f"<h2>Data notes ({count})</h2>"


NOTES_LEAD = "Benign: the data is sound, but these intervals measure nothing (no spread over the seeds)."


def _listing(heading: str, lines: list[str], max_lines: int, lead: str = "") -> str:
    """`heading`, an optional `lead` paragraph and the first `max_lines` of `lines` as a list."""
    shown = lines[:max_lines]
    more = (
        f"<li>… and {len(lines) - len(shown)} more (see report.json)</li>" if len(lines) > len(shown) else ""
    )
    items = "".join(f"<li><code>{html.escape(p)}</code></li>" for p in shown)
    return f"{heading}{f'<p>{html.escape(lead)}</p>' if lead else ''}<ul>{items}{more}</ul>"


def visible(text: str) -> str:
    """`text` with each control or format character (an ANSI colour code, a NUL, a zero-width or
    bidirectional mark) written as its Python escape, `\\x1b`: a table shows what the file held."""
    return "".join(
        c.encode("unicode_escape").decode("ascii") if unicodedata.category(c) in ("Cc", "Cf") else c
        for c in text
    )


def _table(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "<p><em>no rows</em></p>"

    def shown(v):
        return visible(v) if isinstance(v, str) else v

    text = [c for c in frame.columns if not pd.api.types.is_numeric_dtype(frame[c])]
    frame = frame.assign(**{str(c): frame[c].map(shown) for c in text}).rename(columns=shown)
    return frame.to_html(index=False, border=0, na_rep="", escape=True)


def _notes(notes: list[str]) -> str:
    items = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    return f'<ul class="notes">{items}</ul>'


def _image(png: Path, caption: str) -> str:
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    return f'<h3>{html.escape(caption)}</h3><img alt="{html.escape(caption)}" src="data:image/png;base64,{data}">'


def render_html(
    *,
    title: str,
    header: dict[str, str],
    status_counts: dict[str, int],
    problems: list[str],
    sections: list[tuple[str, list[str], pd.DataFrame]],
    plots: list[tuple[Path, str]],
    runs: pd.DataFrame,
    explainer: tuple[tuple[str, str], ...] = (),
    max_problems: int = 200,
    banner: str | None = None,
    notes: list[str] = (),
) -> str:
    """The report page; `sections` are (heading, notes, formatted table), `plots` (png path, caption),
    `explainer` (term, text) pairs shown above the tables (fp8rl.report.explainer), `banner` a warning
    shown under the run counts (a void comparison: fp8rl.report.control); `problems` (data that could
    not be used) and `notes` (benign remarks on sound data: zero-width intervals) in lists of their own."""
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"]
    out.append(f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>")
    out.append("<table>" + "".join(header_row(k, v) for k, v in header.items()) + "</table>")
    out.append(status_line(status_counts))
    if banner:
        out.append(banner_line(banner))
    if problems:
        out.append(_listing(problems_heading(len(problems)), problems, max_problems))
    if notes:
        out.append(_listing(notes_heading(len(notes)), notes, max_problems, NOTES_LEAD))
    if explainer:
        items = "".join(f"<dt>{html.escape(t)}</dt><dd>{html.escape(d)}</dd>" for t, d in explainer)
        out.append(f'<h2 id="mechanism">The mechanism, and how to read this report</h2><dl>{items}</dl>')
    for heading, notes, frame in sections:
        out.append(f"<h2>{html.escape(heading)}</h2>{_notes(notes)}{_table(frame)}")
    out.append("<h2>Plots</h2>")
    out += [_image(png, caption) for png, caption in plots]
    runs_html = _table(runs)
    for status in ("diverged", "failed", "missing"):  # make the runs that need a look stand out
        runs_html = runs_html.replace(f"<td>{status}</td>", f'<td class="status-{status}">{status}</td>')
    out.append(f"<h2>Runs</h2>{runs_html}</body></html>")
    return "\n".join(out) + "\n"
