"""Reproducible mode's GEMM route (fp8rl.pinned_blas): every CPU matrix product torch computes runs on
numpy's OpenBLAS with its core type pinned, computes what torch's own kernels compute (up to the order
of the fp32 sums), and gives one result whatever core the machine's OpenBLAS would have chosen."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from fp8rl import numerics, pinned_blas

pytestmark = pytest.mark.skipif(
    numerics.active_mode() != "reproducible", reason="the pinned route is reproducible mode's"
)


@pytest.fixture(autouse=True)
def _installed():
    numerics.pin_gemms()
    assert pinned_blas.installed()


def _routed(fn):
    """fn's result and how many products the pinned kernel computed for it."""
    before = pinned_blas.calls()
    out = fn()
    return out, pinned_blas.calls() - before


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.double(), want.double(), rtol=1e-5, atol=1e-4)


def test_every_product_form_is_routed_and_correct():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(37, 53, generator=g), torch.randn(53, 29, generator=g)
    base = torch.randn(37, 29, generator=g)
    a3, b3 = torch.randn(4, 7, 11, generator=g), torch.randn(4, 11, 5, generator=g)
    base3 = torch.randn(4, 7, 5, generator=g)
    ref = a.double() @ b.double()
    ref3 = a3.double() @ b3.double()
    cases = {
        "mm": (lambda: torch.mm(a, b), ref),
        "mm of column-major views": (lambda: torch.mm(a.t().contiguous().t(), b.t().contiguous().t()), ref),
        "addmm": (lambda: torch.addmm(base, a, b, beta=0.5, alpha=2.0), 0.5 * base.double() + 2 * ref),
        "bmm": (lambda: torch.bmm(a3, b3), ref3),
        "baddbmm": (lambda: torch.baddbmm(base3, a3, b3, alpha=-1.0), base3.double() - ref3),
        "linear 3-D": (lambda: torch.nn.functional.linear(a3, b3[0].t()), a3.double() @ b3[0].double()),
    }
    for name, (fn, want) in cases.items():
        got, n = _routed(fn)
        assert n >= 1, f"{name}: not routed through the pinned kernel"
        _close(got, want.float())
    out = torch.empty(0)
    _, n = _routed(lambda: torch.mm(a, b, out=out))
    assert n == 1 and out.shape == (37, 29)
    _close(out, ref.float())


def test_beta_zero_ignores_the_input_as_torch_does():
    a, b = torch.ones(3, 4), torch.ones(4, 2)
    nan = torch.full((3, 2), float("nan"))
    assert torch.equal(torch.addmm(nan, a, b, beta=0), torch.full((3, 2), 4.0))


def test_backward_gemms_are_routed_and_match_autograd_in_float64():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(16, 24, generator=g, requires_grad=True)
    w = torch.randn(8, 24, generator=g, requires_grad=True)
    (torch.nn.functional.linear(x, w).square().sum()).backward()
    xd, wd = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    (torch.nn.functional.linear(xd, wd).square().sum()).backward()
    _close(x.grad, xd.grad.float())
    _close(w.grad, wd.grad.float())


def test_bf16_and_float64_products_keep_their_dtype():
    a, b = torch.randn(5, 6), torch.randn(6, 3)
    got, n = _routed(lambda: torch.mm(a.bfloat16(), b.bfloat16()))
    assert n == 1 and got.dtype == torch.bfloat16
    want = (a.bfloat16().float() @ b.bfloat16().float()).bfloat16()
    torch.testing.assert_close(got, want)
    got64, _ = _routed(lambda: torch.mm(a.double(), b.double()))
    assert got64.dtype == torch.float64


# One product under a preset OpenBLAS core type: `reproducible` overrides it, `fast` keeps it.
PROBE = """
import fp8rl, hashlib, json, torch
fp8rl.numerics.pin_gemms(); torch.set_num_threads(2)
g = torch.Generator().manual_seed(0)
a, b = torch.randn(300, 344, generator=g), torch.randn(344, 200, generator=g)
out = torch.nn.functional.linear(a, b.t())
print(json.dumps({"hash": hashlib.sha256(out.numpy().tobytes()).hexdigest(),
                  "state": fp8rl.numerics.state()}))
"""


def _probe(mode: str, env_extra: dict[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (numerics.ENV_MODE, *numerics.PINNED_ENV)}
    env.update(env_extra, **{numerics.ENV_MODE: mode})
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-1500:]
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_one_result_whatever_core_the_machine_would_choose():
    # Sandybridge (AVX) and Prescott (SSE3): kernels every x86-64 CPU runs, unlike the one this machine's
    # OpenBLAS picks by itself; together with MKL capped below AVX2 (MKL must not matter any more).
    machines = [{}, {"OPENBLAS_CORETYPE": "Sandybridge"},
                {"OPENBLAS_CORETYPE": "Prescott", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}]  # fmt: skip
    pinned = [_probe("reproducible", m) for m in machines]
    assert len({p["hash"] for p in pinned}) == 1
    blas = pinned[1]["state"]["pinned_blas"]
    assert blas["installed"] and blas["core"] == pinned_blas.CORETYPE
    # the machines really differ where nothing pins OpenBLAS: its own choice against Prescott's
    free = [_probe("fast", m) for m in machines[1:]]
    assert "pinned_blas" not in free[0]["state"]
    import numpy as np

    g = np.random.default_rng(0)
    a, b = g.standard_normal((300, 344), dtype=np.float32), g.standard_normal((344, 200), dtype=np.float32)
    env = {**os.environ, "OPENBLAS_CORETYPE": "Prescott"}
    code = "import numpy as np,sys; a=np.load(sys.argv[1]); b=np.load(sys.argv[2]); sys.stdout.buffer.write((a@b).tobytes())"
    paths = []
    for i, x in enumerate((a, b)):
        p = f"{os.environ.get('TMPDIR', '/tmp')}/pinned_blas_{os.getpid()}_{i}.npy"
        np.save(p, x)
        paths.append(p)
    prescott = subprocess.run([sys.executable, "-c", code, *paths], env=env, capture_output=True, check=True)
    haswell = subprocess.run(
        [sys.executable, "-c", code, *paths],
        env={**env, "OPENBLAS_CORETYPE": "Haswell"},
        capture_output=True,
        check=True,
    )
    for p in paths:
        os.remove(p)
    assert prescott.stdout != haswell.stdout  # another core type gives other bits: the pin is what agrees


def test_numpy_loaded_on_another_core_is_refused():
    code = "import numpy, fp8rl; fp8rl.numerics.pin_gemms()"
    env = {k: v for k, v in os.environ.items() if k not in (numerics.ENV_MODE, *numerics.PINNED_ENV)}
    env.update(OPENBLAS_CORETYPE="Prescott", **{numerics.ENV_MODE: "reproducible"})
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "numpy was loaded before fp8rl set OPENBLAS_CORETYPE" in proc.stderr


THREADS_PROBE = """
import fp8rl, hashlib, json, os, torch
fp8rl.numerics.pin_gemms(); torch.set_num_threads(2)
g = torch.Generator().manual_seed(0)
a = torch.randn(300, 344, generator=g, requires_grad=True)
w = torch.randn(200, 344, generator=g, requires_grad=True)
out = torch.nn.functional.linear(a, w)
out.square().sum().backward()
h = hashlib.sha256()
for t in (out, a.grad, w.grad):
    h.update(t.detach().numpy().tobytes())
print(json.dumps({"hash": h.hexdigest(), "timeout": os.environ.get("OPENBLAS_THREAD_TIMEOUT")}))
"""


def test_openblas_idle_threads_sleep_in_reproducible_mode_without_changing_a_bit():
    """Reproducible mode sets OPENBLAS_THREAD_TIMEOUT (OpenBLAS's workers sleep instead of spinning
    against torch's OpenMP threads) unless the environment sets it; the products at two threads, forward
    and backward, are the same bits whatever the timeout."""
    base = {k: v for k, v in os.environ.items() if k not in (numerics.ENV_MODE, *numerics.PINNED_ENV)}
    base.pop("OPENBLAS_THREAD_TIMEOUT", None)
    runs = {}
    for timeout in (None, "28"):
        env = {**base, numerics.ENV_MODE: "reproducible"}
        if timeout:
            env["OPENBLAS_THREAD_TIMEOUT"] = timeout
        proc = subprocess.run([sys.executable, "-c", THREADS_PROBE], env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-1500:]
        runs[timeout] = json.loads(proc.stdout)
    assert runs[None]["timeout"] == numerics.REPRODUCIBLE_RUNTIME_ENV["OPENBLAS_THREAD_TIMEOUT"]
    assert runs["28"]["timeout"] == "28"  # a value the user set is kept
    assert runs[None]["hash"] == runs["28"]["hash"]
    fast = numerics.environment("fast", {})
    assert "OPENBLAS_THREAD_TIMEOUT" not in fast
