"""The figures README.md and docs/ quote come from the published tables (fp8rl.quotes.files)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from report_fixtures import consistent_manifest

from fp8rl.quotes.clipping import share_range
from fp8rl.quotes.files import BEGIN, END, QUOTING_FILES, QuoteError, render, stale_blocks
from fp8rl.report.formats import pp

REPO = Path(__file__).resolve().parents[3]


def _smoke_tables(root: Path, bf16=0.0126, delta=(0.0070, -0.0005, 0.0134)) -> Path:
    """A published smoke comparison with the columns `fp8rl report` writes (those the block reads)."""
    tables = root / "smoke" / "tables"
    tables.mkdir(parents=True)
    rows = []
    for algo in ("grpo", "dapo"):
        for v in ("bf16", "fp8"):
            d = (float("nan"),) * 3 if v == "bf16" else delta
            rows.append({"algo": algo, "variant": v, "clip_low_neg": bf16 if v == "bf16" else bf16 + d[0],
                         "clip_low_neg ci_low": 0.0082, "clip_low_neg ci_high": 0.0182,
                         "clip_low_neg delta": d[0], "clip_low_neg delta_ci_low": d[1],
                         "clip_low_neg delta_ci_high": d[2], "excess_clip": 0.0079,
                         "excess_clip ci_low": 0.0051, "excess_clip ci_high": 0.0107})  # fmt: skip
    pd.DataFrame(rows).to_csv(tables / "comparison.csv", index=False)
    _manifest(root / "smoke")
    return root


def _manifest(tier: Path) -> None:
    """The `report.json` a report writes: the sha256 of each of its files, report.html among them."""
    (tier / "report.json").write_text(json.dumps(consistent_manifest(tier)))


def test_a_block_is_generated_from_its_table(tmp_path):
    published = _smoke_tables(tmp_path)
    text = "intro\n<!-- fp8rl:results smoke-clipping -->\nold figures\n<!-- /fp8rl:results -->\nafter\n"
    out = render(text, published)
    assert out.startswith("intro\n<!-- fp8rl:results smoke-clipping -->\n|  | GRPO | DAPO |")
    assert "| `clip/low_neg`, bf16 | 1.26 % [0.82, 1.82] |" in out
    assert "| fp8, Δ vs bf16 | +0.70 pp [−0.05, +1.34] |" in out  # interval spans 0: not bold
    assert "**+0.79 pp [+0.51, +1.07]**" in out and out.endswith(END + "\nafter\n")
    assert render(out, published) == out  # regenerating changes nothing


def test_a_changed_table_makes_the_text_stale(tmp_path):
    published = _smoke_tables(tmp_path / "a")
    (tmp_path / "README.md").write_text(
        render("<!-- fp8rl:results smoke-clipping -->\n<!-- /fp8rl:results -->\n", published)
    )
    assert stale_blocks(tmp_path, published) == []
    moved = _smoke_tables(tmp_path / "b", delta=(0.0050, 0.0010, 0.0090))
    assert stale_blocks(tmp_path, moved) == ["README.md: smoke-clipping"]


def test_unknown_blocks_and_missing_tables_are_named(tmp_path):
    with pytest.raises(QuoteError, match="unknown block 'nope'"):
        render("<!-- fp8rl:results nope -->\n<!-- /fp8rl:results -->", tmp_path, "README.md")
    with pytest.raises(QuoteError, match="comparison.csv: not published"):
        render("<!-- fp8rl:results smoke-clipping -->\n<!-- /fp8rl:results -->", tmp_path, "README.md")


def test_significance_is_bold_only_when_the_interval_excludes_zero():
    assert pp(0.01, 0.002, 0.02).startswith("**") and pp(-0.01, -0.02, -0.001).startswith("**")
    assert not pp(0.01, -0.002, 0.02).startswith("**")


def test_a_share_that_is_negative_is_worded_as_added_not_removed():
    assert share_range([(0.44, "blockwise"), (0.77, "mxfp8")]) == "removes 44 % (blockwise) to 77 % (mxfp8)"
    assert share_range([(-1.66, "blockwise"), (0.42, "delayed")]) == (
        "from adding 166 % (blockwise) to removing 42 % (delayed)"
    )
    assert share_range([(-0.5, "a"), (-0.1, "b")]) == "adds 10 % (b) to 50 % (a)"
    assert share_range([(1.03, "tensorwise")]) == "removes 103 % (tensorwise)"


def test_a_share_removed_is_given_only_where_plain_fp8_s_excess_is_shown(tmp_path):
    from fp8rl.quotes.clipping import mechanism_excess

    rows = []
    for dose, (lo, hi) in ((1, (-0.004, 0.010)), (4, (0.011, 0.073))):
        for variant, est in (("fp8", (lo + hi) / 2), ("fp8_calib", 0.001)):
            rows.append({"algo": "grpo", "granularity": "tensorwise", "kv_cache": True, "format": "hybrid",
                         "noise_scale": dose, "variant": variant, "excess_clip": est,
                         "excess_clip ci_low": lo if variant == "fp8" else -0.002,
                         "excess_clip ci_high": hi if variant == "fp8" else 0.004,
                         "bf16_clip_low_neg": 0.0116})  # fmt: skip
    (tmp_path / "mechanism" / "tables").mkdir(parents=True)
    pd.DataFrame(rows).to_csv(tmp_path / "mechanism" / "tables" / "mechanism.csv", index=False)
    table = mechanism_excess(tmp_path).splitlines()
    assert table[2].endswith("| – |")  # dose 1: fp8's interval includes 0
    assert table[3].endswith("| 98 % |")  # dose 4: 1 - 0.001 / 0.042


def test_one_generator_serves_a_block_per_tier(tmp_path):
    """A block is a generator bound to its tier (`@quoted_block(NAME, tier=...)`): the learning and the
    mechanism tier's mismatch blocks are one function, each reading its own tier's table."""
    from fp8rl.quotes.registry import BLOCKS
    from fp8rl.quotes.studies import mismatch_quote

    assert BLOCKS["learn-mismatch"].__wrapped__ is BLOCKS["mechanism-mismatch"].__wrapped__ is mismatch_quote
    with pytest.raises(QuoteError, match="mechanism/tables/mismatch.csv: not published"):
        BLOCKS["mechanism-mismatch"](tmp_path)
    with pytest.raises(QuoteError, match="learn/tables/mismatch.csv: not published"):
        BLOCKS["learn-mismatch"](tmp_path)


def test_a_benchmark_record_is_read_only_as_declared(tmp_path):
    """A block reads a benchmark record by its name in fp8rl.quotes.registry.RECORDS: an undeclared name, a
    record not published and one without the entries its script writes are each named."""
    from fp8rl.quotes.registry import record

    with pytest.raises(QuoteError, match="'vs_foo': not declared in fp8rl.quotes.registry.RECORDS"):
        record(tmp_path, "vs_foo")
    with pytest.raises(
        QuoteError, match=r"benchmarks/gemm_paths.json: not published \(benchmarks/gemm_paths.py"
    ):
        record(tmp_path, "gemm_paths")
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "gemm_paths.json").write_text('{"gflops": {}}')
    with pytest.raises(QuoteError, match="not a benchmarks/gemm_paths.py record \\(no `gflops`\\)"):
        record(tmp_path, "gemm_paths")


def test_the_repository_quotes_match_the_published_tables():
    assert stale_blocks(REPO, REPO / "results" / "published") == []


def _edit_json(path: Path, **fields) -> None:
    path.write_text(json.dumps(json.loads(path.read_text()) | fields))


def _edit_manifest(tier: Path, **fields) -> None:
    """report.json with `fields` replaced: it holds no hash of itself, so only its agreement with the
    hashed page can catch the edit."""
    _edit_json(tier / "report.json", **fields)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda t: t.joinpath("tables", "comparison.md").write_text("| edited |\n"), "tables/comparison.md: not the file"),
        (lambda t: t.joinpath("tables", "comparison.csv").unlink(), "tables/comparison.csv: missing"),
        (lambda t: t.joinpath("tables", "extra.csv").write_text("a\n1\n"), "tables/extra.csv: not one of the files"),
        (lambda t: _edit_manifest(t, numerics={"modes": ["reproducible"], "cpus": ["Any CPU"], "mkl": ["auto"]}),
         "report.json: its 'numerics' is not what report.html says"),
        (lambda t: _edit_manifest(t, status_counts={"ok": 99, "diverged": 0, "failed": 0, "missing": 0}),
         "report.json: its 'status_counts' is not what report.html says"),
        (lambda t: _edit_manifest(t, problems=["planted"]), "report.json: its 'problems' is not"),
        (lambda t: _edit_manifest(t, notes=["planted"]), "report.json: its 'notes' is not"),
        (lambda t: _edit_manifest(t, numerics="fast"), "report.json: its fields cannot be checked"),
        (lambda t: _edit_json(t / "provenance.json", status_counts={"ok": 99}),
         "provenance.json: its 'status_counts' is not report.json's"),
    ],
)  # fmt: skip
def test_a_publication_edited_since_it_was_published_is_refused(tmp_path, capsys, change, named):
    """`fp8rl quotes --check` and `--write` verify every publication against its report.json first."""
    from fp8rl.cli import main

    published = tmp_path / "results" / "published"
    shutil.copytree(REPO / "results" / "published" / "smoke", published / "smoke")
    (tmp_path / "README.md").write_text("no quoted block\n")
    assert main(["quotes", "--check", "--root", str(tmp_path)]) == 0
    change(published / "smoke")
    for mode in ("--check", "--write"):
        assert main(["quotes", mode, "--root", str(tmp_path)]) == 2
        assert named in capsys.readouterr().err


# A result figure: a decimal number, a percentage or a percentage-point difference (the confidence
# level, "95 %", is a method, not a result). Config values are written as code (`lr: 3.0e-5`).
FIGURE = re.compile(r"(?<![\w.])[+−-]?\d+\.\d+(?![\w.])|(?<!\d)(?!95 ?%)\d+(\.\d+)? ?%|\d pp\b")


# Files whose design sections record the pilot measurements and power calculations that fixed a
# pre-registration before any run (inputs, not results): only their Results section is checked.
RESULTS_SECTION_ONLY = ("README.md",)


def _results_prose(name: str) -> str:
    text = (REPO / name).read_text(encoding="utf-8")
    if name in RESULTS_SECTION_ONLY:  # README: the rest is set-up and design
        text = re.split(r"\n## Results[^\n]*\n", text, maxsplit=1)[1].split("\n## ", 1)[0]
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # commands and configs
    text = re.sub(r"`[^`\n]*`", "", text)  # inline code: config values, file names
    for m in list(BEGIN.finditer(text))[::-1]:
        text = text[: m.start()] + text[text.find(END, m.end()) + len(END) :]
    return text


# docs/performance.md's prose is the record of how the speed work went (each figure with the command
# and the conditions it was measured under); its current figures are its generated blocks.
PROSE_HISTORY = ("docs/performance.md",)


@pytest.mark.parametrize(
    "name", [n for n in QUOTING_FILES if (REPO / n).is_file() and n not in PROSE_HISTORY]
)
def test_prose_outside_the_blocks_quotes_no_result_figures(name):
    found = [m.group(0) for m in FIGURE.finditer(_results_prose(name))]
    assert found == [], f"{name}: figures outside generated blocks: {found[:10]}"


def test_every_block_the_docs_quote_is_registered_where_it_is_defined():
    """Each `<!-- fp8rl:results NAME -->` of the quoting files names a generator registered with
    `@quoted_block(NAME)` in one of quotes.BLOCK_MODULES, and a name cannot be registered twice."""
    from fp8rl.quotes.files import BLOCK_MODULES
    from fp8rl.quotes.registry import BLOCKS, quoted_block

    used = {
        m["name"]
        for f in QUOTING_FILES
        if (REPO / f).is_file()
        for m in BEGIN.finditer((REPO / f).read_text())
    }
    assert used and used <= set(BLOCKS), used - set(BLOCKS)
    homes = {m.__name__ for m in BLOCK_MODULES} | {"fp8rl.quotes.files"}
    assert {fn.__module__ for fn in BLOCKS.values()} <= homes
    with pytest.raises(ValueError, match="smoke-clipping"):
        quoted_block("smoke-clipping")(lambda published: "")


def test_the_leaderboard_block_prices_each_arm_against_its_reference_from_a_real_publication(tmp_path):
    """The corrections' leaderboard generator on the published longform tier (arms, survival and
    throughput tables as `fp8rl report` wrote them): each arm in the study's order with its step from
    throughput.csv, the reference arm at exactly 1.00x of itself and bf16 at 1.00x of bf16; a reference
    that is not an arm of the tier is named."""
    from fp8rl.quotes.studies import leaderboard_quote
    from fp8rl.report.formats import num

    published = REPO / "results" / "published"
    text = leaderboard_quote(published, "longform", reference="tis_kl1e-2")
    arms = pd.read_csv(published / "longform" / "tables" / "arms.csv")
    cost = pd.read_csv(published / "longform" / "tables" / "throughput.csv").fillna({"condition": "none"})
    cells = cost.assign(
        cell=cost[["algo", "model", "variant", "granularity", "condition"]].agg("/".join, axis=1)
    )
    step = dict(zip(cells["cell"], cells["step_time_s"], strict=True))
    rows = [
        line.split(" | ") for line in text.split("Cost per step", 1)[1].splitlines() if line.startswith("| `")
    ]
    assert [r[0].strip("| `") for r in rows] == list(arms["arm"])
    for r, cell in zip(rows, arms["cell"], strict=True):
        assert r[1] == num(step[cell], 2), cell
    by_arm = {r[0].strip("| `"): r for r in rows}
    assert by_arm["tis_kl1e-2"][2] == "1.00×" and by_arm["bf16"][3] == "1.00×"
    with pytest.raises(QuoteError, match="no arm 'tis' to compare the cost with"):
        leaderboard_quote(published, "longform", reference="tis")
    shutil.copytree(published / "longform" / "tables", tmp_path / "longform" / "tables")
    cost[cost["variant"] != "bf16"].to_csv(tmp_path / "longform" / "tables" / "throughput.csv", index=False)
    with pytest.raises(
        QuoteError, match=r"throughput.csv: no row for the arms' cells \['grpo/story/bf16/none/none'\]"
    ):
        leaderboard_quote(tmp_path, "longform", reference="tis_kl1e-2")


def test_write_leaves_every_file_as_it_was_when_one_block_cannot_be_rendered(tmp_path, capsys):
    """`fp8rl quotes --write` renders every quoting file before it writes any: a stale block in README.md
    is not rewritten while a later file's block is unknown, and once that is fixed README.md is rewritten
    whole (atomically: no temp file left beside it)."""
    from fp8rl.cli import main

    published = tmp_path / "results" / "published"
    shutil.copytree(REPO / "results" / "published" / "smoke", published / "smoke")
    stale = "<!-- fp8rl:results smoke-verdicts -->\nstale\n<!-- /fp8rl:results -->\n"
    (tmp_path / "README.md").write_text(stale)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "smoke.md").write_text(
        "<!-- fp8rl:results no-such-block -->\nx\n<!-- /fp8rl:results -->\n"
    )
    assert main(["quotes", "--write", "--root", str(tmp_path)]) == 2
    assert "unknown block 'no-such-block'" in capsys.readouterr().err
    assert (tmp_path / "README.md").read_text() == stale
    (tmp_path / "docs" / "smoke.md").write_text("no quoted block\n")
    assert main(["quotes", "--write", "--root", str(tmp_path)]) == 0
    assert "stale" not in (tmp_path / "README.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md", "docs", "results"]
    assert main(["quotes", "--check", "--root", str(tmp_path)]) == 0
