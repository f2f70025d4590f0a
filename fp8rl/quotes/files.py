"""The markdown files that quote result figures, and the command behind `fp8rl quotes`.

A quoted block sits between `<!-- fp8rl:results NAME -->` and `<!-- /fp8rl:results -->` in a markdown
file; `fp8rl quotes --write` regenerates every block from `results/published/{tier}/tables/*.csv` (and
the benchmark records under `results/published/benchmarks/`), and `fp8rl quotes --check` (run by the
test suite) fails naming the file and block when one differs from what the tables give; both first
check every publication against its `report.json` manifest, so an edited table is refused, never
quoted. So a figure in the text cannot drift from its table, and a re-publication updates the text in
one command. Words that depend on a figure ("the interval excludes 0") are generated with it; prose
outside the blocks quotes no result figures (tests/unit/report/test_quotes.py checks both).

Each block is a generator over one kind of published source, registered under its NAME where it is
defined (`@quoted_block(NAME, tier=...)`: one registry and the sources in fp8rl.quotes.registry, the
formats in fp8rl.report.formats): the excess-clipping blocks of the smoke and mechanism tiers in
fp8rl.quotes.clipping, the study tiers' and testbeds' in fp8rl.quotes.studies, the measurements' (speed,
run times, kernel paths) in fp8rl.quotes.benchmarks and the longform testbed's step in
fp8rl.quotes.step, the real stacks' public figures in fp8rl.quotes.real_stacks (`BLOCK_MODULES`).
"""

from __future__ import annotations

import re
from pathlib import Path

from fp8rl.quotes import benchmarks, clipping, real_stacks, step, studies
from fp8rl.quotes.registry import BLOCKS, QuoteError

BEGIN = re.compile(r"<!-- fp8rl:results (?P<name>[a-z0-9-]+) -->\n")
END = "<!-- /fp8rl:results -->"
# The markdown files that hold quoted blocks, relative to the repository root.
QUOTING_FILES = (
    "README.md", "docs/smoke.md", "docs/learn.md", "docs/clipping.md", "docs/mechanism.md", "docs/numerics.md",
    "docs/performance.md", "docs/mismatch.md", "docs/longform.md",
)  # fmt: skip
# The modules whose functions register quoted blocks (`@quoted_block(NAME)`, into
# fp8rl.quotes.registry.BLOCKS): importing them registers their blocks; a new block is one decorated
# function (or one more decorator on an existing generator) in one of them.
BLOCK_MODULES = (benchmarks, clipping, step, studies, real_stacks)


# ------------------------------------------------------------------------------------------ files


def render(text: str, published: Path, source: str = "") -> str:
    """`text` with every quoted block regenerated from the tables under `published`."""
    out, pos = [], 0
    for m in BEGIN.finditer(text):
        end = text.find(END, m.end())
        if end < 0:
            raise QuoteError(f"{source}: block {m['name']!r} has no closing {END}")
        if m["name"] not in BLOCKS:
            raise QuoteError(f"{source}: unknown block {m['name']!r}; known: {', '.join(sorted(BLOCKS))}")
        out += [text[pos : m.end()], BLOCKS[m["name"]](published).rstrip("\n") + "\n"]
        pos = end
    return "".join(out) + text[pos:]


def verify_publications(published: Path) -> None:
    """QuoteError naming the first publication under `published` (a folder with a `report.json` or a
    `tables/`) that is not what its manifest records (fp8rl.publication.publish.verify_publication)."""
    from fp8rl.publication.publish import PublishError, verify_publication

    for tier in (
        sorted(p for p in Path(published).iterdir() if p.is_dir()) if Path(published).is_dir() else []
    ):
        if (tier / "report.json").exists() or (tier / "tables").exists():
            try:
                verify_publication(tier)
            except PublishError as exc:
                raise QuoteError(str(exc)) from None


def stale_blocks(root: Path, published: Path) -> list[str]:
    """`file: block` for every quoted block whose text differs from what the tables give, after checking
    every publication against its manifest (`verify_publications`)."""
    verify_publications(published)
    stale = []
    for name in QUOTING_FILES:
        path = root / name
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        new = render(text, published, name)
        if new != text:
            old_blocks = {m["name"]: text[m.end() : text.find(END, m.end())] for m in BEGIN.finditer(text)}
            new_blocks = {m["name"]: new[m.end() : new.find(END, m.end())] for m in BEGIN.finditer(new)}
            stale += [f"{name}: {b}" for b in old_blocks if old_blocks[b] != new_blocks.get(b)]
    return stale
