"""The reference GRPO/DAPO trainer of the smoke and cpu tiers: char tokenizer, tiny Llama model,
arithmetic tasks, SFT warm start, KV-cached rollout sampler, the training loop, kill-safe checkpoints.

Modules: `tokenizer` (the char tokenizer), `bpe_tokenizer` and `filler` (the longform testbed's subword
tokenizer and the filler text it is trained on), `model`, `tasks`, `word_problems` and `longform` (the
generated word-problem tasks), `data` (`fp8rl data`), `sft` (`fp8rl sft`), `sampler`,
`scoring`, `packing` (the forward on real tokens only), `collect` (one step's rollouts), `precision`
(variant → fp8rl.fp8), `checkpoint`, `shadow`, `phase_timer` (per-phase time and tokens),
`policy_accuracy` (quick in-process accuracy), `trainer` (`fp8rl train`). Heavy imports happen per
module, so `import fp8rl.engine` is cheap. The trainer runs on CPU (the smoke tier; FP8 emulated,
docs/architecture.md#emulation-on-cpu).
"""
