"""The run archive: a tier's finished runs and the bases they started from, kept in git, so a study
longer than one machine's session goes on where it stopped on the next machine instead of starting over.

A session's results folder does not outlive its machine, and a study such as the longform failure search
needs more CPU hours than one session has. `save_archive` copies into
`{results_dir}/published/archive/{tier}/`, in the tier's own layout, what the report and the DAG read:
each finished run's directory without its checkpoints and TensorBoard logs (`runs/{run id}/...`:
`RUN_FILES` and `eval/*.json`), the base each run started from, whole (`base/{base}/...`: weights,
tokenizer, `sft.json`, held-out scores), and the Snakemake digest records of those files
(`digests/{rule}/...`). `metrics.jsonl` and `samples.jsonl` are stored gzipped (no name or time in the
header, so the same run stores the same bytes). `manifest.json` records the sha256 of every file as it
was written, each run's status and base, each base's `fingerprint` (`folder_fingerprint`: every file
but `sft.json`, which records wall times, and `eval/`) and the data's. Saving adds to the archive: a
run already archived and not in the results folder stays.

The bases travel because they are not the same on every machine: the pinned kernel path gives the same
bits on CPUs of one vendor, but an AMD EPYC and an Intel Xeon train different bases from the same
config (docs/numerics.md). `restore_archive` needs the tier's data built (`snakemake ... --until data`;
the data step is integer work, the same everywhere, and its fingerprint is checked). It puts each
archived base back where the results folder has none, so the DAG trains no SFT, and each run whose base
is the archived one back where its directory does not exist; a base already built with another
fingerprint keeps its runs out (named, exit 1). The restored files are new, so Snakemake takes them as
newer than the data; their digest records come with them, so a run whose config sections changed since
it was archived is still rerun by the DAG (workflows/common.smk `ConfigTrigger`). Run checkpoints are
not archived: a restored run is reported and compared, not evaluated again or resumed.

`restore_bases_from` puts back only bases, out of another tier's archive, for a study that continues
that tier's on the same bases; each only where its archived SFT digest is the config's.

Both write atomically: the archive is built beside its destination and swapped in whole
(`fp8rl.io.staged_dir`), and so is each restored run or base directory. A file whose bytes are not
the ones the manifest records is named and nothing is restored.
"""

from __future__ import annotations

import gzip
import hashlib
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from fp8rl.config import ARCHIVE_DIR, PUBLISHED_DIR, ExperimentConfig
from fp8rl.config.runs import RunSpec, expand_matrix
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
    SFT_RECORD,
    SUMMARY_FILE,
    THROUGHPUT_FILE,
    base_fingerprint,
    folder_fingerprint,
)

MANIFEST_FILE = "manifest.json"
FORMAT = 1
DIGESTS_DIR = "digests"  # {tier}/digests/{rule}/{output}.digest: the DAG's records (workflows/common.smk)
# What a finished run's directory keeps besides eval/*.json; summary.json first, so a restored run's
# other files are never older than the file Snakemake takes for the run.
RUN_FILES = (SUMMARY_FILE, CONFIG_FILE, RUN_FILE, METRICS_FILE, SAMPLES_FILE, THROUGHPUT_FILE,
             RATIO_HIST_FILE, NOISE_FILE)  # fmt: skip
GZIPPED = (METRICS_FILE, SAMPLES_FILE)
DATA_DIR = "data"  # {tier}/data: the data step's output (workflows/data.smk)


class ArchiveError(ValueError):
    """The archive or the results folder is not as restoring or saving needs; the message names the file."""


def archive_dir(cfg: ExperimentConfig, tier: str | None = None) -> Path:
    """`{results_dir}/published/archive/{tier}` (the config's tier unless `tier` names another)."""
    return Path(cfg.results_dir) / PUBLISHED_DIR / ARCHIVE_DIR / (tier or cfg.tier)


def tier_dir(cfg: ExperimentConfig) -> Path:
    return Path(cfg.results_dir) / cfg.tier


def base_name(cfg: ExperimentConfig, spec: RunSpec) -> str:
    """The folder under `{tier}/base/` a run starts from: `cfg.base_of` for a scratch model's SFT, the
    model's name for a pretrained one (workflows/common.smk `base_record`)."""
    return cfg.base_of(spec.model, spec.seed) if cfg.model(spec.model).source == "scratch" else spec.model


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
    """`manifest.json`: `files` (path under the tier folder -> sha256 of the file as it was written),
    `runs` (run id -> `status`, `base`, `archived` UTC time, `git_commit` of the archiving checkout),
    `bases` (base name -> fingerprint) and `data` (the data folder's fingerprint)."""

    tier: str
    files: dict[str, str] = field(default_factory=dict)
    runs: dict[str, dict] = field(default_factory=dict)
    bases: dict[str, str] = field(default_factory=dict)
    data: str | None = None

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
        return cls(tier, data.get("files", {}), data.get("runs", {}), data.get("bases", {}), data.get("data"))

    def as_json(self) -> dict:
        return {"format": FORMAT, "tier": self.tier, "updated": datetime.now(UTC).isoformat(timespec="seconds"),
                "data": self.data, "bases": dict(sorted(self.bases.items())),
                "runs": dict(sorted(self.runs.items())), "files": dict(sorted(self.files.items()))}  # fmt: skip

    def run_files(self, run_id: str) -> list[str]:
        prefix = f"{RUNS_DIR}/{run_id}/"
        return [rel for rel in self.files if rel.startswith(prefix)]

    def base_files(self, base: str) -> list[str]:
        prefix = f"base/{base}/"
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
    unevaluated: list[str] = field(default_factory=list)  # finished, but an eval result is missing


def has_eval_results(run: Path, eval_suites: tuple[str, ...]) -> bool:
    """Whether the run directory `run` holds the result file of every suite in `eval_suites`."""
    return all((run / EVAL_DIR / f"{s}.json").is_file() for s in eval_suites)


def save_archive(cfg: ExperimentConfig, eval_suites: tuple[str, ...] = ()) -> SaveResult:
    """Add every finished run of the tier that has the result file of each suite in `eval_suites` (the
    suites the config turns on: a run restored without its checkpoint cannot be evaluated later), and
    the base it started from, to the archive, keeping the archived runs this results folder does not
    hold or has not evaluated yet. ArchiveError when no run can be archived, a run's base folder or the
    data is gone, or a base here is not the one archived runs started from."""
    tier, dest = tier_dir(cfg), archive_dir(cfg)
    old = Manifest.read(dest, cfg.tier)
    verify_archive(dest, old)
    finished = finished_runs(cfg)
    unevaluated = [r for r in finished if not has_eval_results(tier / RUNS_DIR / r, eval_suites)]
    local = [r for r in finished if r not in unevaluated]
    if not local:
        raise ArchiveError(
            f"{tier / RUNS_DIR}: no finished run (summary.json) with its eval results ({', '.join(eval_suites)}) "
            "to archive"
        )
    new = Manifest(cfg.tier, data=folder_fingerprint(tier / DATA_DIR))
    if new.data is None or (old.data is not None and old.data != new.data):
        raise ArchiveError(
            f"{tier / DATA_DIR}: "
            + ("missing" if new.data is None else "not the data the archived runs trained on")
        )
    sources: dict[str, Path] = {}  # path under the tier -> the file to store
    commit, now = git_commit(), datetime.now(UTC).isoformat(timespec="seconds")
    for run_id in local:
        base = base_name(cfg, RunSpec.parse(run_id))
        fingerprint = base_fingerprint(tier / "base" / base)
        if fingerprint is None:
            raise ArchiveError(
                f"{tier / 'base' / base}: the base of {run_id} is gone; archive before removing it"
            )
        if old.bases.get(base, fingerprint) != fingerprint:
            raise ArchiveError(
                f"{tier / 'base' / base}: not the base the archived runs of {base} started from (fingerprint "
                f"{fingerprint[:12]} here, {old.bases[base][:12]} archived); restore the archive into a fresh "
                "results folder first"
            )
        summary = loads_json((tier / RUNS_DIR / run_id / SUMMARY_FILE).read_bytes())
        rels = _local_run_files(tier, run_id) + sorted(
            p.relative_to(tier).as_posix() for p in (tier / "base" / base).rglob("*") if p.is_file()
        )
        for rel in rels + _local_digest_records(tier, rels):
            sources[rel] = tier / rel
        new.runs[run_id] = {
            "status": summary.get("status"),
            "base": base,
            "archived": now,
            "git_commit": commit,
        }
        new.bases[base] = fingerprint
    kept = sorted(set(old.runs) - set(new.runs))
    for run_id in kept:
        base = old.runs[run_id]["base"]
        new.runs[run_id], new.bases[base] = old.runs[run_id], old.bases[base]
        rels = old.run_files(run_id) + old.base_files(base)
        for rel in rels + old.digest_records(rels):
            sources.setdefault(rel, dest / _stored_name(rel))
    with staged_dir(dest, settle=fsync_tree) as tmp:
        for rel, src in sorted(sources.items()):
            if src.is_relative_to(dest):  # kept: copy the stored bytes
                (tmp / _stored_name(rel)).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, tmp / _stored_name(rel))
                new.files[rel] = old.files[rel]
            else:
                _store(src, tmp / _stored_name(rel))
                new.files[rel] = sha256_file(src)
        atomic_write_json(tmp / MANIFEST_FILE, new.as_json())
    return SaveResult(dest, local, kept, unevaluated)


@dataclass
class RestoreResult:
    restored: list[str]
    present: list[str]  # a run directory already in the results folder: left as it is
    refused: dict[str, str]  # run id -> why (a base is built here with another fingerprint)
    bases: list[str] = field(default_factory=list)  # the bases put back


def _checked_manifest(src: Path, archived_tier: str, tier: Path) -> Manifest:
    """The manifest of the archive `src` (of tier `archived_tier`) after checking every stored file and
    that `tier`'s data is built and is the data the archived runs trained on."""
    if not (src / MANIFEST_FILE).is_file():
        raise ArchiveError(
            f"{src / MANIFEST_FILE}: no run archive of tier {archived_tier!r} (`fp8rl archive save`)"
        )
    manifest = Manifest.read(src, archived_tier)
    verify_archive(src, manifest)
    data = folder_fingerprint(tier / DATA_DIR)
    if data is None:
        raise ArchiveError(
            f"{tier / DATA_DIR}: not built; first: snakemake ... --until data (same --configfile)"
        )
    if data != manifest.data:
        raise ArchiveError(
            f"{tier / DATA_DIR}: not the data the archived runs trained on (task or tokenizer changed?)"
        )
    return manifest


def restore_archive(cfg: ExperimentConfig) -> RestoreResult:
    """Put the archived bases back where the results folder has none, then every archived run whose base
    is the archived one and whose directory does not exist, each with its files' digest records.
    ArchiveError (nothing written) when there is no archive, a stored file is not the recorded one, or
    the tier's data is not built or is other data than the runs trained on."""
    tier, src = tier_dir(cfg), archive_dir(cfg)
    manifest = _checked_manifest(src, cfg.tier, tier)
    result = RestoreResult([], [], {})
    for base in manifest.bases:
        if base_fingerprint(tier / "base" / base) is None:
            _restore_files(src, tier, manifest, manifest.base_files(base), tier / "base" / base)
            result.bases.append(base)
    for run_id, info in manifest.runs.items():
        run_dir, base = tier / RUNS_DIR / run_id, info["base"]
        here = base_fingerprint(tier / "base" / base)
        if run_dir.exists():
            result.present.append(run_id)
        elif here != manifest.bases[base]:
            result.refused[run_id] = (
                f"{tier / 'base' / base} is not the base it was trained from (fingerprint {here[:12]}, archived "
                f"{manifest.bases[base][:12]}): remove that base to restore the archived one"
            )
        else:
            _restore_files(src, tier, manifest, manifest.run_files(run_id), run_dir)
            result.restored.append(run_id)
    return result


def restore_bases_from(cfg: ExperimentConfig, other: str) -> RestoreResult:
    """Put back, from the run archive of tier `other`, each archived base this config's matrix starts
    from and its results folder lacks, so its DAG trains no SFT for it: a study that continues another
    (the corrections' comparison on the failure search's bases) starts from the very bases the other's
    runs did. No run is restored: a run's train digest names its tier. A base is put back only when the
    archive's record of its SFT digest is this config's (`ExperimentConfig.base_digest`: the model's
    entry, `numerics`, `task` and `sft`); otherwise it is refused, named, and the DAG trains it here.
    ArchiveError (nothing written) as `restore_archive`: no archive, an edited file, data not built
    or other data."""
    if other == cfg.tier:
        raise ArchiveError(f"--bases-from {other}: that is this config's own tier; restore without it")
    tier, src = tier_dir(cfg), archive_dir(cfg, other)
    manifest = _checked_manifest(src, other, tier)
    result = RestoreResult([], [], {})
    needed = {base_name(cfg, spec): spec.model for spec in expand_matrix(cfg)}
    for base, model in sorted(needed.items()):
        if base not in manifest.bases or base_fingerprint(tier / "base" / base) is not None:
            continue
        record = f"{DIGESTS_DIR}/sft/base/{base}/{SFT_RECORD}.digest"
        archived = _read_stored(src / record).decode().strip() if record in manifest.files else None
        if archived != cfg.base_digest(model):
            result.refused[f"base {base}"] = (
                f"archived under SFT digest {archived}, this config's is {cfg.base_digest(model)} (the "
                f"model {model!r}, numerics, task or sft sections differ from tier {other!r}'s): the DAG trains it here"
            )
            continue
        _restore_files(src, tier, manifest, manifest.base_files(base), tier / "base" / base)
        result.bases.append(base)
    return result


def _restore_files(src: Path, tier: Path, manifest: Manifest, rels: list[str], folder: Path) -> None:
    """Write the archived files `rels` (all under `folder`) as `folder`, whole, in Snakemake's order (a
    run's summary.json or a base's weights first, eval results last), then their digest records."""
    rank = {name: i for i, name in enumerate((*RUN_FILES, SFT_RECORD))}

    def order(rel: str) -> tuple:
        return ("/eval/" in rel, rank.get(Path(rel).name, -1), rel)

    with staged_dir(folder, settle=fsync_tree) as tmp:
        for rel in sorted(rels, key=order):
            out = tmp / (tier / rel).relative_to(folder)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(_read_stored(src / _stored_name(rel)))
    for rel in manifest.digest_records(rels):
        data = _read_stored(src / _stored_name(rel))
        atomic_write(tier / rel, lambda tmp, data=data: tmp.write_bytes(data))


def describe_save(result: SaveResult) -> str:
    lines = [f"archived {len(result.saved)} finished run(s) into {result.archive}"
             + (f"; kept {len(result.kept)} archived run(s) not saved from here" if result.kept else "")]  # fmt: skip
    lines += [
        f"  not archived {r}: an eval result is missing (evaluate it first)" for r in result.unevaluated
    ]
    return "\n".join(lines)


def describe_restore(result: RestoreResult) -> str:
    lines = [f"restored {len(result.bases)} base(s) and {len(result.restored)} run(s); "
             f"{len(result.present)} run(s) already here, left as they are"]  # fmt: skip
    lines += [f"  not restored {run_id}: {why}" for run_id, why in sorted(result.refused.items())]
    return "\n".join(lines)
