"""The numerics modes (fp8rl.numerics): the pin overrides whatever kernel path the machine would take,
`fast` leaves the machine's choice, and provenance records what ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fp8rl import numerics

# Two "machines": the environment a CPU's own choice amounts to, made different on purpose (against the
# libraries' defaults: ATen's unvectorised kernels, and MKL capped below AVX2 by MKL_ENABLE_INSTRUCTIONS,
# the way an AMD CPU refuses MKL's Intel-only AVX2 branch: MKL then falls back to the CPU's own path).
# Every x86-64 CPU runs both; an `avx512` capability would crash with SIGILL on a CPU without AVX-512.
# OpenBLAS on its SSE3 kernels (Prescott), which every x86-64 CPU runs, not the one it picks itself.
MACHINE_A = {
    "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
    "ATEN_CPU_CAPABILITY": "default",
    "OPENBLAS_CORETYPE": "Prescott",
}
MACHINE_B: dict[str, str] = {}

# A GEMM, a softmax over a long row and a reduction: each differs in its last bits between kernel paths.
PROBE = """
import fp8rl, hashlib, json, os, torch
fp8rl.numerics.pin_gemms()
torch.manual_seed(0); torch.set_num_threads(1)
a, b, x = torch.randn(200, 128), torch.randn(128, 344), torch.randn(64, 33, 97)
out = torch.cat([(a @ b).flatten(), torch.softmax(x, -1).flatten(), x.sum(-1).flatten()])
print(json.dumps({"hash": hashlib.sha256(out.numpy().tobytes()).hexdigest(),
                  "mode": fp8rl.numerics.active_mode(), "state": fp8rl.numerics.state()}))
"""


def _probe(mode: str, machine: dict[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (numerics.ENV_MODE, *numerics.PINNED_ENV)}
    env.update(machine, **{numerics.ENV_MODE: mode})
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_environment_pins_reproducible_and_frees_fast():
    machine = {"MKL_CBWR": "COMPATIBLE", "OTHER": "x"}
    pinned = numerics.environment("reproducible", machine)
    assert {k: pinned[k] for k in numerics.PINNED_ENV} == numerics.PINNED_ENV
    assert pinned["OTHER"] == "x" and pinned[numerics.ENV_MODE] == "reproducible"
    fast = numerics.environment("fast", pinned)
    assert not set(numerics.PINNED_ENV) & set(fast)  # the pin's own values removed
    assert numerics.environment("fast", machine)["MKL_CBWR"] == "COMPATIBLE"  # a user's own choice kept


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="FP8RL_NUMERICS='exact'"):
        numerics.requested_mode({numerics.ENV_MODE: "exact"})


def test_an_unknown_mode_in_the_environment_is_a_message_and_exit_2_not_a_traceback():
    env = dict(os.environ, **{numerics.ENV_MODE: "bogus"})
    res = subprocess.run(
        [sys.executable, "-m", "fp8rl.cli", "--help"], env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 2, res.stderr
    assert "FP8RL_NUMERICS='bogus': allowed values are reproducible, fast" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.slow
def test_the_pin_gives_one_result_on_two_kernel_paths_and_fast_does_not():
    a, b = _probe("reproducible", MACHINE_A), _probe("reproducible", MACHINE_B)
    assert a["hash"] == b["hash"]
    assert a["state"]["aten_capability"] == "AVX2" and a["state"]["env"] == numerics.PINNED_ENV
    fa, fb = _probe("fast", MACHINE_A), _probe("fast", MACHINE_B)
    assert fa["mode"] == "fast" and fa["state"]["env"]["MKL_CBWR"] is None
    assert fa["hash"] != fb["hash"]  # the two paths really differ: the pin is what makes them agree


def test_state_names_the_mode_the_cpu_and_the_libraries():
    import torch  # noqa: F401  (the library versions come from torch's build config)

    state = numerics.state()
    assert state["mode"] == numerics.active_mode() == os.environ[numerics.ENV_MODE]
    assert state["cpu"]["model"] != "" and isinstance(state["cpu"]["isa"], list)
    assert state["mkl"] and state["onednn"]
    if state["mode"] == "reproducible":
        assert state["env"] == numerics.PINNED_ENV


def test_a_process_in_the_other_mode_is_told_how_to_restart():
    other = "fast" if numerics.active_mode() == "reproducible" else "reproducible"
    with pytest.raises(numerics.ModeMismatch, match=f"{numerics.ENV_MODE}={other}") as info:
        numerics.ensure(other)
    assert info.value.env()[numerics.ENV_MODE] == other
