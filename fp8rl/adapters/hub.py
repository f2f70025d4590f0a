"""Hub downloads for the paper tier: fetched once on the login node, read offline by every compute job.

`fetch_snapshot` puts one Hugging Face repository (a model or a dataset) at one revision into the shared
cache `HF_HOME` (config `hub.home`) in the hub's own cache layout
(`{HF_HOME}/hub/{models|datasets}--{org}--{name}/snapshots/{commit}`, with `refs/main` naming the
commit), so that `transformers`, `datasets`, vLLM and lm-eval find it with `HF_HUB_OFFLINE=1`. It returns
a record: the repository, the revision asked for and the commit resolved, the snapshot path and the
sha256 and size of every file. The DAG writes that record next to what it stands for
(`base/{model}/model.json`, `data/hub.json`) and compute jobs read the snapshot path from it.

The source is the hub (`huggingface_hub.snapshot_download`), or a local directory standing in for it
(`$FP8RL_HUB_MIRROR/{repo_id}/`: tests, and sites that stage downloads elsewhere). A mirror copy is
given the revision asked for, or `mirror-<digest of its files>` when none is pinned. A repository id is
`org/name` (config validation checks `models[].hf_id`; `fetch_snapshot` again), never a path: nothing
outside the mirror is ever copied into the cache.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Literal

from fp8rl.config import is_hub_id
from fp8rl.io import sha256_file
from fp8rl.vocabulary import LM_EVAL_TASKS, VERL_TASKS

MIRROR_ENV = "FP8RL_HUB_MIRROR"
RepoType = Literal["model", "dataset"]
# The eval sets lm-eval's tasks read (`eval.lm_eval_tasks` name -> the task's dataset_path).
EVAL_DATASETS = {
    "gsm8k": "openai/gsm8k",
    "math500": "HuggingFaceH4/MATH-500",
    "aime24": "Maxwell-Jia/AIME_2024",
    "aime25": "math-ai/aime25",
}
assert tuple(EVAL_DATASETS) == LM_EVAL_TASKS
# The training sets `fp8rl data` converts (`task.name` -> dataset repository): the verl backend's tasks.
TRAIN_DATASETS = {"dapo-math-17k": "BytedTsinghua-SIA/DAPO-Math-17k"}
assert tuple(TRAIN_DATASETS) == VERL_TASKS


def file_hashes(root: Path) -> dict[str, dict[str, int | str]]:
    """`{relative path: {"sha256", "bytes"}}` of every file under `root` (links followed), sorted."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and ".cache" not in p.relative_to(root).parts:
            out[p.relative_to(root).as_posix()] = {"sha256": sha256_file(p), "bytes": p.stat().st_size}
    return out


def repo_cache_dir(hf_home: Path, repo_id: str, repo_type: RepoType) -> Path:
    """The hub cache folder of one repository (huggingface_hub's layout)."""
    return Path(hf_home) / "hub" / f"{repo_type}s--{repo_id.replace('/', '--')}"


def mirror_path(mirror: Path, repo_id: str) -> Path:
    """`{mirror}/{repo_id}`; ValueError unless `repo_id` is a hub id (`org/name`, no `..`, never absolute)
    and the path stays under the mirror."""
    if not is_hub_id(repo_id):
        raise ValueError(f"{repo_id!r} is not a hub id ('org/name', no '..', never a path)")
    root = Path(os.path.abspath(mirror))
    src = Path(os.path.normpath(root / repo_id))
    if not src.is_relative_to(root) or src == root:
        raise ValueError(f"{repo_id!r} leads out of ${MIRROR_ENV}={mirror}")
    return src


def _from_mirror(
    mirror: Path, repo_id: str, repo_type: RepoType, revision: str | None, hf_home: Path
) -> Path:
    src = mirror_path(mirror, repo_id)
    if not src.is_dir():
        raise FileNotFoundError(f"${MIRROR_ENV}={mirror}: no {repo_type} {repo_id!r} (expected {src}/)")
    if revision is None:
        blob = "".join(f"{k}:{v['sha256']}\n" for k, v in file_hashes(src).items())
        revision = "mirror-" + hashlib.sha256(blob.encode()).hexdigest()[:33]
    repo = repo_cache_dir(hf_home, repo_id, repo_type)
    snap = repo / "snapshots" / revision
    if not snap.is_dir():
        tmp = snap.with_name(f".{revision}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp)
        tmp.rename(snap)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    return snap


def _from_hub(repo_id: str, repo_type: RepoType, revision: str | None, hf_home: Path) -> Path:
    from huggingface_hub import snapshot_download

    return Path(
        snapshot_download(
            repo_id=repo_id, repo_type=repo_type, revision=revision, cache_dir=str(Path(hf_home) / "hub")
        )
    )


def fetch_snapshot(
    repo_id: str,
    *,
    repo_type: RepoType,
    revision: str | None,
    hf_home: str | Path,
    mirror: str | Path | None = None,
) -> dict:
    """Download (or copy from `mirror`, default `$FP8RL_HUB_MIRROR`) one repository into `hf_home` and
    return its record (see the module docstring). `revision` None takes the default branch and records
    the commit it resolved to."""
    if not is_hub_id(repo_id):  # never a path into the mirror or the cache
        raise ValueError(f"{repo_id!r} is not a hub id ('org/name', no '..', never a path)")
    hf_home = Path(hf_home).resolve()
    mirror = mirror if mirror is not None else os.environ.get(MIRROR_ENV) or None
    if mirror:
        snap = _from_mirror(Path(mirror), repo_id, repo_type, revision, hf_home)
    else:
        snap = _from_hub(repo_id, repo_type, revision, hf_home)
    files = file_hashes(snap)
    if not files:
        raise ValueError(f"{repo_type} {repo_id!r} at {revision or 'main'}: the snapshot {snap} is empty")
    return {
        "repo_id": repo_id,
        "repo_type": repo_type,
        "revision_requested": revision,
        "revision": snap.name,
        "path": str(snap),
        "hf_home": str(hf_home),
        "source": f"mirror:{Path(mirror).resolve()}" if mirror else "hub",
        "files": files,
        "bytes": sum(int(f["bytes"]) for f in files.values()),
    }


def read_record(path: str | Path) -> dict:
    """A record written by the fetch rules (one snapshot, or `{"datasets": {repo_id: snapshot}}`);
    ValueError naming the file when it is missing or broken, or
    its snapshot is gone from the cache."""
    import json

    path = Path(path)
    try:
        record = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a hub record ({exc})") from None
    snaps = record["datasets"].values() if "datasets" in record else [record]
    for snap in snaps:
        where = Path(snap.get("path", ""))
        if not where.is_dir():
            raise ValueError(f"{path}: snapshot {where} is missing (is hub.home shared with this node?)")
    return record
