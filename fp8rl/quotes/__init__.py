"""The figures README.md and docs/ quote, generated from the published tables and benchmark records
and checked against them (`fp8rl quotes --write` / `--check`): fp8rl.quotes.files finds the blocks in
the markdown files, fp8rl.quotes.registry holds the block registry and the sources a block reads, and
one module per topic registers its blocks (benchmarks, clipping, step, studies, real_stacks). It reads
fp8rl.report (the tables' own views and formats); the report never imports it.
"""
