"""FP8 training recipes: per GEMM of a linear layer, each operand's format and scaling granularity.

A linear `y = x Wᵀ` runs three GEMMs: `output` (x · Wᵀ), `grad_input` (dy · W) and `grad_weight`
(dyᵀ · x). Each operand is quantized *along that GEMM's contraction dim* (so a `rowwise` x gets one scale
per token in the output GEMM and one per feature in the grad-weight GEMM, as torchao's axiswise casts).

| recipe       | operands                                              | Transformer Engine          | torchao                          |
|--------------|-------------------------------------------------------|-----------------------------|----------------------------------|
| `tensorwise` | one scale per tensor, current amax; fmt (hybrid:      | `Float8CurrentScaling`      | `Float8LinearConfig.from_recipe_ |
|              | e4m3 x/W, e5m2 dy)                                    | (`fp8_format=HYBRID`)       | name("tensorwise")`              |
| `delayed`    | one scale per tensor from an amax history (length,    | `DelayedScaling(amax_history_len, amax_compute_algo)` | none (0.18: dynamic only) |
|              | max / most_recent); fmt as tensorwise                 |                             |                                  |
| `rowwise`    | e4m3 everywhere, one scale per row of the contraction | none (no TE/Megatron recipe)| `from_recipe_name("rowwise")`    |
|              | dim, scales rounded down to powers of two             |                             |                                  |
| `blockwise`  | e4m3; x and dy in 1×128 tiles, W in 128×128 tiles     | `Float8BlockScaling`        | prototype Float8BlockwiseLinear  |
|              | (DeepSeek-V3)                                         |                             |                                  |
| `mxfp8`      | e4m3, 1×32 tiles, E8M0 power-of-two scales (OCP MX)   | `MXFP8BlockScaling`         | prototype mx_formats MXFP8       |

`Recipe.te_recipe` / `Recipe.torchao_recipe` carry these names for the verl adapter and reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fp8rl.fp8.formats import RECIPE_FORMATS, FP8Format, get_format, resolve_format
from fp8rl.fp8.tiling import Granularity, Tiling
from fp8rl.vocabulary import AMAX_ALGOS
from fp8rl.vocabulary import GRANULARITIES as RECIPES


@dataclass(frozen=True)
class OperandSpec:
    """How one GEMM operand is quantized: format, function-level granularity, tile size, pow2 scales,
    and whether its scale comes from a delayed amax history (tensorwise only). The names are resolved
    once, when the spec is made, into `format` and `tiling` (an unknown one raises ValueError)."""

    fmt: str
    granularity: str
    block: int = 128
    pow2_scales: bool = False
    delayed: bool = False
    format: FP8Format = field(init=False, repr=False, compare=False)
    tiling: Tiling = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "format", get_format(self.fmt))
        object.__setattr__(self, "tiling", Tiling(self.granularity, self.block, self.pow2_scales))

    @property
    def axis_free(self) -> bool:
        """True when the quantized tensor does not depend on which dim is contracted (so a weight
        quantized for the forward GEMM can be reused, transposed, for grad-input)."""
        return self.tiling.granularity in (Granularity.TENSORWISE, Granularity.BLOCK2D)


@dataclass(frozen=True)
class GemmSpec:
    """The two operands `a` (rows of the output) and `b` (columns) of one GEMM `a · bᵀ`."""

    a: OperandSpec
    b: OperandSpec


@dataclass(frozen=True)
class Recipe:
    """Operand specs of the three GEMMs of a linear layer, plus delayed-scaling settings."""

    name: str
    output: GemmSpec  # a = input x, b = weight W
    grad_input: GemmSpec  # a = grad_output dy, b = weight Wᵀ
    grad_weight: GemmSpec  # a = grad_output dyᵀ, b = input xᵀ
    amax_history_len: int = 16
    amax_compute_algo: str = "max"
    te_recipe: str | None = None
    torchao_recipe: str | None = None
    notes: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def delayed(self) -> bool:
        return any(op.delayed for g in self.gemms() for op in (g.a, g.b))

    @property
    def scaled_mm_exact(self) -> bool:
        """True when every operand has a tensorwise or rowwise scale, the layouts `torch._scaled_mm`
        computes exactly; blockwise and MX are emulated (docs/architecture.md#emulation-on-cpu)."""
        return all(not op.tiling.tiled for g in self.gemms() for op in (g.a, g.b))

    def gemms(self) -> tuple[GemmSpec, GemmSpec, GemmSpec]:
        return (self.output, self.grad_input, self.grad_weight)


def _tensorwise(fmt: str, delayed: bool) -> tuple[GemmSpec, GemmSpec, GemmSpec]:
    fwd = resolve_format(fmt, "forward").name
    grad = resolve_format(fmt, "grad").name
    x = OperandSpec(fwd, "tensorwise", delayed=delayed)
    w = OperandSpec(fwd, "tensorwise", delayed=delayed)
    dy = OperandSpec(grad, "tensorwise", delayed=delayed)
    return GemmSpec(x, w), GemmSpec(dy, w), GemmSpec(dy, x)


def get_recipe(
    granularity: str,
    fmt: str = "hybrid",
    *,
    amax_history_len: int = 16,
    amax_compute_algo: str = "max",
) -> Recipe:
    """The recipe named `granularity` (docs/architecture.md#names). `fmt` applies to tensorwise/delayed; rowwise,
    blockwise and mxfp8 are e4m3 throughout (as torchao rowwise, DeepSeek-V3 and OCP MX)."""
    if granularity not in RECIPES:
        raise ValueError(f"granularity: unknown recipe {granularity!r}; allowed: {', '.join(RECIPES)}")
    if fmt not in RECIPE_FORMATS:
        raise ValueError(f"fmt: unknown FP8 format {fmt!r}; allowed: {', '.join(RECIPE_FORMATS)}")
    if not isinstance(amax_history_len, int) or amax_history_len <= 0:
        raise ValueError(f"amax_history_len: must be a positive int, got {amax_history_len!r}")
    if amax_compute_algo not in AMAX_ALGOS:
        raise ValueError(
            f"amax_compute_algo: unknown {amax_compute_algo!r}; allowed: {', '.join(AMAX_ALGOS)}"
        )
    delayed_kw = {"amax_history_len": amax_history_len, "amax_compute_algo": amax_compute_algo}
    if granularity == "tensorwise":
        return Recipe("tensorwise", *_tensorwise(fmt, False), **delayed_kw,
                      te_recipe="Float8CurrentScaling", torchao_recipe="tensorwise")  # fmt: skip
    if granularity == "delayed":
        return Recipe("delayed", *_tensorwise(fmt, True), **delayed_kw, te_recipe="DelayedScaling")
    if granularity == "rowwise":
        op = OperandSpec("e4m3", "rowwise", pow2_scales=True)
        return Recipe("rowwise", GemmSpec(op, op), GemmSpec(op, op), GemmSpec(op, op), **delayed_kw,
                      torchao_recipe="rowwise")  # fmt: skip
    if granularity == "blockwise":
        act = OperandSpec("e4m3", "block1d", block=128)
        w = OperandSpec("e4m3", "block2d", block=128)
        return Recipe("blockwise", GemmSpec(act, w), GemmSpec(act, w), GemmSpec(act, act), **delayed_kw,
                      te_recipe="Float8BlockScaling",
                      torchao_recipe="prototype.blockwise_fp8_training Float8BlockwiseLinear")  # fmt: skip
    op = OperandSpec("e4m3", "mx", block=32)
    return Recipe("mxfp8", GemmSpec(op, op), GemmSpec(op, op), GemmSpec(op, op), **delayed_kw,
                  te_recipe="MXFP8BlockScaling", torchao_recipe="prototype.mx_formats MXFP8")  # fmt: skip
