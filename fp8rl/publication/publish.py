"""`publish_tier`: copy a tier's report into `{results_dir}/published/{tier}/` with provenance.

What lands there: `tables/*.csv|md`, `plots/*.png|svg`, `report.html`, `report.json` (exactly the files
of `ReportPaths.outputs()`) and `provenance.json`:

    {"tier", "published" (UTC time), "git_commit", "config_digest", "packages", "machine",
     "numerics" (the kernel mode, CPU model and ISA of the publishing process: fp8rl.numerics),
     "containers": {name: <results/containers/{name}.json as written by the container rules>},
     "status_counts", "report_generated"}

Only a whole report is published: every output must exist and have the sha256 that `report.json`
records for it (`fp8rl report` writes report.json last), so a report killed half-way or a mix of two
reports is refused (exit 2) and the old publication stays. The copy is atomic: everything is assembled
in a temp folder `.{tier}.*.tmp` next to the destination, its copies checked against the hashes,
fsynced, and swapped in whole (`fp8rl.io.replace_dir`): where the filesystem can exchange two names in
one step a reader sees the old publication or the new one at every instant, never none and never a
mix; elsewhere the old one is renamed to `{tier}.old` first, and a publication killed between the two
renames is put back by the next `fp8rl publish` (`fp8rl.io.recover_dir`, as for checkpoints). The
tier's `report.lock` is held throughout, so no report is rebuilt under the copy. The destination (and its
`.old`) must be absent or a publication, and no results folder may be at, in or above it
(`check_destination`): publishing replaces it whole.

`verify_publication` checks a publication against its own `report.json` (every hashed file unchanged,
no file added, report.json's own recorded fields as the hashed report.html gives them, and the fields
provenance.json copies from report.json as report.json has them); `fp8rl quotes` and `fp8rl check`
run it before they read one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

from fp8rl import numerics
from fp8rl.config import PUBLISHED_DIR, ExperimentConfig
from fp8rl.io import atomic_write_json, fsync_tree, recover_dir, sha256_file, staged_dir
from fp8rl.provenance import git_commit, machine, package_versions
from fp8rl.report.paths import ReportPaths, report_flags


class PublishError(ValueError):
    """The tier cannot be published as asked (nothing was written), or a publication is not the one its
    manifest records."""


def container_digests(results_dir: Path) -> dict[str, dict]:
    """`results/containers/*.json` by name; an unreadable file is recorded as such, not skipped."""
    out: dict[str, dict] = {}
    for path in sorted((results_dir / "containers").glob("*.json")):
        try:
            out[path.stem] = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            out[path.stem] = {"error": f"unreadable {path}: {exc}"}
    return out


# the optional parts of a report that report.json records as flags, and those it records only through
# the hash of their table (ReportPaths' flag -> its table)
MANIFEST_FLAGS = ("mechanism", "stability", "study", "heldout")
PART_TABLES = {"acceptance": "acceptance", "samples": "failure_text", "failure_search": "failure_search"}


def _manifest_flags(manifest: Path) -> dict[str, bool]:
    """Which optional parts a report has, read off its report.json alone (a publish without `--config`):
    the flags it records, and the parts whose table it hashes."""
    try:
        doc = json.loads(manifest.read_text())
        flags = {key: bool(doc.get(key)) for key in MANIFEST_FLAGS}
        files = doc.get("files") or {}
    except (OSError, json.JSONDecodeError, AttributeError):
        return {}  # check_publishable reports the missing or unreadable manifest
    return flags | {key: f"tables/{name}.csv" in files for key, name in PART_TABLES.items()}


def check_publishable(tier: str, results_dir: Path, cfg: ExperimentConfig | None) -> tuple[ReportPaths, dict]:
    """The report paths and manifest; PublishError naming what is wrong before anything is written.

    The optional parts (the mechanism, stability, study, acceptance, text at failure, failure search)
    belong to the report when the config has them, or, without a config, when the report's manifest
    records them (`_manifest_flags`)."""
    if cfg is not None:
        flags = report_flags(cfg)
        paths = ReportPaths.for_tier(results_dir, tier, **flags)
    else:
        paths = ReportPaths.for_tier(results_dir, tier)
        paths = ReportPaths.for_tier(results_dir, tier, **_manifest_flags(paths.manifest))
    if cfg is not None and cfg.tier != tier:
        raise PublishError(f"TIER {tier!r} does not match the config's tier {cfg.tier!r}")
    missing = [str(p) for p in paths.outputs() if not p.is_file()]
    if missing:
        raise PublishError(
            f"no complete report for tier {tier!r} under {paths.root} (run `fp8rl report` first); "
            f"missing: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}"
        )
    try:
        manifest = json.loads(paths.manifest.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PublishError(
            f"{paths.manifest}: unreadable ({exc}); rebuild the report with `fp8rl report`"
        ) from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise PublishError(
            f"{paths.manifest}: records no hashes of the report's files (written by an older fp8rl, or "
            "damaged); rebuild the report with `fp8rl report`"
        )
    if cfg is not None and manifest.get("config_digest") != cfg.digest():
        raise PublishError(
            f"{paths.manifest}: the report was built from config digest {manifest.get('config_digest')}, "
            f"but the given config (with its --set overrides) has digest {cfg.digest()}; "
            "rebuild the report with this config or publish with the config it was built from"
        )
    return paths, manifest


def verify_outputs(paths: ReportPaths, manifest: dict, root: Path | None = None) -> None:
    """PublishError naming the first output under `root` (default: the report's own folder) whose sha256
    is not the one report.json records: the files are not all of one report."""
    root = root if root is not None else paths.root
    files = manifest.get("files") or {}
    for out in paths.outputs():
        if out == paths.manifest:
            continue
        rel = out.relative_to(paths.root).as_posix()
        if files.get(rel) != sha256_file(root / rel):
            raise PublishError(
                f"{out}: not the file {paths.manifest.name} records (sha256 differs: the report was "
                "interrupted, or its files changed since); rebuild the report with `fp8rl report`"
            )


# Files of a publication that report.json does not hash: itself, and what `publish_tier` adds.
UNHASHED = ("report.json", "provenance.json")


def verify_publication(root: str | Path, *, publication: bool = True) -> dict:
    """A publication's (or a report folder's) `report.json` manifest, after checking that every file it
    hashes has that sha256 and, for a publication, that no other file sits beside them (`UNHASHED`
    apart). A fresh tier folder (`publication=False`) holds its runs, bases, logs and configs beside the
    report's files, so only the hashed files are checked there. PublishError naming the first file that
    was edited, removed or added since the report was built: whatever reads a publication (`fp8rl
    quotes`, `fp8rl check`) calls this first, so a tampered table is refused, not quoted or used as a
    band."""
    root = Path(root)
    manifest_path = root / "report.json"
    if not manifest_path.is_file():
        raise PublishError(
            f"{root}: no report.json: not a report or publication (`fp8rl report`, `fp8rl publish`)"
        )
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PublishError(f"{manifest_path}: unreadable ({exc})") from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not files:
        raise PublishError(f"{manifest_path}: records no hashes of the report's files")
    hint = "the publication was edited since it was built; restore it (git checkout) or publish it again"
    for rel, digest in sorted(files.items()):
        path = root / rel
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise PublishError(f"{manifest_path}: records {rel!r}, not a file of the publication")
        if not path.is_file():
            raise PublishError(f"{path}: missing, though {manifest_path.name} records it; {hint}")
        if sha256_file(path) != digest:
            raise PublishError(f"{path}: not the file {manifest_path.name} records (sha256 differs); {hint}")
    if disagreement := _unlike_page(manifest, root / "report.html" if "report.html" in files else None):
        raise PublishError(f"{manifest_path}: {disagreement}; {hint}")
    if not publication:
        return manifest
    if disagreement := _unlike_provenance(manifest, root / "provenance.json"):
        raise PublishError(f"{root / 'provenance.json'}: {disagreement}; {hint}")
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if (path.is_file() or path.is_symlink()) and rel not in files and rel not in UNHASHED:
            raise PublishError(f"{path}: not one of the files {manifest_path.name} records; {hint}")
    return manifest


def page_fragments(manifest: dict) -> dict[str, str]:
    """{report.json field: how report.html renders it} for the fields the page must agree on (KeyError,
    TypeError and the like where report.json lacks one or holds the wrong type)."""
    from fp8rl.report import html
    from fp8rl.report.base_models import numerics_line

    out = {
        "config_digest": html.header_row("config digest", manifest["config_digest"]),
        "git_commit": html.header_row("git commit", manifest["git_commit"] or "unknown"),
        "generated": html.header_row("generated", manifest["generated"]),
        "numerics": html.header_row("numerics", numerics_line(manifest["numerics"])),
        "status_counts": html.status_line(manifest["status_counts"]),
    }
    if manifest["problems"]:
        out["problems"] = html.problems_heading(len(manifest["problems"]))
    if manifest.get("notes"):  # reports before data notes were split off have none
        out["notes"] = html.notes_heading(len(manifest["notes"]))
    control = manifest.get("control") or {}
    if control.get("comparison_void"):
        out["control"] = html.banner_line(control["statement"])
    return out


def _unlike_page(manifest: dict, page: Path | None) -> str | None:
    """What `report.json` records that the hashed report.html, written from the same values by the same
    build, does not say (None when they agree). report.json cannot hold its own hash, so its recorded
    fields are checked against the page's renderings of them instead (`page_fragments`): the config
    digest, git commit, build time, numerics, run counts, data problem and note counts and void banner."""
    if page is None:
        return "records no hash of report.html, the page its fields are checked against"
    try:
        text = page.read_text(encoding="utf-8")
        expected = page_fragments(manifest)
    except (OSError, UnicodeDecodeError, KeyError, TypeError, AttributeError, ValueError) as exc:
        return f"its fields cannot be checked against report.html ({type(exc).__name__}: {exc})"
    for field, fragment in expected.items():
        if fragment not in text:
            return f"its {field!r} is not what report.html says"
    if "problems" not in expected and "<h2>Data problems (" in text:
        return "its 'problems' is not what report.html says"
    if "notes" not in expected and "<h2>Data notes (" in text:
        return "its 'notes' is not what report.html says"
    return None


# provenance.json's fields that copy report.json's (the publish may run at a later commit than the report).
PROVENANCE_COPIES = {"tier": "tier", "config_digest": "config_digest", "status_counts": "status_counts",
                     "report_generated": "generated"}  # fmt: skip


def _unlike_provenance(manifest: dict, path: Path) -> str | None:
    """What provenance.json (written by the publish, hashed by nothing) says against report.json in the
    fields it copies from it (PROVENANCE_COPIES); None when they agree or a publication has none."""
    if not path.exists():
        return None
    try:
        prov = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"unreadable ({exc})"
    if not isinstance(prov, dict):
        return "not a JSON object"
    for key, field in PROVENANCE_COPIES.items():
        if prov.get(key) != manifest.get(field):
            return f"its {key!r} is not report.json's {field!r}"
    return None


def _publication_names() -> frozenset[str]:
    """Every file name a publication of any tier can hold, relative to its folder."""
    names = set(UNHASHED)
    parts = [f.name for f in dataclasses.fields(ReportPaths) if f.type in (bool, "bool")]  # every flag
    every_part = ReportPaths(Path(), **dict.fromkeys(parts, True))
    names.update(p.as_posix() for p in every_part.outputs())
    return frozenset(names)


def is_publication(folder: Path) -> bool:
    """`folder` is a directory (not a link) holding nothing but a publication's files, by name: a report's
    outputs and `UNHASHED`. Neither the hashes nor completeness are checked: an edited publication, or
    the `.old` copy of one whose removal was killed half-way, is still one that publishing may replace."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    names = _publication_names()
    for path in folder.rglob("*"):
        if path.is_symlink() or (not path.is_dir() and path.relative_to(folder).as_posix() not in names):
            return False
    return True


# A folder holding one of these is a tier's results (runs, digest records), never a place to publish to.
RESULTS_MARKERS = ("runs", "digests")


def check_destination(dest: Path, results_dir: Path, tier: str) -> None:
    """PublishError, before anything is touched, when publishing to `dest` could remove what is not a
    publication: `dest` (or the `dest.old` a publication moves aside) exists and is not a publication,
    or `dest` is, holds or lies inside a results folder (the tier's `{results_dir}/{tier}`, or any folder
    with `runs/` or `digests/`). Publishing replaces `dest` whole and removes `dest.old`."""
    hint = "publish to a new folder or to an earlier publication (default {results_dir}/published/TIER)"
    for path in (dest, dest.with_name(dest.name + ".old")):
        if (path.exists() or path.is_symlink()) and not is_publication(path):
            raise PublishError(
                f"{path}: exists and is not a publication (it holds files other than a report's); "
                f"publishing would remove what it holds. Move it away, or {hint}"
            )
    real = dest.resolve()
    tier_root = (results_dir / tier).resolve()
    for results in (tier_root, results_dir.resolve()):
        if real == results or results.is_relative_to(real):
            raise PublishError(f"{dest}: is or holds the results folder {results}; {hint}")
    for folder in (real, *real.parents):
        if folder == tier_root or any((folder / m).is_dir() for m in RESULTS_MARKERS):
            raise PublishError(
                f"{dest}: lies inside the results folder {folder} (it holds runs or digest records); {hint}"
            )


def _recover_legacy(dest: Path) -> None:
    """A publication killed under earlier versions of this code left the old copy in `.{tier}.old-*/{tier}`: put it back
    when there is no publication, remove it otherwise."""
    for legacy in sorted(dest.parent.glob(f".{dest.name}.old-*")):
        if not dest.exists() and (legacy / dest.name).is_dir():
            os.replace(legacy / dest.name, dest)
        shutil.rmtree(legacy, ignore_errors=True)
    for legacy in dest.parent.glob(f".{dest.name}.tmp-*"):
        shutil.rmtree(legacy, ignore_errors=True)


def publish_tier(
    tier: str,
    results_dir: str | Path = "results",
    cfg: ExperimentConfig | None = None,
    *,
    dest: str | Path | None = None,
) -> Path:
    """Publish the tier's report to `dest` (default `{results_dir}/published/{tier}`); returns it.
    PublishError (nothing written) when the report is not there whole; `RunDirLocked` while a report or
    publication of the tier runs."""
    from fp8rl.locks import hold_lock
    from fp8rl.report.build import LOCK_HINT

    results_dir = Path(results_dir)
    paths, _ = check_publishable(tier, results_dir, cfg)
    dest = Path(dest) if dest is not None else results_dir / PUBLISHED_DIR / tier
    with hold_lock(paths.lock_file, LOCK_HINT):
        paths, manifest = check_publishable(tier, results_dir, cfg)  # again, now that no report can run
        verify_outputs(paths, manifest)
        check_destination(dest, results_dir, tier)
        dest.parent.mkdir(parents=True, exist_ok=True)
        _recover_legacy(dest)
        recover_dir(dest)  # what a killed publication left
        with staged_dir(dest, settle=fsync_tree) as tmp:
            umask = os.umask(0)
            os.umask(umask)
            tmp.chmod(0o777 & ~umask)  # mkdtemp makes 0700; the publication is for everyone to read
            for src in paths.outputs():
                target = tmp / src.relative_to(paths.root)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, target)
            verify_outputs(paths, manifest, root=tmp)  # what is published, not only what was there
            atomic_write_json(
                tmp / "provenance.json",
                {
                    "tier": tier,
                    "published": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
                    "git_commit": git_commit(),
                    "config_digest": manifest.get("config_digest"),
                    "packages": package_versions(),
                    "machine": machine(),
                    "numerics": numerics.state(),
                    "containers": container_digests(results_dir),
                    "status_counts": manifest.get("status_counts"),
                    "report_generated": manifest.get("generated"),
                },
            )
    return dest
