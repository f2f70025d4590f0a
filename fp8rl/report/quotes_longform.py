"""The quoted blocks of the longform testbed: its bf16-only acceptance (`tables/acceptance.csv`,
fp8rl.report.acceptance) from the tier's publication."""

from __future__ import annotations

from pathlib import Path

from fp8rl.report.quote_format import interval, markdown_table, num, published_table, quoted_block


@quoted_block("longform-acceptance")
def longform_acceptance(published: Path) -> str:
    """Per bf16 run: step 1's entropy and response length, whether a detector flagged it, the held-out
    endpoint of its base and final checkpoint and the rise; then the mean rise over the bases with its
    interval, and the verdict of the report's notes."""
    table = published_table(published, "longform", "acceptance")
    runs, mean = table.iloc[:-1], table.iloc[-1]
    rows = [
        [r["run_id"], num(r["entropy_step1"], 3), num(r["resp_len_step1"], 1),
         r["flagged"] if isinstance(r["flagged"], str) and r["flagged"] else "no",
         num(r["base_endpoint"], 3), num(r["final_endpoint"], 3), num(r["rise"], 3, sign=True)]
        for r in runs.to_dict("records")
    ]  # fmt: skip
    header = ["bf16 run", "entropy, step 1 (nats/token)", "response, step 1 (tokens)", "flagged",
              "held-out, base", "held-out, final", "rise"]  # fmt: skip
    notes = (published / "longform" / "tables" / "acceptance.md").read_text(encoding="utf-8")
    verdict = next(line for line in notes.splitlines() if "ccepted**" in line).removeprefix("- ")
    return (
        markdown_table(header, rows)
        + f"\n\nMean rise over the {len(runs)} bases {interval(mean['rise'], mean['low'], mean['high'], 3)} "
        + f"(95 % t-interval; held-out sampled reward, the bf16 sampler). {verdict}"
    )
