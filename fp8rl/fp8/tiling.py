"""How a tensor is cut into the groups that share one FP8 scale: the granularity, resolved once.

`Tiling(granularity, block=128, pow2_scales=False)` turns the granularity name into a `Granularity`
and checks the block once (torchao's `ScalingGranularity` enum in `Float8LinearConfig`), so the
quantize helpers branch on an enum instead of re-checking a string on every call. An `OperandSpec`
(fp8rl.fp8.recipe) makes its tiling when the recipe is built; `quantize`/`fake_quantize` make one from
their string arguments.

Layouts (scale shapes as fp8rl.fp8.quantize states them):
- `tensorwise`: the whole tensor; `rowwise`: each row (amax over the last dim).
- `block1d`: 1×`block` tiles along the last dim; `mx`: 1×32 tiles (the OCP MX spec fixes 32, so a
  given `block` is replaced by 32); `block2d`: `block`×`block` tiles of a 2-D tensor.
Tiled layouts zero-pad shapes the block does not divide (`tiles`) and crop back afterwards (`untile`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fp8rl.fp8.formats import check_float


class Granularity(enum.Enum):
    """The function-level scaling granularities."""

    TENSORWISE = "tensorwise"
    ROWWISE = "rowwise"
    BLOCK1D = "block1d"
    BLOCK2D = "block2d"
    MX = "mx"


# Function-level granularities (how one tensor is tiled), not the recipe names of fp8rl.vocabulary.
TILE_GRANULARITIES = tuple(g.value for g in Granularity)
MX_BLOCK = 32  # OCP MX v1.0: 32 elements share one E8M0 scale


@dataclass(frozen=True)
class Tiling:
    """An operand's resolved granularity, its tile edge `block` (32 for `mx`; unused by tensorwise and
    rowwise) and whether scales are rounded down to powers of two. `granularity` may be given by name;
    an unknown name or a block that is not a positive int raises ValueError naming the argument."""

    granularity: Granularity
    block: int = 128
    pow2_scales: bool = False

    def __post_init__(self) -> None:
        g = self.granularity
        if not isinstance(g, Granularity):
            try:
                g = Granularity(g)
            except ValueError:
                raise ValueError(
                    f"granularity: unknown {g!r}; allowed: {', '.join(TILE_GRANULARITIES)}"
                ) from None
            object.__setattr__(self, "granularity", g)
        if not isinstance(self.block, int) or self.block <= 0:
            raise ValueError(f"block: must be a positive int, got {self.block!r}")
        if g is Granularity.MX:
            object.__setattr__(self, "block", MX_BLOCK)
        object.__setattr__(self, "pow2_scales", bool(self.pow2_scales))

    @property
    def tiled(self) -> bool:
        """True for the layouts that reshape into tiles (block1d, block2d, mx)."""
        return self.granularity in (Granularity.BLOCK1D, Granularity.BLOCK2D, Granularity.MX)

    def check(self, x: torch.Tensor, name: str = "x") -> None:
        """ValueError naming `name` unless `x` is a float tensor this layout can cut."""
        check_float(x, name)
        g = self.granularity
        if g is Granularity.BLOCK2D and x.dim() != 2:
            raise ValueError(f"{name}: granularity 'block2d' needs a 2-D tensor, got shape {tuple(x.shape)}")
        if g is not Granularity.TENSORWISE and g is not Granularity.BLOCK2D and x.dim() < 1:
            raise ValueError(f"{name}: granularity {g.value!r} needs at least 1 dim, got a scalar")

    def tiles(self, x: torch.Tensor) -> torch.Tensor:
        """A zero-padded view of `x` whose amax over the tile dims gives one value per scale:
        block1d/mx → `[..., nb, block]`; block2d → `[mb, block, nb, block]`."""
        b = self.block
        if self.granularity is Granularity.BLOCK2D:
            m, n = x.shape
            pm, pn = (-m) % b, (-n) % b
            if pm or pn:
                x = F.pad(x, (0, pn, 0, pm))
            return x.reshape(x.shape[0] // b, b, x.shape[1] // b, b)
        pad = (-x.shape[-1]) % b
        if pad:
            x = F.pad(x, (0, pad))
        return x.reshape(*x.shape[:-1], x.shape[-1] // b, b)

    def untile(self, t: torch.Tensor, shape: torch.Size) -> torch.Tensor:
        """Inverse of `tiles`: back to the padded layout, cropped to `shape`."""
        if self.granularity is Granularity.BLOCK2D:
            t = t.reshape(t.shape[0] * t.shape[1], t.shape[2] * t.shape[3])
            return t[: shape[0], : shape[1]]
        t = t.reshape(*t.shape[:-2], t.shape[-2] * t.shape[-1])
        return t[..., : shape[-1]]

    def tile_scale(self, scale: torch.Tensor) -> torch.Tensor:
        """`scale` shaped to broadcast against the `tiles` view."""
        if self.granularity is Granularity.BLOCK2D:
            return scale[:, None, :, None]
        return scale.unsqueeze(-1)


TENSORWISE = Tiling(Granularity.TENSORWISE)
