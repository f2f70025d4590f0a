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
