"""Reproducible mode's matrix products: every CPU GEMM through one pinned OpenBLAS kernel.

MKL's COMPATIBLE branch (fp8rl.numerics) is the one branch MKL runs alike on Intel and AMD, and its fp32
GEMMs are slow (SSE2). OpenBLAS names its kernels by core type and runs the one it is told to run on any
CPU that has the instructions: `OPENBLAS_CORETYPE=Haswell` selects the AVX2 + FMA kernels, which every
x86-64 machine of the project has (Intel or AMD; OpenBLAS's Zen target is the same code). Measured on an
Intel Xeon (AVX-512, AMX), numpy's bundled OpenBLAS 0.3.31: the Haswell kernel's fp32 GEMMs run 2.3-2.8x
faster than MKL's COMPATIBLE branch and as fast as MKL's Intel-only AVX2 branch
(`benchmarks/gemm_paths.py`); the cache sizes OpenBLAS reads (`OPENBLAS_L2_SIZE`) do not change its
results; the thread count does between 1 and 2 threads (not between 2, 3 and 8), so, as with MKL's
conditional reproducibility, the results hold for a fixed thread count (the config's `resources`).

`install()` overrides torch's CPU kernels of `aten::mm`, `addmm`, `bmm` and `baddbmm` (and their `out=`
forms) so that every matrix product torch computes on the CPU — `nn.Linear`, the emulated bf16 and FP8
GEMMs, the language-model head, both backward GEMMs, the SFT — runs `numpy.matmul` on that kernel. The
products the ATen kernels compute internally without those ops (the CPU SDPA kernel's small per-head
GEMMs) stay on MKL's pinned COMPATIBLE branch, which `reproducible` mode keeps. `fast` mode never
installs it. The OpenBLAS core type is fixed when numpy first loads OpenBLAS, so `fp8rl.numerics` sets
`OPENBLAS_CORETYPE` before that — and, for scripts that import torch or numpy first, the interpreter-start
hook `make install` writes (fp8rl.startup_hook) — and `install()` refuses to run on any other core
(`state()` records it).
`FP8RL_PINNED_BLAS=0` leaves torch's products on MKL's COMPATIBLE branch (the earlier pin; its tables
differ in the last bits): for benchmarks that time the two side by side.

Like MKL's kernels, OpenBLAS's give one row of a product different last bits depending on how many rows
the product has (the kernels block and order the sums by shape): reproducible means the same job gives
the same bits on any machine, not that a sub-batch reproduces the full batch's bits.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

CORETYPE = "Haswell"
OPS = ("mm", "mm.out", "addmm", "addmm.out", "bmm", "bmm.out", "baddbmm", "baddbmm.out")

_LIB: torch.library.Library | None = None
_THREADS: int | None = None
_CALLS = 0


def _openblas() -> dict:
    from threadpoolctl import threadpool_info

    for info in threadpool_info():
        if info.get("internal_api") == "openblas" and "numpy" in info.get("filepath", ""):
            return info
    raise RuntimeError(
        "reproducible numerics: numpy is not linked against OpenBLAS (threadpoolctl finds none)"
    )


def _set_threads(n: int) -> None:
    """Give OpenBLAS torch's thread count (its results depend on it, as MKL's do)."""
    global _THREADS
    if n != _THREADS:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=n, user_api="blas")
        _THREADS = n


def _np(t: torch.Tensor) -> np.ndarray:
    """A numpy view of `t` (a copy where numpy cannot view it: negative or zero strides, or a conj bit)."""
    t = t.detach()
    if t.dtype == torch.bfloat16:
        t = t.float()
    if any(s < 0 for s in t.stride()) or t.is_conj():
        t = t.contiguous()
    return t.resolve_conj().numpy()


def _product(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`a @ b` (2-D or batched 3-D) by numpy on the pinned kernel, as a `dtype` tensor. bf16 operands are
    multiplied in fp32 and the product rounded once to bf16 (what torch's CPU bf16 GEMM returns)."""
    global _CALLS
    _CALLS += 1
    _set_threads(torch.get_num_threads())
    out = np.matmul(_np(a), _np(b))
    return torch.from_numpy(np.ascontiguousarray(out)).to(dtype)


def _scaled(prod: torch.Tensor, base: torch.Tensor, beta, alpha) -> torch.Tensor:
    """`beta * base + alpha * prod`, with torch's convention that beta == 0 ignores `base` (NaN included)."""
    if alpha != 1:
        prod = prod * alpha
    if beta == 0:
        return prod
    return prod + (base if beta == 1 else base * beta)


def _mm(a, b):
    return _product(a, b, a.dtype)


def _addmm(base, a, b, *, beta=1, alpha=1):
    return _scaled(_product(a, b, a.dtype), base, beta, alpha).to(a.dtype)


def _into(fn):
    def out_form(*args, out, **kwargs):
        result = fn(*args, **kwargs)
        out.resize_(result.shape)
        return out.copy_(result)

    return out_form


IMPLS = {
    "mm": _mm,
    "mm.out": _into(_mm),
    "addmm": _addmm,
    "addmm.out": _into(_addmm),
    "bmm": _mm,  # numpy.matmul batches over the leading dimension
    "bmm.out": _into(_mm),
    "baddbmm": _addmm,
    "baddbmm.out": _into(_addmm),
}


def core() -> str:
    """The OpenBLAS core type numpy's OpenBLAS runs in this process (loads it if needed)."""
    return str(_openblas().get("architecture", "unknown"))


def install() -> None:
    """Route every CPU matrix product of this process through the pinned OpenBLAS kernel (module
    docstring); idempotent. Raises when OpenBLAS was loaded on another core type."""
    global _LIB
    if _LIB is not None:
        return
    if core().lower() != CORETYPE.lower():
        raise RuntimeError(
            f"reproducible numerics: numpy's OpenBLAS runs the {core()!r} kernels, not {CORETYPE!r}: numpy "
            f"was loaded before fp8rl set OPENBLAS_CORETYPE; import fp8rl first, set "
            f"OPENBLAS_CORETYPE={CORETYPE} in the environment, or install the interpreter-start hook once "
            f"in this environment: python -m fp8rl.startup_hook (make install does)"
        )
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Overriding a previously registered kernel": that is the point
        for op in OPS:
            lib.impl(op, IMPLS[op], "CPU")
    _LIB = lib


def installed() -> bool:
    return _LIB is not None


def calls() -> int:
    """How many matrix products the pinned kernel computed in this process (for provenance and tests)."""
    return _CALLS


def state() -> dict:
    """What provenance records: whether the override is installed, the core OpenBLAS runs, its version."""
    if _LIB is None:
        return {"installed": False}
    info = _openblas()
    return {"installed": True, "core": info.get("architecture"), "openblas": info.get("version")}
