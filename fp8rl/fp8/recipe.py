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

Each recipe is one module of fp8rl/fp8/recipes/, named after it, that registers its builder here with
`@register_recipe("<name>")`, as verl registers a policy loss; `get_recipe` looks the name up and never
grows an if/elif. fp8rl.vocabulary finds a new module by its file name (GRANULARITIES), so the config's
`matrix.granularities`, the run ids and the DAG take it with no other edit (CONTRIBUTING.md).
"""

from __future__ import annotations

from collections.abc import Callable
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


# (recipe-level format, delayed-scaling settings: amax_history_len, amax_compute_algo) -> the Recipe
RecipeBuilder = Callable[[str, dict], Recipe]
BUILDERS: dict[str, RecipeBuilder] = {}


def register_recipe(name: str) -> Callable[[RecipeBuilder], RecipeBuilder]:
    """Decorator: register `builder(fmt, delayed_kw) -> Recipe` under `name` (its module's name, which
    vocabulary `GRANULARITIES` then holds); a name outside it, or registered twice, is a ValueError."""

    def deco(builder: RecipeBuilder) -> RecipeBuilder:
        if name not in RECIPES:
            raise ValueError(
                f"register_recipe: {name!r} is not in fp8rl.vocabulary.GRANULARITIES; a recipe module "
                "registers its own file's name (fp8rl/fp8/recipes/<name>.py)"
            )
        if name in BUILDERS:
            raise ValueError(f"register_recipe: {name!r} is registered twice")
        BUILDERS[name] = builder
        return builder

    return deco


def tensorwise_gemms(fmt: str, delayed: bool) -> tuple[GemmSpec, GemmSpec, GemmSpec]:
    """The three GEMMs with one scale per tensor: `fmt`'s forward format for x and W, its gradient
    format for dy (hybrid: e4m3 and e5m2), each scale from the current amax or a `delayed` history."""
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
    if granularity not in BUILDERS:
        raise ValueError(f"granularity: recipe {granularity!r} has no builder registered (fp8rl.fp8.recipes)")
    delayed_kw = {"amax_history_len": amax_history_len, "amax_compute_algo": amax_compute_algo}
    return BUILDERS[granularity](fmt, delayed_kw)
