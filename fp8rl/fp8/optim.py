"""AdamW with FP8 moments and fp32 master weights: torchao's `AdamWFp8` or a blockwise-scaled one.

`build_adamw(..., fp8_state=False)` is plain `torch.optim.AdamW`. With `fp8_state=True`:

- `impl="torchao"`: `torchao.optim.AdamWFp8` (both moments e4m3 in blocks of 256 with one fp32 scale
  each; tensors under 4096 values or not divisible by 256 keep fp32 moments, as bitsandbytes). Its step
  is `torch.compile`d per parameter shape: on CPU the first step of a process costs ~20 s of compilation
  (inductor caches it on disk for later processes).
- `impl="blockwise"`: `BlockwiseFP8AdamW` below, eager: every parameter's moments flattened into
  1×`block` tiles (default 128), each tile e4m3 with its own fp32 scale (fp8rl.fp8.quantize `rowwise`
  over the tiles, torchao's amax→scale convention). The update is decoupled-weight-decay AdamW
  (Loshchilov & Hutter) with bias correction, computed in fp32 from the dequantized moments, which are
  re-quantized after the step. The second moment is stored as √v: a tile of v spans the *squared*
  dynamic range of its gradients, and e4m3's ~2^17 range (448 down to 2^-9) would flush small v to zero
  while their m survives, giving m/eps steps (torchao stores v itself). No compile, any parameter size.

Both round-trip through `state_dict()` / `load_state_dict()`.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from fp8rl.fp8.quantize import amplify_error, dequantize, quantize
from fp8rl.vocabulary import FP8_OPTIMIZERS as IMPLS


def _to_tiles(t: torch.Tensor, block: int) -> torch.Tensor:
    flat = t.reshape(-1).float()
    pad = (-flat.numel()) % block
    if pad:
        flat = torch.nn.functional.pad(flat, (0, pad))
    return flat.view(-1, block)


def _quantize_state(t: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """e4m3 codes `[nb, block]` and fp32 scales `[nb, 1]` of `t` flattened into 1×block tiles."""
    return quantize(_to_tiles(t, block), "e4m3", "rowwise")


def _dequantize_state(q: torch.Tensor, scale: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return dequantize(q, scale, "rowwise").reshape(-1)[: like.numel()].view_as(like)


class BlockwiseFP8AdamW(torch.optim.Optimizer):
    """AdamW whose `exp_avg` and `sqrt(exp_avg_sq)` live in e4m3 with one fp32 scale per 1×`block` tile."""

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        *,
        block: int = 128,
        noise_scale: float = 1.0,
    ) -> None:
        if lr <= 0:
            raise ValueError(f"lr: must be positive, got {lr}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"betas: each must be in [0, 1), got {betas}")
        if eps <= 0 or weight_decay < 0:
            raise ValueError(
                f"eps must be > 0 and weight_decay >= 0, got eps={eps}, weight_decay={weight_decay}"
            )
        if block <= 0:
            raise ValueError(f"block: must be positive, got {block}")
        if not noise_scale > 0:
            raise ValueError(f"noise_scale: must be > 0, got {noise_scale}")
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})
        self.block = block
        # The FP8 noise dose: with s != 1 the moments are kept as fp32 values m + s * (Q(m) - m) (scale 1)
        # instead of e4m3 codes (emulation; fp8rl.fp8.quantize.amplify_error).
        self.noise_scale = float(noise_scale)

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise ValueError("BlockwiseFP8AdamW does not support sparse gradients")
                state = self.state[p]
                g = p.grad.float()
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    m = torch.zeros_like(g)
                    v = torch.zeros_like(g)
                else:
                    m = _dequantize_state(state["exp_avg"], state["exp_avg_scale"], g)
                    v = _dequantize_state(state["exp_avg_sq"], state["exp_avg_sq_scale"], g).square_()
                state["step"] += 1
                t = state["step"].item()
                m.lerp_(g, 1.0 - b1)
                v.mul_(b2).addcmul_(g, g, value=1.0 - b2)
                if wd:
                    p.mul_(1.0 - lr * wd)
                denom = (v / (1.0 - b2**t)).sqrt_().add_(eps)
                p.addcdiv_((m / (1.0 - b1**t)).to(p.dtype), denom.to(p.dtype), value=-lr)
                state["exp_avg"], state["exp_avg_scale"] = self._store(m)
                state["exp_avg_sq"], state["exp_avg_sq_scale"] = self._store(v.sqrt_(), nonnegative=True)
        return loss

    def _store(self, t: torch.Tensor, *, nonnegative: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(codes, scales) of a moment: e4m3 tiles, or with a noise dose s != 1 the fp32 values
        t + s * (Q(t) - t) with unit scales (clamped at 0 for sqrt(v), which cannot be negative)."""
        q, scale = _quantize_state(t, self.block)
        if self.noise_scale == 1.0:
            return q, scale
        noisy = amplify_error(t, _dequantize_state(q, scale, t), self.noise_scale)
        if nonnegative:
            noisy = noisy.clamp_(min=0.0)
        tiles = _to_tiles(noisy, self.block)
        return tiles, torch.ones(tiles.shape[0], 1, dtype=torch.float32, device=tiles.device)

    def load_state_dict(self, state_dict: dict) -> None:
        """As `Optimizer.load_state_dict`, which casts floating state to the parameter's dtype; the e4m3
        codes are cast back (exactly: they are e4m3 values)."""
        super().load_state_dict(state_dict)
        for state in self.state.values():
            for key in ("exp_avg", "exp_avg_sq"):
                if key in state and self.noise_scale == 1.0:
                    state[key] = state[key].to(torch.float8_e4m3fn)
            for key in ("exp_avg_scale", "exp_avg_sq_scale", "step"):
                if key in state:
                    state[key] = state[key].to(torch.float32)


def build_adamw(
    params: Iterable,
    *,
    lr: float,
    weight_decay: float = 0.0,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    fp8_state: bool,
    impl: str = "torchao",
    noise_scale: float = 1.0,
) -> torch.optim.Optimizer:
    """AdamW for the trainer: fp32 moments, or FP8 moments through `impl` (module docstring), with the
    FP8 noise dose `noise_scale` (blockwise only)."""
    if impl not in IMPLS:
        raise ValueError(f"impl: unknown FP8 AdamW implementation {impl!r}; allowed: {', '.join(IMPLS)}")
    betas = (float(betas[0]), float(betas[1]))
    if not fp8_state:
        return torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    if impl == "blockwise":
        return BlockwiseFP8AdamW(
            params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, noise_scale=noise_scale
        )
    if noise_scale != 1.0:
        raise ValueError("noise_scale != 1 needs impl='blockwise' (torchao's AdamWFp8 has no noise dose)")
    try:
        from torchao.optim import AdamWFp8
    except ImportError as exc:  # pragma: no cover - torchao is a dependency
        raise RuntimeError(
            "impl 'torchao' needs torchao (pip install torchao); or use impl='blockwise'"
        ) from exc
    return AdamWFp8(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
