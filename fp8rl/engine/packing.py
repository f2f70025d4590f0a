"""Training on real tokens only: a rollout batch's sequences packed end to end into one row.

The rollout batch is laid out padded: prompts left-padded to the widest prompt, responses right-padded
to the longest response, so a forward over it computes every layer on `B x (P + T)` positions, many of
them padding. `pack` lays the real tokens of each sequence (its prompt without the left padding, its
response up to and including `<eos>`) end to end into one row of `N` tokens, with position ids that
restart at 0 for each sequence (the positions the padded layout gives them too), as verl's
`use_remove_padding` does. Every linear layer, norm and MLP then runs on the `N` real tokens only, and
an FP8 operand's tensorwise amax is taken over real tokens only.

Attention is per sequence: `packed_sdpa`, registered with transformers' `AttentionInterface` as
`fp8rl_packed` and switched on for one forward by `packed_attention`, scatters each sequence's queries,
keys and values into a right-padded `[B, L_max]` layout, runs SDPA there with `is_causal=True` (a real
token sees only earlier tokens of its own sequence; the padding after a sequence is never seen by it, so
no mask is needed) and gathers the real tokens back. The language-model head runs only on the positions
that predict a response token (`logits_to_keep`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from fp8rl.engine.sampler import RolloutBatch

PACKED_ATTENTION = "fp8rl_packed"
LAYOUT_KWARG = "fp8rl_packing"  # the forward's keyword argument that carries the `SequenceLayout`


@dataclass(frozen=True)
class SequenceLayout:
    """Where each packed token sits in the right-padded per-sequence layout attention runs on (made
    once per forward by `pack`, read by every layer's attention)."""

    slots: torch.Tensor  # [N] each packed token's row in the flat [B * L_max] padded layout
    num_seqs: int
    max_len: int


@dataclass(frozen=True)
class PackedBatch:
    """A rollout batch's real tokens in one row, and where its response log-probs come from."""

    input_ids: torch.Tensor  # [1, N]
    position_ids: torch.Tensor  # [1, N] restarting at 0 for each sequence
    layout: SequenceLayout
    predict_index: torch.Tensor  # [R] packed positions whose logits predict a response token
    targets: torch.Tensor  # [R] the response token each of them predicts
    rows: torch.Tensor  # [R] its place in the batch's [B, T] response layout: row ...
    cols: torch.Tensor  # [R] ... and column


def pack(batch: RolloutBatch) -> PackedBatch:
    """The real tokens of `batch` packed into one row (module docstring). A response's mask must be 1
    on a prefix of its columns and its sequence must have a prompt token (what `generate` writes)."""
    real = batch.attention_mask.bool()
    lengths = real.sum(1)
    prompt_lengths = real[:, : batch.prompt_len].sum(1)
    if bool((prompt_lengths == 0).any()):
        raise ValueError("pack: a sequence has no prompt token (nothing predicts its first response token)")
    response = batch.response_mask > 0
    if not torch.equal(real[:, batch.prompt_len :], response):
        raise ValueError("pack: the attention mask over the responses is not the response mask")
    seq, _ = real.nonzero(as_tuple=True)
    pos = (real.cumsum(1) - 1)[real]
    offsets = lengths.cumsum(0) - lengths
    rows, cols = response.nonzero(as_tuple=True)
    if not torch.equal(cols, response.cumsum(1)[rows, cols] - 1):
        raise ValueError("pack: a response mask has a gap (real tokens after a masked one)")
    max_len = int(lengths.max())
    layout = SequenceLayout(seq * max_len + pos, len(lengths), max_len)
    return PackedBatch(
        input_ids=batch.input_ids[real][None],
        position_ids=pos[None],
        layout=layout,
        predict_index=offsets[rows] + prompt_lengths[rows] + cols - 1,
        targets=batch.responses[rows, cols],
        rows=rows,
        cols=cols,
    )


def packed_sdpa(module, query, key, value, attention_mask, *, scaling=None, dropout=0.0, **kwargs):
    """Attention over packed sequences (`[1, heads, N, head_dim]` each), per sequence, through
    transformers' SDPA on a right-padded `[B, heads, L_max, head_dim]` layout; returns
    `([1, N, heads, head_dim], None)` as `sdpa_attention_forward` does."""
    layout: SequenceLayout | None = kwargs.pop(LAYOUT_KWARG, None)
    if layout is None:
        raise ValueError(f"{PACKED_ATTENTION} attention needs the forward's `{LAYOUT_KWARG}` argument")
    if kwargs.get("sliding_window") is not None:
        raise ValueError(
            "packed training does not run sliding-window attention; set schedule.remove_padding: false"
        )

    def padded(x: torch.Tensor) -> torch.Tensor:  # [1, heads, N, d] -> [B, heads, L_max, d]
        flat = x.new_zeros(layout.num_seqs * layout.max_len, x.shape[1], x.shape[3])
        flat = flat.index_copy(0, layout.slots, x[0].transpose(0, 1))
        return flat.view(layout.num_seqs, layout.max_len, x.shape[1], x.shape[3]).transpose(1, 2)

    out, _ = sdpa_attention_forward(
        module, padded(query), padded(key), padded(value), None,
        dropout=dropout, scaling=scaling, is_causal=True,
    )  # fmt: skip
    # out: [B, L_max, heads, d]; each packed token's row back, in packed order
    return out.reshape(-1, *out.shape[2:]).index_select(0, layout.slots)[None], None


AttentionInterface.register(PACKED_ATTENTION, packed_sdpa)


@contextmanager
def packed_attention(model: torch.nn.Module) -> Iterator[None]:
    """Run `model`'s attention as `packed_sdpa` inside the block (its config's attention implementation
    is restored on leaving; a backward pass later reads nothing from it)."""
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = PACKED_ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = before
