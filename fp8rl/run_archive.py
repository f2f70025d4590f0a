"""The run archive: a tier's finished runs, kept in git, so a study longer than one machine's session
goes on where it stopped on the next machine instead of starting over.

A session's results folder does not outlive its machine, and a study such as the longform failure search
needs more CPU hours than one session has. `save_archive` copies what each finished run left that the
report and the DAG read — every file of the run directory except its checkpoints and TensorBoard logs
(`RUN_FILES`, the eval results under `eval/`) — and each base's held-out scores into
`{results_dir}/published/archive/{tier}/`, in the tier's own layout (`runs/{run id}/...`,
`base/{base}/eval/...`), with the Snakemake digest records of those files (`digests/{rule}/...`).
`metrics.jsonl` and `samples.jsonl` are stored gzipped (no name or time in the header, so the same run
stores the same bytes). `manifest.json` records the sha256 of every file as the run wrote it, each run's
status and base, and each base's `fingerprint`: the sha256 of its weights and files (`base_fingerprint`:
everything but `sft.json`, which records wall times, and `eval/`). Saving adds to the archive: a run
already archived and not in the results folder stays.

`restore_archive` puts the archived runs back into a results folder whose bases were rebuilt (the SFTs
are deterministic under `numerics: reproducible`; `snakemake ... --until sft` builds them): a run is
restored only when its base's fingerprint is the archived one (another base, from another config or
another kernel path, would give other runs), and never over a run directory that exists. The restored
files are new, so Snakemake takes them as newer than the bases and data; their digest records come with
them, so a run whose config sections changed since it was archived is still rerun by the DAG
(workflows/common.smk `ConfigTrigger`). Checkpoints are not archived: a restored run can be reported and
compared, not evaluated again or resumed.

Both write atomically: the archive is built beside its destination and swapped in whole
(`fp8rl.io.staged_dir`); each restored run's directory likewise. A file whose bytes are not the ones the
manifest records is named and nothing is restored.
"""

from __future__ import annotations

import gzip
import hashlib
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from fp8rl.config import ExperimentConfig
from fp8rl.config.base import ARCHIVE_DIR, PUBLISHED_DIR
from fp8rl.config.runs import RunSpec
from fp8rl.io import atomic_write, atomic_write_json, fsync_tree, loads_json, sha256_file, staged_dir
from fp8rl.provenance import git_commit
from fp8rl.run_files import (
    CONFIG_FILE,
    EVAL_DIR,
    METRICS_FILE,
    NOISE_FILE,
    RATIO_HIST_FILE,
    RUN_FILE,
    RUNS_DIR,
    SAMPLES_FILE,
    SUMMARY_FILE,
    THROUGHPUT_FILE,
)

MANIFEST_FILE = "manifest.json"
FORMAT = 1
DIGESTS_DIR = "digests"  # {tier}/digests/{rule}/{output}.digest: the DAG's records (workflows/common.smk)
# What a finished run's directory keeps besides eval/*.json; summary.json first, so a restored run's
# other files are never older than the file Snakemake takes for the run.
RUN_FILES = (SUMMARY_FILE, CONFIG_FILE, RUN_FILE, METRICS_FILE, SAMPLES_FILE, THROUGHPUT_FILE,
             RATIO_HIST_FILE, NOISE_FILE)  # fmt: skip
GZIPPED = (METRICS_FILE, SAMPLES_FILE)
BASE_RECORD_FILES = ("sft.json",)  # a base's files that differ between two identical SFTs (wall times)


class ArchiveError(ValueError):
    """The archive or the results folder is not as restoring or saving needs; the message names the file."""


def archive_dir(cfg: ExperimentConfig) -> Path:
    """`{results_dir}/published/archive/{tier}`."""
    return Path(cfg.results_dir) / PUBLISHED_DIR / ARCHIVE_DIR / cfg.tier


def tier_dir(cfg: ExperimentConfig) -> Path:
    return Path(cfg.results_dir) / cfg.tier


def base_name(cfg: ExperimentConfig, spec: RunSpec) -> str:
    """The folder under `{tier}/base/` a run starts from: `cfg.base_of` for a scratch model's SFT, the
    model's name for a pretrained one (workflows/common.smk `base_record`)."""
    return cfg.base_of(spec.model, spec.seed) if cfg.model(spec.model).source == "scratch" else spec.model


def base_fingerprint(base: Path) -> str | None:
    """sha256 over the relative path and bytes of every file of a base folder except `sft.json` and
    `eval/` (what two SFTs of one config and kernel path write alike); None when it has no file."""
    h, seen = hashlib.sha256(), False
    for p in sorted(base.rglob("*")):
        rel = p.relative_to(base)
        if not p.is_file() or rel.parts[0] == EVAL_DIR or rel.as_posix() in BASE_RECORD_FILES:
            continue
        h.update(f"{rel.as_posix()}\0{sha256_file(p)}\n".encode())
        seen = True
    return h.hexdigest() if seen else None


def _stored_name(rel: str) -> str:
    return f"{rel}.gz" if Path(rel).name in GZIPPED else rel


def _store(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    if src.name in GZIPPED:
        with (
            open(src, "rb") as fin,
            open(dest, "wb") as raw,
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as out,
        ):
            shutil.copyfileobj(fin, out)
    else:
        shutil.copyfile(src, dest)


def _read_stored(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()


@dataclass
class Manifest:
    """`manifest.json`: `files` (path under the tier folder -> sha256 of the file as the run wrote it),
    `runs` (run id -> `status`, `base`, `archived` UTC time, `git_commit` of the archiving checkout) and
    `bases` (base name -> fingerprint)."""

    tier: str
    files: dict[str, str] = field(default_factory=dict)
    runs: dict[str, dict] = field(default_factory=dict)
    bases: dict[str, str] = field(default_factory=dict)

    @classmethod
    def read(cls, root: Path, tier: str) -> Manifest:
        path = root / MANIFEST_FILE
        if not path.is_file():
            return cls(tier)
        try:
            data = loads_json(path.read_bytes())
        except ValueError as exc:
            raise ArchiveError(f"{path}: not JSON ({exc})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("tier") != tier:
            raise ArchiveError(f"{path}: not a format-{FORMAT} run archive of tier {tier!r}")
        return cls(tier, data.get("files", {}), data.get("runs", {}), data.get("bases", {}))

    def as_json(self) -> dict:
        return {"format": FORMAT, "tier": self.tier, "updated": datetime.now(UTC).isoformat(timespec="seconds"),
                "bases": dict(sorted(self.bases.items())), "runs": dict(sorted(self.runs.items())),
                "files": dict(sorted(self.files.items()))}  # fmt: skip

    def run_files(self, run_id: str) -> list[str]:
        prefix = f"{RUNS_DIR}/{run_id}/"
        return [rel for rel in self.files if rel.startswith(prefix)]

    def base_files(self, base: str) -> list[str]:
        prefix = f"base/{base}/{EVAL_DIR}/"
        return [rel for rel in self.files if rel.startswith(prefix)]

    def digest_records(self, rels: list[str]) -> list[str]:
        return [rel for rel in self.files if rel.startswith(f"{DIGESTS_DIR}/") and
                rel.split("/", 2)[2].removesuffix(".digest") in rels]  # fmt: skip


def verify_archive(root: Path, manifest: Manifest) -> None:
    """ArchiveError naming the first archived file that is missing or whose bytes are not the recorded ones."""
    for rel, digest in manifest.files.items():
        stored = root / _stored_name(rel)
        if not stored.is_file():
            raise ArchiveError(f"{stored}: listed in {root / MANIFEST_FILE} but missing")
        if hashlib.sha256(_read_stored(stored)).hexdigest() != digest:
            raise ArchiveError(f"{stored}: its content is not the one {root / MANIFEST_FILE} records")


def finished_runs(cfg: ExperimentConfig) -> list[str]:
    """Run ids under the tier's runs folder that wrote `summary.json` (finished: ok, diverged or failed)."""
    runs = tier_dir(cfg) / RUNS_DIR
    return (
        sorted(p.parent.relative_to(runs).as_posix() for p in runs.rglob(SUMMARY_FILE))
        if runs.is_dir()
        else []
    )


def _local_run_files(tier: Path, run_id: str) -> list[str]:
    run = tier / RUNS_DIR / run_id
    names = [f"{RUNS_DIR}/{run_id}/{n}" for n in RUN_FILES if (run / n).is_file()]
    evals = sorted((run / EVAL_DIR).glob("*.json")) if (run / EVAL_DIR).is_dir() else []
    return names + [p.relative_to(tier).as_posix() for p in evals]


def _local_digest_records(tier: Path, rels: list[str]) -> list[str]:
    digests = tier / DIGESTS_DIR
    if not digests.is_dir():
        return []
    return [f"{DIGESTS_DIR}/{rule.name}/{rel}.digest" for rule in sorted(digests.iterdir())
            for rel in rels if (rule / f"{rel}.digest").is_file()]  # fmt: skip


@dataclass
class SaveResult:
    archive: Path
    saved: list[str]
    kept: list[str]


def save_archive(cfg: ExperimentConfig) -> SaveResult:
    """Add every finished run of the tier (and the held-out scores and fingerprint of its base) to the
    archive, keeping the archived runs the results folder does not hold. ArchiveError when the tier has
    no finished run or a run's base folder is gone (its fingerprint could not be recorded)."""
    tier, dest = tier_dir(cfg), archive_dir(cfg)
    old = Manifest.read(dest, cfg.tier)
    verify_archive(dest, old)
    local = finished_runs(cfg)
    if not local:
        raise ArchiveError(f"{tier / RUNS_DIR}: no finished run (no summary.json) to archive")
    new = Manifest(cfg.tier)
    sources: dict[str, Path] = {}  # path under the tier -> the file to store
    commit = git_commit()
    for run_id in local:
        spec = RunSpec.parse(run_id)
        base = base_name(cfg, spec)
        fingerprint = base_fingerprint(tier / "base" / base)
        if fingerprint is None:
            raise ArchiveError(
                f"{tier / 'base' / base}: the base of {run_id} is gone; archive before removing it"
            )
        summary = loads_json((tier / RUNS_DIR / run_id / SUMMARY_FILE).read_bytes())
        rels = _local_run_files(tier, run_id)
        base_evals = sorted((tier / "base" / base / EVAL_DIR).glob("*.json"))
        rels += [p.relative_to(tier).as_posix() for p in base_evals]
        for rel in rels + _local_digest_records(tier, rels):
            sources[rel] = tier / rel
        new.runs[run_id] = {"status": summary.get("status"), "base": base,
                            "archived": datetime.now(UTC).isoformat(timespec="seconds"), "git_commit": commit}  # fmt: skip
        new.bases[base] = fingerprint
    kept = sorted(set(old.runs) - set(new.runs))
    for run_id in kept:
        base = old.runs[run_id]["base"]
        if base in new.bases and new.bases[base] != old.bases[base]:
            raise ArchiveError(
                f"{tier / 'base' / base}: not the base archived run {run_id} started from (fingerprint "
                f"{new.bases[base][:12]} here, {old.bases[base][:12]} archived); restore or remove that run first"
            )
        new.runs[run_id], new.bases[base] = old.runs[run_id], old.bases[base]
        rels = old.run_files(run_id) + old.base_files(base)
        for rel in rels + old.digest_records(rels):
            sources.setdefault(rel, dest / _stored_name(rel))
    with staged_dir(dest, settle=fsync_tree) as tmp:
        for rel, src in sorted(sources.items()):
            if src.is_relative_to(dest):  # already stored: copy the stored bytes
                (tmp / _stored_name(rel)).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, tmp / _stored_name(rel))
                new.files[rel] = old.files[rel]
            else:
                _store(src, tmp / _stored_name(rel))
                new.files[rel] = sha256_file(src)
        atomic_write_json(tmp / MANIFEST_FILE, new.as_json())
    return SaveResult(dest, local, kept)


@dataclass
class RestoreResult:
    restored: list[str]
    present: list[str]  # a run directory already in the results folder: left as it is
    refused: dict[str, str]  # run id -> why (its base is missing or another)


def restore_archive(cfg: ExperimentConfig) -> RestoreResult:
    """Copy the archived runs into the tier's results folder where their base is the archived one and
    their directory does not exist; the base's held-out scores and the files' digest records with them."""
    tier, src = tier_dir(cfg), archive_dir(cfg)
    if not (src / MANIFEST_FILE).is_file():
        raise ArchiveError(
            f"{src / MANIFEST_FILE}: no run archive of tier {cfg.tier!r} (`fp8rl archive save`)"
        )
    manifest = Manifest.read(src, cfg.tier)
    verify_archive(src, manifest)
    result = RestoreResult([], [], {})
    for run_id, info in manifest.runs.items():
        run_dir, base = tier / RUNS_DIR / run_id, info["base"]
        here = base_fingerprint(tier / "base" / base)
        if run_dir.exists():
            result.present.append(run_id)
        elif here is None:
            result.refused[run_id] = (
                f"its base {tier / 'base' / base} is not built (snakemake ... --until sft)"
            )
        elif here != manifest.bases[base]:
            result.refused[run_id] = (
                f"{tier / 'base' / base} is not the base it was trained from (fingerprint {here[:12]}, archived {manifest.bases[base][:12]})"
            )
        else:
            _restore_run(src, tier, manifest, run_id, base)
            result.restored.append(run_id)
    return result


def _restore_run(src: Path, tier: Path, manifest: Manifest, run_id: str, base: str) -> None:
    """Write one archived run's directory whole (summary.json first, eval results last), then its base's
    scores where the rebuilt base has none yet, then the digest records of what was written."""
    rank = {name: i for i, name in enumerate(RUN_FILES)}
    run_files = sorted(manifest.run_files(run_id), key=lambda rel: (rank.get(Path(rel).name, len(rank)), rel))
    with staged_dir(tier / RUNS_DIR / run_id, settle=fsync_tree) as tmp:
        for rel in run_files:
            out = tmp / Path(rel).relative_to(f"{RUNS_DIR}/{run_id}")
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(_read_stored(src / _stored_name(rel)))
    base_files = [rel for rel in manifest.base_files(base) if not (tier / rel).exists()]
    for rel in base_files + manifest.digest_records(run_files + base_files):
        data = _read_stored(src / _stored_name(rel))
        atomic_write(tier / rel, lambda tmp, data=data: tmp.write_bytes(data))


def describe_save(result: SaveResult) -> str:
    return (f"archived {len(result.saved)} finished run(s) into {result.archive}"
            + (f"; kept {len(result.kept)} archived run(s) this results folder does not hold" if result.kept else ""))  # fmt: skip


def describe_restore(result: RestoreResult) -> str:
    lines = [f"restored {len(result.restored)} run(s); {len(result.present)} already here, left as they are"]
    lines += [f"  not restored {run_id}: {why}" for run_id, why in sorted(result.refused.items())]
    return "\n".join(lines)
