"""A hub id is `org/name`, never a path: with `$FP8RL_HUB_MIRROR` set, nothing outside the mirror is ever
copied into the shared hub cache, whatever `models[].hf_id` says."""

from __future__ import annotations

from pathlib import Path

import pytest

from fp8rl.adapters.hub import fetch_snapshot, mirror_path
from fp8rl.config import is_hub_id
from fp8rl.config_loader import load_config
from tests.hub_fixtures import make_hub

ROOT = Path(__file__).resolve().parents[3]
BAD = ["../x", "org/../../x", "/etc", "org/..", "..", "org/name/more", "org", "-org/name", "org/ name", ""]


@pytest.mark.parametrize("repo_id", BAD)
def test_paths_are_not_hub_ids(repo_id, tmp_path):
    assert not is_hub_id(repo_id)
    with pytest.raises(ValueError, match="not a hub id"):
        mirror_path(tmp_path, repo_id)


@pytest.mark.parametrize("repo_id", ["Qwen/Qwen3-8B", "HuggingFaceTB/SmolLM2-135M-Instruct", "a/b.c_d-e"])
def test_hub_ids_pass(repo_id, tmp_path):
    assert is_hub_id(repo_id) and mirror_path(tmp_path, repo_id) == tmp_path / repo_id


def test_a_traversing_id_copies_nothing_into_the_cache(tmp_path, monkeypatch):
    mirror = make_hub(tmp_path / "mirror", models=("Qwen/Qwen3-8B",))
    secret = tmp_path / "x"
    secret.mkdir()
    (secret / "key").write_text("not for the cache")
    monkeypatch.setenv("FP8RL_HUB_MIRROR", str(mirror))
    for repo_id in ("../x", "org/../../x", str(secret)):
        with pytest.raises(ValueError, match="not a hub id"):
            fetch_snapshot(repo_id, repo_type="model", revision=None, hf_home=tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_config_validation_refuses_a_path_as_hf_id(tmp_path):
    import yaml

    from fp8rl.config_loader import ConfigError

    data = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    data["models"][0]["hf_id"] = "../x"
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"models\.0\.hf_id: '\.\./x' is not a hub id"):
        load_config(tmp_path / "c.yaml")
