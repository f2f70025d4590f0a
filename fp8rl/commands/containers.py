"""`fp8rl containers build|sif|check`: build the pinned images, make Apptainer files, check the pins.

The DAG's container rules (workflows/containers.smk) call `build` and `sif`; `--dry-run` prints the
engine commands instead of running them. `check` lists every unpinned base image or requirement.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fp8rl.commands.common import UsageError, add_command, add_config_args
from fp8rl.io import sha256_file


def _setup(args: argparse.Namespace):
    from fp8rl.config_loader import load_config
    from fp8rl.containers import CONTAINERS_DIR, IMAGES

    if args.name not in IMAGES:
        raise UsageError(f"unknown image {args.name!r}; images: {', '.join(IMAGES)} (containers/<name>/)")
    cfg = load_config(args.file, args.set)
    return cfg, CONTAINERS_DIR.parent


def _need(exe: str, dry_run: bool, why: str) -> None:
    if not dry_run and shutil.which(exe) is None:
        raise UsageError(f"{exe} not found on PATH; it is needed to {why} (containers.engine / apptainer)")


def _run(cmds: list[list[str]], cwd: Path, dry_run: bool) -> None:
    for cmd in cmds:
        print("+ " + shlex.join(cmd), flush=True)
        if not dry_run:
            subprocess.run(cmd, cwd=cwd, check=True)


def cmd_build(args: argparse.Namespace) -> int:
    from fp8rl.containers import CONTAINERS_DIR, base_images, build_command, image_ref
    from fp8rl.io import atomic_write_json
    from fp8rl.provenance import git_commit

    cfg, root = _setup(args)
    cc = cfg.containers
    if cc.mode != "build" and not args.dry_run:
        raise UsageError(f"containers.mode is {cc.mode!r}: images are built only with containers.mode: build")
    _need(cc.engine, args.dry_run, "build images")
    commit = git_commit(str(root)) or "unknown"
    with tempfile.TemporaryDirectory() as tmp:
        iidfile = Path(tmp) / "iid"
        cmds = [
            [str(iidfile) if a == "{iidfile}" else a for a in c]
            for c in build_command(cc, args.name, git_commit=commit)
        ]
        _run(cmds, root, args.dry_run)
        if args.dry_run:
            return 0
        image_id = iidfile.read_text().strip()
    d = CONTAINERS_DIR / args.name
    atomic_write_json(
        args.out,
        {
            "name": args.name,
            "ref": image_ref(cc, args.name),
            "id": image_id,
            "engine": cc.engine,
            "git_commit": commit,
            "bases": base_images(d / "Dockerfile"),
            "locks": {p.name: sha256_file(p) for p in sorted(d.glob("*.lock"))},
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
    )
    print(f"{args.out}: {image_ref(cc, args.name)} {image_id}")
    return 0


def cmd_sif(args: argparse.Namespace) -> int:
    from fp8rl.containers import image_ref, pull_command, sif_command
    from fp8rl.io import atomic_write_json

    cfg, root = _setup(args)
    cc = cfg.containers
    if cc.mode == "none" and not args.dry_run:
        raise UsageError("containers.mode is 'none': there is no image to convert")
    _need("apptainer", args.dry_run, "make .sif images")
    out = Path(args.out)
    if not args.dry_run:
        out.parent.mkdir(parents=True, exist_ok=True)
    # Build into a temp name and rename, so an interrupted conversion leaves no half-written .sif.
    tmp = str(out.with_name(f".{out.name}.partial"))
    cmds = pull_command(cc, args.name, tmp) if cc.mode == "prebuilt" else sif_command(cc, args.name, tmp)
    _run(cmds, root, args.dry_run)
    if args.dry_run:
        return 0
    Path(tmp).replace(out)
    if cc.mode == "prebuilt":  # the pulled image's record (a built one has it from `build`)
        atomic_write_json(
            out.with_suffix(".json"),
            {
                "name": args.name,
                "ref": image_ref(cc, args.name),
                "sif_sha256": sha256_file(out),
                "engine": "apptainer",
            },
        )
    print(f"{out}: {out.stat().st_size / 2**30:.1f} GiB")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from fp8rl.containers import CONTAINERS_DIR, check_pins

    root = Path(args.root) if args.root else CONTAINERS_DIR
    problems = check_pins(root)
    for p in problems:
        print(p, file=sys.stderr)
    print(f"{root}: {'ok' if not problems else f'{len(problems)} problem(s)'}")
    return 1 if problems else 0


def register(sub: argparse._SubParsersAction) -> None:
    p_c = add_command(sub, "containers", help="build the pinned images, make .sif files, check the pins")
    c_sub = p_c.add_subparsers(dest="containers_command", required=True, metavar="ACTION")
    p = add_command(c_sub, "build", help="build containers/NAME with docker buildx or podman; record its id")
    p.add_argument("name", help="train, eval, bfcl or cpu")
    add_config_args(p)
    p.add_argument("--out", required=True, help="the image record, e.g. results/containers/train.json")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    p.set_defaults(func=cmd_build)
    p = add_command(c_sub, "sif", help="make an Apptainer .sif from the built (or prebuilt) image")
    p.add_argument("name", help="train, eval, bfcl or cpu")
    add_config_args(p)
    p.add_argument("--out", required=True, help="the .sif file, e.g. results/containers/train.sif")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    p.set_defaults(func=cmd_sif)
    p = add_command(c_sub, "check", help="list unpinned base images and requirements; exit 1 if any")
    p.add_argument("--root", help="the containers folder (default: the repository's containers/)")
    p.set_defaults(func=cmd_check)
