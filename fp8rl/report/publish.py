"""`publish_tier`: copy a tier's report into `{results_dir}/published/{tier}/` with provenance.

What lands there: `tables/*.csv|md`, `plots/*.png|svg`, `report.html`, `report.json` (exactly the files
of `ReportPaths.outputs()`) and `provenance.json`:

    {"tier", "published" (UTC time), "git_commit", "config_digest", "packages", "machine",
     "containers": {name: <results/containers/{name}.json as written by the container rules>},
     "status_counts", "report_generated"}

The copy is atomic: everything is assembled in a temp folder next to the destination, which then
replaces the old one by rename, so a reader sees the old publication or the new one, never a mix.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from fp8rl.config import ExperimentConfig
from fp8rl.io import atomic_write_json
from fp8rl.provenance import git_commit, machine, package_versions
from fp8rl.report.paths import ReportPaths, has_dose_axis


class PublishError(Exception):
    """The tier cannot be published as asked (nothing was written)."""


def container_digests(results_dir: Path) -> dict[str, dict]:
    """`results/containers/*.json` by name; an unreadable file is recorded as such, not skipped."""
    out: dict[str, dict] = {}
    for path in sorted((results_dir / "containers").glob("*.json")):
        try:
            out[path.stem] = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            out[path.stem] = {"error": f"unreadable {path}: {exc}"}
    return out


def _manifest_flag(manifest: Path, key: str) -> bool:
    try:
        return bool(json.loads(manifest.read_text()).get(key))
    except (OSError, json.JSONDecodeError, AttributeError):
        return False  # check_publishable reports the missing or unreadable manifest


def check_publishable(tier: str, results_dir: Path, cfg: ExperimentConfig | None) -> tuple[ReportPaths, dict]:
    """The report paths and manifest; PublishError naming what is wrong before anything is written.

    The mechanism table and plots belong to the report when the config has FP8 conditions, or, without
    a config, when the report's manifest says it was built with them."""
    if cfg is not None:
        flags = {"mechanism": bool(cfg.matrix.conditions), "stability": has_dose_axis(cfg)}
        paths = ReportPaths.for_tier(results_dir, tier, **flags)
    else:
        paths = ReportPaths.for_tier(results_dir, tier)
        flags = {k: _manifest_flag(paths.manifest, k) for k in ("mechanism", "stability")}
        paths = ReportPaths.for_tier(results_dir, tier, **flags)
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
    except json.JSONDecodeError as exc:
        raise PublishError(f"{paths.manifest}: unreadable ({exc.msg})") from None
    if cfg is not None and manifest.get("config_digest") != cfg.digest():
        raise PublishError(
            f"{paths.manifest}: the report was built from config digest {manifest.get('config_digest')}, "
            f"but the given config (with its --set overrides) has digest {cfg.digest()}; "
            "rebuild the report with this config or publish with the config it was built from"
        )
    return paths, manifest


def publish_tier(tier: str, results_dir: str | Path = "results", cfg: ExperimentConfig | None = None) -> Path:
    """Publish the tier's report; returns the destination folder."""
    results_dir = Path(results_dir)
    paths, manifest = check_publishable(tier, results_dir, cfg)
    dest = results_dir / "published" / tier
    dest.parent.mkdir(parents=True, exist_ok=True)
    for stale in [*dest.parent.glob(f".{tier}.tmp-*"), *dest.parent.glob(f".{tier}.old-*")]:
        shutil.rmtree(stale, ignore_errors=True)  # left by a publish that was killed
    tmp = Path(tempfile.mkdtemp(prefix=f".{tier}.tmp-", dir=dest.parent))
    umask = os.umask(0)
    os.umask(umask)
    tmp.chmod(0o777 & ~umask)  # mkdtemp makes 0700; the publication is for everyone to read
    old: Path | None = None
    try:
        for src in paths.outputs():
            target = tmp / src.relative_to(paths.root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
        atomic_write_json(
            tmp / "provenance.json",
            {
                "tier": tier,
                "published": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
                "git_commit": git_commit(),
                "config_digest": manifest.get("config_digest"),
                "packages": package_versions(),
                "machine": machine(),
                "containers": container_digests(results_dir),
                "status_counts": manifest.get("status_counts"),
                "report_generated": manifest.get("generated"),
            },
        )
        if dest.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{tier}.old-", dir=dest.parent))
            os.replace(dest, old / tier)
        os.replace(tmp, dest)
    except BaseException:
        if old is not None and not dest.exists():
            os.replace(old / tier, dest)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return dest
