"""Which kernels the math libraries run: one pinned path on every x86 machine (`reproducible`), or the
machine's best (`fast`).

The same fp32 GEMM gives different last bits on different CPUs, because MKL (torch's CPU BLAS) and
ATen's vectorised kernels (softmax, reductions, attention) pick their code path per CPU: AVX2, AVX-512,
AMX. A few hundred training steps amplify those bits into different base models and different tables.
`reproducible` (the default) pins one path that every x86-64 CPU with AVX2 runs, Intel and AMD alike:

- `MKL_CBWR=COMPATIBLE,STRICT`: MKL's conditional numerical reproducibility on its COMPATIBLE branch
  (SSE2 without the approximate rcpps/rsqrtps), strict mode. MKL honours its named ISA branches
  (`AVX2`, `AVX512`, ...) on Intel processors only; elsewhere, and on any CPU where MKL will not run
  that branch, it silently falls back to `AUTO`, the CPU's own path. COMPATIBLE is the one branch it
  runs alike on Intel and AMD, for a fixed thread count. It costs speed: its fp32 GEMMs run several times
  slower than the AVX2 branch's (`benchmarks/gemm_paths.py`; docs/performance.md);
- `ATEN_CPU_CAPABILITY=avx2`: ATen's kernels compiled for AVX2, not AVX-512;
- `ONEDNN_MAX_CPU_ISA=AVX2`: oneDNN (bf16 and other non-MKL paths) capped at AVX2;
- `MKL_DYNAMIC=FALSE`: MKL uses exactly the threads it is given (threads are fixed per rule by the
  config's `resources`);
- `OPENBLAS_CORETYPE=Haswell`: numpy's OpenBLAS runs its AVX2 + FMA kernels on any CPU. `pin_gemms()`
  then routes every matrix product torch computes on the CPU through that kernel (fp8rl.pinned_blas),
  several times faster than MKL's COMPATIBLE branch; MKL's pin stays for the products ATen computes
  inside other kernels (the CPU attention kernel's).

Not a pin, because no result depends on it, but set with it (`REPRODUCIBLE_RUNTIME_ENV`; a value already
in the environment is kept): `OPENBLAS_THREAD_TIMEOUT=4`, so OpenBLAS's worker threads sleep as soon as
a product ends instead of spinning for about 2^28 cycles. With more than one thread, the products
alternate with torch's own OpenMP regions, whose threads spin too: both pools spinning on the same cores
made the reproducible step 12-21x slower than the fast one at two threads, against 1.1-1.6x at one
(`benchmarks/vs_trl.py --runs bf16 bf16-repro`; docs/performance.md).

These libraries read the variables once, when they first run, so the pin must be in the environment
before torch computes anything. `import fp8rl` applies it (the `fp8rl` command, the DAG's rules, the
tests and the benchmarks all import fp8rl before torch runs a kernel); `FP8RL_NUMERICS=fast` in the
environment, or `numerics: fast` in a config (the command then restarts itself in that mode), leaves the
machine's own choice. OpenBLAS alone reads its variable when numpy is loaded, not when it first
computes, so a script that imports torch (which imports numpy) before fp8rl would miss it:
fp8rl.startup_hook sets it at interpreter start (`make install` installs the hook), so either import
order gives the same bits. `state()` is what provenance records.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from functools import lru_cache

from fp8rl.vocabulary import FP8_BACKEND_ENV
from fp8rl.vocabulary import NUMERICS_MODES as MODES

DEFAULT_MODE = "reproducible"
ENV_MODE = "FP8RL_NUMERICS"

PINNED_ENV = {
    "MKL_CBWR": "COMPATIBLE,STRICT",
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_DYNAMIC": "FALSE",
    "OPENBLAS_CORETYPE": "Haswell",
}
# Set in reproducible mode for speed only (module docstring): results do not depend on them.
REPRODUCIBLE_RUNTIME_ENV = {"OPENBLAS_THREAD_TIMEOUT": "4"}
# CPU flags that decide the libraries' choices, recorded in provenance.
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile", "amx_int8")


class ModeMismatch(RuntimeError):
    """The process runs in one numerics mode and the config asks for the other. The libraries cannot
    switch once loaded: the `fp8rl` command restarts itself with `FP8RL_NUMERICS` set (`env()`)."""

    def __init__(self, wanted: str, active: str) -> None:
        self.wanted, self.active = wanted, active
        super().__init__(
            f"numerics: the config asks for {wanted!r} but this process runs {active!r}; the math libraries "
            f"choose their kernels once, at start: run it with {ENV_MODE}={wanted} in the environment"
        )

    def env(self) -> dict[str, str]:
        """The environment a restarted process needs for the wanted mode."""
        return environment(self.wanted, os.environ)


def cpu_vendor(model: str) -> str | None:
    """`Intel` or `AMD` from a CPU model name as `cpu()` records it, else None. The pinned kernel path gives
    the same bits on CPUs of one vendor, not across them (docs/numerics.md)."""
    for vendor in ("Intel", "AMD"):
        if vendor in model:
            return vendor
    return None


def requested_mode(environ=os.environ) -> str:
    mode = environ.get(ENV_MODE, DEFAULT_MODE) or DEFAULT_MODE
    if mode not in MODES:
        raise ValueError(f"{ENV_MODE}={mode!r}: allowed values are {', '.join(MODES)}")
    return mode


def environment(mode: str, environ) -> dict[str, str]:
    """`environ` with `mode` applied: the pin set (overriding whatever the machine had) for
    `reproducible`, with `REPRODUCIBLE_RUNTIME_ENV` where the environment does not set it; for `fast`,
    the pin's own values removed so the libraries choose."""
    env = dict(environ)
    env[ENV_MODE] = mode
    for key, value in PINNED_ENV.items():
        if mode == "reproducible":
            env[key] = value
        elif env.get(key) == value:
            del env[key]
    if mode == "reproducible":
        for key, value in REPRODUCIBLE_RUNTIME_ENV.items():
            env.setdefault(key, value)
    return env


def export(mode: str, environ=os.environ) -> None:
    """Apply `environment(mode, ...)` to `environ` in place (the process's own environment by default:
    what its children inherit)."""
    env = environment(mode, environ)
    for key in (ENV_MODE, *PINNED_ENV, *REPRODUCIBLE_RUNTIME_ENV):
        if key in env:
            environ[key] = env[key]
        else:
            environ.pop(key, None)


def unpinned(environ=os.environ) -> dict[str, str]:
    """`environ` for a process that runs on GPUs (vLLM's engine and workers, bfcl's `vllm serve`): no
    CPU numerics pin (`environment("fast", ...)`: the pin's own values and `REPRODUCIBLE_RUNTIME_ENV`'s
    removed, a user's own kept, `FP8RL_NUMERICS=fast` so a child that imports fp8rl does not set it
    again). Its results do not depend on CPU kernels, and the pin's caps (AVX2, MKL's slow COMPATIBLE
    branch, OpenBLAS's Haswell core type: x86 names an Arm host such as Grace does not know) would
    only slow or confuse its CPU side."""
    env = environment("fast", environ)
    for key, value in REPRODUCIBLE_RUNTIME_ENV.items():
        if env.get(key) == value:
            del env[key]
    return env


@contextmanager
def children_unpinned(environ=os.environ):
    """While it runs, the processes this one starts get `unpinned(environ)`: for an in-process library
    that starts its GPU workers itself (lm-eval's vLLM model). This process's libraries keep the kernels
    they chose at start; the environment is put back after."""
    saved = dict(environ)
    new = unpinned(environ)
    for key in (ENV_MODE, *PINNED_ENV, *REPRODUCIBLE_RUNTIME_ENV):
        if key in new:
            environ[key] = new[key]
        else:
            environ.pop(key, None)
    try:
        yield
    finally:
        for key in (ENV_MODE, *PINNED_ENV, *REPRODUCIBLE_RUNTIME_ENV):
            if key in saved:
                environ[key] = saved[key]
            else:
                environ.pop(key, None)


_ACTIVE: str | None = None
_TORCH_FIRST = False  # torch was imported before the pin was applied: it may not hold


def apply() -> str:
    """Put this process in the requested mode (module docstring); called once by `import fp8rl`."""
    global _ACTIVE, _TORCH_FIRST
    if _ACTIVE is None:
        try:
            mode = requested_mode()
        except ValueError as exc:  # at `import fp8rl`: a message and the CLI's exit code, not a traceback
            print(f"fp8rl: {exc} (unset it for {DEFAULT_MODE})", file=sys.stderr)
            raise SystemExit(2) from None
        _TORCH_FIRST = "torch" in sys.modules
        export(mode)
        _ACTIVE = mode
    return _ACTIVE


def active_mode() -> str:
    return apply()


def ensure(wanted: str) -> None:
    """Raise ModeMismatch unless this process runs `wanted`, or the pin could not be applied before
    torch was loaded (a script that imported torch first: its kernels may already be chosen)."""
    active = apply()
    if wanted != active:
        raise ModeMismatch(wanted, active)
    if wanted == "reproducible" and _TORCH_FIRST and _aten_capability() not in (None, "AVX2"):
        raise RuntimeError(
            "numerics 'reproducible': torch was imported before fp8rl and already chose its kernels "
            f"({_aten_capability()}); import fp8rl first, or set the pin in the environment: "
            + " ".join(f"{k}={v}" for k, v in PINNED_ENV.items())
        )
    pin_gemms()


def pin_gemms() -> None:
    """In `reproducible` mode, route this process's CPU matrix products through the pinned OpenBLAS
    kernel (fp8rl.pinned_blas); idempotent, nothing in `fast` mode. Called where torch first computes:
    `ensure`, `fp8rl.fp8` and the model builders of `fp8rl.engine.model`."""
    if apply() == "reproducible" and os.environ.get("FP8RL_PINNED_BLAS", "1") != "0":
        from fp8rl import pinned_blas

        pinned_blas.install()


def _aten_capability() -> str | None:
    if "torch" not in sys.modules:
        return None
    import torch

    return torch.backends.cpu.get_cpu_capability()


@lru_cache(maxsize=1)
def cpu() -> dict:
    """The CPU's model name and the ISA flags (of `ISA_FLAGS`) it has, from /proc/cpuinfo."""
    model, flags = "unknown", set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model == "unknown":
                    model = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return {"model": model, "isa": [f for f in ISA_FLAGS if f in flags]}


def _library_versions() -> dict:
    if "torch" not in sys.modules:
        return {}
    import torch

    out = {}
    for line in torch.__config__.show().splitlines():
        line = line.strip(" -")
        if "Math Kernel Library Version" in line:
            out["mkl"] = line.split("Version", 1)[1].split("Product")[0].strip()
        elif line.startswith("Intel(R) MKL-DNN"):
            out["onednn"] = line.split()[2]
    return out


def state() -> dict:
    """The mode, the pinned variables as this process has them, the kernels ATen chose, the FP8 GEMM
    path forced by FP8_BACKEND_ENV ("auto" where unset: the device picks, fp8rl.fp8.backend), the CPU
    and the libraries' versions: the `numerics` record of provenance."""
    mode = apply()
    blas = {}
    if "fp8rl.pinned_blas" in sys.modules:
        blas = {"pinned_blas": sys.modules["fp8rl.pinned_blas"].state()}
    return {
        "mode": mode,
        "env": {key: os.environ.get(key) for key in PINNED_ENV},
        "aten_capability": _aten_capability(),
        "fp8_backend": os.environ.get(FP8_BACKEND_ENV) or "auto",
        **blas,
        "cpu": cpu(),
        **_library_versions(),
    }
