"""The sampler's KV cache written in place (fp8rl.engine.kv_reserve) against `transformers`' growing one.

Per shape (vocabulary V, new tokens T; 64 rows = 8 prompts x 8 samples of 10-31 prompt tokens, a
4-layer x 128-hidden Llama) and thread count, the rollout copies the trainer samples with (bf16
emulation, FP8 tensorwise, FP8 tensorwise with an FP8 KV cache) each run `generate` `--repeats` times
with each cache, interleaved, medians kept. Printed: seconds per `generate` with the growing cache and
the reserved one, their ratio, and whether the two gave the same tokens and log-probs bit for bit (they
must: `same` is checked on every repeat). Run it in the numerics mode to measure (default
`reproducible`; `FP8RL_NUMERICS=fast` for the machine's kernels).

    .venv/bin/python benchmarks/sampler_cache.py [--vocab 64 4096] [--new-tokens 16 48] [--threads 1 2] [--repeats 3]
"""

from __future__ import annotations  # noqa: I001  (fp8rl before torch: the numerics pin)

import argparse
import hashlib
import itertools
import statistics
import time

import fp8rl  # noqa: F401  (applies the numerics mode before torch runs a kernel)
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from fp8rl import numerics
from fp8rl.engine.sampler import generate
from fp8rl.fp8 import get_recipe
from fp8rl.fp8.rollout_copy import make_rollout_policy

ROLLOUTS = ("bf16", "fp8", "fp8_kv")


def llama(vocab: int, intermediate: int = 384, positions: int = 256) -> torch.nn.Module:
    """A seeded 4-layer x 128-hidden Llama over `vocab` tokens, in eval mode."""
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=128, intermediate_size=intermediate, num_hidden_layers=4,
                      num_attention_heads=4, max_position_embeddings=positions, bos_token_id=1, eos_token_id=2,
                      pad_token_id=0, tie_word_embeddings=False, attn_implementation="sdpa")  # fmt: skip
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval()


def _rollout(kind: str, model: torch.nn.Module) -> torch.nn.Module:
    if kind == "bf16":
        return make_rollout_policy(model, None)
    return make_rollout_policy(model, get_recipe("tensorwise"), kv_cache_fp8=kind == "fp8_kv")


def _once(policy, prompts, new_tokens: int, reserve: bool) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = generate(policy, prompts, max_new_tokens=new_tokens, eos_id=2, pad_id=0, temperature=1.0,
                   generator=torch.Generator().manual_seed(0), reserve_cache=reserve)  # fmt: skip
    seconds = time.perf_counter() - t0
    digest = hashlib.sha256(out.input_ids.numpy().tobytes() + out.log_probs.numpy().tobytes()).hexdigest()
    return seconds, digest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, nargs="+", default=[64, 4096])
    ap.add_argument("--new-tokens", type=int, nargs="+", default=[16, 48])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    print(f"numerics: {numerics.active_mode()}; seconds per generate, 64 rows, medians of {args.repeats}")
    print(f"{'rollout':8} {'V':>5} {'T':>3} {'thr':>3} {'grown':>8} {'reserved':>8} {'ratio':>6}  same")
    prompts = [[5 + (i * 7 + j) % 50 for j in range(10 + 3 * i)] for i in range(8) for _ in range(8)]
    all_same = True
    for vocab, new_tokens, threads in itertools.product(args.vocab, args.new_tokens, args.threads):
        torch.set_num_threads(threads)
        model = llama(vocab)
        for kind in ROLLOUTS:
            policy = _rollout(kind, model)
            _once(policy, prompts, new_tokens, True)  # warm-up
            times: dict[bool, list[float]] = {False: [], True: []}
            digests: set[str] = set()
            for _ in range(args.repeats):
                for reserve in (False, True):
                    seconds, digest = _once(policy, prompts, new_tokens, reserve)
                    times[reserve].append(seconds)
                    digests.add(digest)
            grown, reserved = (statistics.median(times[r]) for r in (False, True))
            same = len(digests) == 1
            all_same &= same
            print(f"{kind:8} {vocab:5d} {new_tokens:3d} {threads:3d} {grown:8.3f} {reserved:8.3f} "
                  f"{grown / reserved:5.2f}x  {'yes' if same else 'NO'}", flush=True)  # fmt: skip
    return 0 if all_same else 1


if __name__ == "__main__":
    raise SystemExit(main())
