"""A config string reaches verl's Hydra overrides as itself: Hydra resolves `${…}` inside quoted strings
too, so an override value with `${oc.env:SECRET}` would read the secret into verl's printed config."""

from __future__ import annotations

from pathlib import Path

import pytest

from fp8rl.adapters.verl_overrides import VerlPaths, _q_str, verl_overrides
from fp8rl.config_loader import load_config

ROOT = Path(__file__).resolve().parents[3]
SECRET = "FP8RL_TEST_SECRET"


def _resolved(overrides: list[str]) -> dict:
    """The overrides as verl sees them: parsed by Hydra's override parser, set into a config, resolved."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    c = OmegaConf.create({})
    for o in OverridesParser.create().parse_overrides(overrides):
        OmegaConf.update(c, o.key_or_group, o.value(), merge=False, force_add=True)
    return OmegaConf.to_container(c, resolve=True)


STRINGS = [
    "http://x/${oc.env:FP8RL_TEST_SECRET}",
    "${oc.env:FP8RL_TEST_SECRET,fallback}",
    "\\${x}",
    "\\\\${oc.env:FP8RL_TEST_SECRET}",
    "${a}${b}",
    "${",
    "$",
    "a\\b",
    "ends in a backslash\\",
    "it's",
    "\\'",
    "x'\\",
    "",
    "two\nlines\n",
]


@pytest.mark.parametrize("value", STRINGS)
def test_a_quoted_string_reaches_verl_as_itself(verl_site, monkeypatch, value):
    monkeypatch.setenv(SECRET, "s3cr3t")
    assert _resolved([f"a={_q_str(value)}"]) == {"a": value}


def test_a_tracking_uri_never_resolves_an_environment_variable(verl_site, monkeypatch, tmp_path):
    monkeypatch.setenv(SECRET, "s3cr3t")
    uri = f"http://x/${{oc.env:{SECRET}}}"
    cfg = load_config(
        ROOT / "config/paper.yaml",
        [
            "calib.reference=static:0.01",
            "tracking.mlflow.enabled=true",
            f"tracking.mlflow.tracking_uri={uri}",
        ],
    )
    out = f"{tmp_path}/run$${{oc.env:{SECRET}}}"
    paths = VerlPaths(f"/models/${{oc.env:{SECRET}}}", "/d/train.parquet", "/d/test.parquet", out)
    resolved = _resolved(verl_overrides(cfg, cfg.runs()[0], paths))
    env = resolved["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]
    assert env["MLFLOW_TRACKING_URI"] == uri
    assert resolved["actor_rollout_ref"]["model"]["path"] == paths.model
    assert resolved["trainer"]["default_local_dir"] == f"{out}/verl_checkpoints"
    assert "s3cr3t" not in repr(resolved)
