"""The sampler's token draw: `inverse_cdf` against `multinomial` (fp8rl.engine.token_draw), side by side.

Per shape (vocabulary V, new tokens T) and thread count: a Llama of the longform testbed's shape (4
layers, hidden 128, intermediate 344, 4 heads) samples 64 rows (8 prompts x 8 samples of 10-31 prompt
tokens) with `generate`, every row running to T tokens (no end-of-sequence token), once with each draw,
the two interleaved `--repeats` times, medians kept; and the draw alone on one step's [64, V]
probabilities, timed over `--draw-calls` calls. Printed: seconds per `generate` and microseconds per draw
with each, and the ratios. The two draws give other tokens for a seed (the same distribution), so
nothing is compared bit for bit; each draw must give the same tokens on every repeat (checked). Run it
in the numerics mode to measure (default `reproducible`).

    .venv/bin/python benchmarks/sampler_draw.py [--vocab 64 4096 32768] [--new-tokens 32 96] \\
        [--threads 1 2] [--repeats 3] [--json results/published/benchmarks/sampler_draw.json]
"""

from __future__ import annotations  # noqa: I001  (fp8rl before torch: the numerics pin)

import argparse
import hashlib
import itertools
import os
import statistics
import time
from pathlib import Path

import fp8rl  # noqa: F401  (applies the numerics mode before torch runs a kernel)
import torch

from fp8rl import numerics
from fp8rl.engine.sampler import generate
from fp8rl.engine.token_draw import DRAWS, draw_tokens
from sampler_cache import llama

ROWS = 64
ARMS = ("multinomial", "inverse_cdf")


def _generate(model, prompts, new_tokens: int, draw: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = generate(model, prompts, max_new_tokens=new_tokens, eos_id=-1, pad_id=0, temperature=1.0,
                   generator=torch.Generator().manual_seed(0), draw=draw)  # fmt: skip
    seconds = time.perf_counter() - t0
    return seconds, hashlib.sha256(out.input_ids.numpy().tobytes()).hexdigest()


def _draw_us(probs: torch.Tensor, draw: str, calls: int) -> float:
    g = torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    for _ in range(calls):
        draw_tokens(probs, g, draw)
    return (time.perf_counter() - t0) / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, nargs="+", default=[64, 4096, 32768])
    ap.add_argument("--new-tokens", type=int, nargs="+", default=[32, 96])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--draw-calls", type=int, default=50)
    ap.add_argument("--json", type=Path, help="write the record here (atomically)")
    args = ap.parse_args(argv)
    assert set(ARMS) == set(DRAWS), "a new draw needs an arm here"
    from fp8rl.io import atomic_write_json
    from fp8rl.provenance import provenance

    load_start, measured = os.getloadavg(), provenance()
    print(f"numerics: {numerics.active_mode()}; {ROWS} rows, medians of {args.repeats} interleaved repeats")
    print(f"{'V':>6} {'T':>3} {'thr':>3} {'gen mult s':>10} {'gen icdf s':>10} {'ratio':>6} "
          f"{'draw mult us':>12} {'draw icdf us':>12} {'ratio':>6}")  # fmt: skip
    prompts = [[5 + (i * 7 + j) % 50 for j in range(10 + 3 * i)] for i in range(8) for _ in range(8)]
    shapes, stable = [], True
    for vocab, new_tokens, threads in itertools.product(args.vocab, args.new_tokens, args.threads):
        torch.set_num_threads(threads)
        model = llama(vocab, intermediate=344, positions=160)  # the testbed's shape
        probs = torch.softmax(torch.randn(ROWS, vocab, generator=torch.Generator().manual_seed(1)) * 2, -1)
        for draw in ARMS:  # warm-up
            _generate(model, prompts, new_tokens, draw)
        gen: dict[str, list[float]] = {a: [] for a in ARMS}
        op: dict[str, list[float]] = {a: [] for a in ARMS}
        digests: dict[str, set[str]] = {a: set() for a in ARMS}
        for _ in range(args.repeats):
            for draw in ARMS:
                seconds, digest = _generate(model, prompts, new_tokens, draw)
                gen[draw].append(seconds)
                digests[draw].add(digest)
                op[draw].append(_draw_us(probs, draw, args.draw_calls))
        stable &= all(len(d) == 1 for d in digests.values())
        row = {"vocab": vocab, "new_tokens": new_tokens, "threads": threads,
               "generate_s": {a: statistics.median(gen[a]) for a in ARMS},
               "draw_us": {a: statistics.median(op[a]) for a in ARMS}}  # fmt: skip
        g, d = row["generate_s"], row["draw_us"]
        row["generate_ratio"] = g["multinomial"] / g["inverse_cdf"]
        row["draw_ratio"] = d["multinomial"] / d["inverse_cdf"]
        shapes.append(row)
        print(f"{vocab:6d} {new_tokens:3d} {threads:3d} {g['multinomial']:10.3f} {g['inverse_cdf']:10.3f} "
              f"{row['generate_ratio']:5.2f}x {d['multinomial']:12.0f} {d['inverse_cdf']:12.0f} "
              f"{row['draw_ratio']:5.1f}x", flush=True)  # fmt: skip
    if not stable:
        print("a draw gave other tokens on another repeat of the same seed")
    if args.json:
        record = {"benchmark": "sampler_draw", "rows": ROWS, "repeats": args.repeats,
                  "draw_calls": args.draw_calls, "numerics": numerics.active_mode(), "shapes": shapes,
                  "same_tokens_every_repeat": stable, "load_average_start": load_start,
                  "load_average_end": os.getloadavg(), "provenance": measured}  # fmt: skip
        args.json.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(args.json, record, indent=1)
    return 0 if stable else 1


if __name__ == "__main__":
    raise SystemExit(main())
