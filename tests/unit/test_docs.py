"""The repository documents itself: README.md and docs/*.md link only to files inside the repository,
every `#anchor` they use names a heading of its target, and nothing points to the design notes outside
it (a user who clones the project does not have them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# The external design notes' folder and file name, spelled so that this file does not contain them.
EXTERNAL = ("../" + "shared", "DESIGN" + ".md")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# The headings other text (and the code's docstrings) may link to: keep them stable.
ARCHITECTURE_ANCHORS = {
    "names", "fp8-numerics-contract", "rl-objectives-contract", "calibrated-clipping", "metrics",
    "run-directory", "emulation-on-cpu", "pieces-and-layering", "data-flow", "tiers",
}  # fmt: skip


def anchors(md: Path) -> set[str]:
    """GitHub's heading slugs: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for line in md.read_text().splitlines():
        if m := re.match(r"#{1,6}\s+(.*)", line):
            out.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_links_stay_inside_the_repository_and_resolve(doc):
    text = doc.read_text()
    assert not any(e in text for e in EXTERNAL), f"{doc.name} refers to the external design notes"
    for target in LINK.findall(text):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        assert dest.is_relative_to(REPO), f"{doc.name}: link {target} leaves the repository"
        assert dest.exists(), f"{doc.name}: link {target} points to a missing file"
        if anchor:
            assert anchor in anchors(dest), f"{doc.name}: link {target}: no such heading in {dest.name}"


def test_architecture_keeps_its_section_anchors():
    assert anchors(REPO / "docs" / "architecture.md") >= ARCHITECTURE_ANCHORS


def test_code_cites_the_repository_docs_not_the_external_notes():
    """Docstrings and comments point to docs/architecture.md anchors that exist, never to the external
    design notes."""
    import subprocess

    files = subprocess.run(
        ["git", "ls-files", "fp8rl", "workflows", "config", "tests", "benchmarks", "scripts", "Snakefile"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    arch = anchors(REPO / "docs" / "architecture.md")
    for name in files:
        if name == "tests/unit/test_docs.py" or not (REPO / name).is_file():
            continue
        text = (REPO / name).read_text(errors="replace")
        assert not any(e in text for e in EXTERNAL) and "§" not in text, name
        for anchor in re.findall(r"docs/architecture\.md#([\w-]+)", text):
            assert anchor in arch, f"{name}: docs/architecture.md#{anchor} is not a heading"


def test_interfaces_lists_every_report_output():
    """docs/interfaces.md's path table names every table and figure `fp8rl report` can write: each name of
    fp8rl.report.paths, as `{R}/tables/NAME.{csv,md}` or `{R}/plots/NAME.{png,svg}` (a brace list of names
    counts for each)."""
    from fp8rl.report import paths

    text = (REPO / "docs" / "interfaces.md").read_text()
    documented: dict[str, set[str]] = {"tables": set(), "plots": set()}
    for kind, names in re.findall(r"`\{R\}/(tables|plots)/(\{[\w,]+\}|\w+)\.\{", text):
        documented[kind].update(names.strip("{}").split(","))
    tables = {n for k, v in vars(paths).items() if k.endswith("_TABLES") or k == "TABLES" for n in v}
    plots = {n for k, v in vars(paths).items() if k.endswith("_PLOTS") or k == "PLOTS" for n in v}
    assert tables and plots
    assert tables - documented["tables"] == set(), "tables missing from docs/interfaces.md"
    assert plots - documented["plots"] == set(), "figures missing from docs/interfaces.md"
    assert documented["tables"] - tables == set() and documented["plots"] - plots == set(), (
        "docs/interfaces.md names report outputs fp8rl.report.paths does not write"
    )


# a repository file named in prose: a top-level folder of the project, then a path ending in a source or doc
# suffix, not inside a longer path (results/benchmarks/NAME.json is an output, not a repository file)
REPO_FILE = re.compile(
    r"(?<![\w/{}.\-])((?:tests|benchmarks|scripts|docs|config|fp8rl|workflows|containers|evals)/"
    r"[\w./-]+\.(?:py|md|yaml|sh|smk|def|txt|toml))\b"
)
# names that stand for a file the reader writes (docs/architecture.md: a tier's config, a new correction)
EXAMPLE_FILES = {"config/X.yaml", "fp8rl/rl/corrections/my_fix.py"}


def test_files_the_code_and_docs_name_exist():
    """A file a docstring, comment or doc page names by its repository path exists: a renamed test or
    benchmark leaves no reader looking for the old name."""
    import subprocess

    files = subprocess.run(
        ["git", "ls-files", "fp8rl", "workflows", "benchmarks", "scripts", "config", "Snakefile", "Makefile",
         "README.md", "CONTRIBUTING.md", "docs"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    missing = [
        f"{name}: {path}"
        for name in files
        if (REPO / name).is_file()
        for path in sorted(set(REPO_FILE.findall((REPO / name).read_text(errors="replace"))))
        if not (REPO / path).exists() and path not in EXAMPLE_FILES
    ]
    assert missing == []


def test_interfaces_lists_every_environment_variable():
    """Every `FP8RL_*` variable the package reads (a string literal in fp8rl/) has a row in
    docs/interfaces.md's "Environment variables" table, and the table names none the package does not."""
    code = "\n".join(p.read_text() for p in (REPO / "fp8rl").rglob("*.py"))
    read = set(re.findall(r"[\"'](FP8RL_[A-Z0-9_]+)[\"']", code))
    section = (REPO / "docs" / "interfaces.md").read_text().split("## Environment variables", 1)[1]
    documented = set(re.findall(r"^\| `(FP8RL_[A-Z0-9_]+)` \|", section, flags=re.M))
    assert read, "no FP8RL_ variable found in fp8rl/"
    assert read - documented == set(), "variables without a row in docs/interfaces.md"
    assert documented - read == set(), "rows for variables fp8rl does not read"
