"""The train image's lock against verl 0.9.1's own requirements for the Megatron path the overrides pick:
`vanilla_mbridge` needs `mbridge` (verl's `mcore` extra), otherwise verl imports `megatron.bridge`
(Megatron-Bridge, pinned by its `megatron` extra). Read from verl's installed metadata
(build/verl-site, scripts/verl_test_env.sh); skipped without it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fp8rl.adapters.verl_overrides import VANILLA_MBRIDGE
from fp8rl.containers import CONTAINERS_DIR, lock_entries

ROOT = Path(__file__).resolve().parents[3]
METADATA = ROOT / "build" / "verl-site" / "verl-0.9.1.dist-info" / "METADATA"


def _lock() -> dict[str, str]:
    pins = {}
    for entry in lock_entries(CONTAINERS_DIR / "train" / "requirements.lock"):
        name, version = entry.split()[0].split("==")
        pins[re.sub(r"\[.*\]", "", name).lower()] = version
    return pins


def _verl_requires(extra: str) -> dict[str, str | None]:
    """`{package: pinned version or None}` that verl's `extra` requires."""
    out = {}
    for line in METADATA.read_text().splitlines():
        m = re.match(rf'Requires-Dist: ([A-Za-z0-9_.-]+)(?:==([^;\s]+))?.*; extra == "{extra}"', line)
        if m:
            out[m.group(1).lower()] = m.group(2)
    return out


@pytest.mark.skipif(not METADATA.is_file(), reason="verl 0.9.1's metadata: scripts/verl_test_env.sh")
def test_train_lock_holds_what_verls_megatron_path_imports():
    lock = _lock()
    assert lock["verl"] == "0.9.1"
    needs = (
        _verl_requires("mcore")
        if VANILLA_MBRIDGE
        else {"megatron-bridge": _verl_requires("megatron")["megatron-bridge"]}
    )
    assert needs, "verl's metadata names no Megatron bridge"
    for name, version in needs.items():
        assert name in lock, (
            f"containers/train/requirements.lock lacks {name} (verl's Megatron path imports it)"
        )
        assert version is None or lock[name] == version, f"{name}: lock {lock[name]}, verl wants {version}"
    # the rollout stack is verl's own vllm extra pin
    for name, version in _verl_requires("vllm").items():
        if version and name in ("torch", "vllm", "transformers"):
            assert lock[name] == version, f"{name}: lock {lock[name]}, verl[vllm] pins {version}"
