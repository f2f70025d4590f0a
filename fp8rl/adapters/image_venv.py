"""An image's pinned packages on a machine without the image: `build/venv-IMAGE` (scripts/image_venv.sh)
checked against the image's lock (`venv_problem`), the image's job environment (`image_env`: the venv
first on PATH, the variables its Dockerfile sets, nothing of this machine's Python setup), this working
tree's fp8rl installed into it as the image installs it (`install_fp8rl`), and a command run there
(`_run`, `_versions`); `Result` is what a rehearsed job reports and `GPU_POINT` how vLLM or torch says it
found no GPU. The jobs are in fp8rl.adapters.image_rehearse (and image_rehearse_agent)."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "config" / "paper.yaml"  # the config whose jobs the image rehearsals run by default
LOCK_STAMP = ".lock-sha256"  # scripts/image_venv.sh writes it last
# the environment each image's Dockerfile sets for its jobs
IMAGE_ENV = {
    "cpu": {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"},
    "bfcl": {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"},
}
TAIL_CHARS = 4000


@dataclass(frozen=True)
class Result:
    """How one job's rehearsal ended: `ok`, `skipped` (no venv), and what it found."""

    job: str
    ok: bool
    detail: str
    skipped: bool = False

    def line(self) -> str:
        how = "skipped" if self.skipped else "passed" if self.ok else "FAILED"
        return f"{self.job} in its image's packages: {how} ({self.detail})"


def build_command(image: str) -> str:
    """The command that builds (or rebuilds) `image`'s venv: the Makefile's target, which runs
    scripts/image_venv.sh with the image's Python and flags and logs to build/venv-IMAGE.log."""
    return f"make image-venvs IMAGE_VENVS={image}, which runs scripts/image_venv.sh {image}"


def venv_problem(venv: Path, image: str) -> str | None:
    """Why `venv` is not a complete venv of `image`'s current lock (None: it is)."""
    stamp = venv / LOCK_STAMP
    if not stamp.is_file():
        log = venv.parent / f"{venv.name}.log"  # make image-venvs writes it
        lines = (
            [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()] if log.is_file() else []
        )
        why = f"; its last build ({log}) ended: {lines[-1].strip()[:300]}" if lines else ""
        return f"no complete {venv} ({build_command(image)}{why})"
    import hashlib

    lock = ROOT / "containers" / image / "requirements.lock"
    want = hashlib.sha256(lock.read_bytes()).hexdigest()
    if stamp.read_text().split()[0] != want:
        return f"{venv} was built from another {lock.relative_to(ROOT)} ({build_command(image)})"
    return None


def image_env(venv: Path, image: str, work: Path, path_first: Path | None = None) -> dict[str, str]:
    """The job's environment as the image gives it: the venv first on PATH (after `path_first`, a
    folder of stand-ins, when given), the image's own variables (`IMAGE_ENV`), a home in `work`; nothing
    of this machine's Python setup (PYTHONPATH, a numerics pin)."""
    home = work / "home"
    home.mkdir(parents=True, exist_ok=True)
    path = f"{venv / 'bin'}{os.pathsep}/usr/local/bin:/usr/bin:/bin"
    if path_first is not None:
        path = f"{path_first}{os.pathsep}{path}"
    return {"PATH": path, "HOME": str(home),
            "LANG": "C.UTF-8", "VIRTUAL_ENV": str(venv), "TMPDIR": tempfile.gettempdir(),
            **IMAGE_ENV.get(image, {})}  # fmt: skip


def install_fp8rl(venv: Path) -> None:
    """This working tree's fp8rl into `venv`, as the image installs it (`pip install --no-deps
    --no-build-isolation`, not editable: what the package ships is what runs), replacing the one the
    venv was built with; an image built from this tree has the same."""
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", "--no-deps",
         "--no-build-isolation", "--force-reinstall", str(ROOT)], check=True, capture_output=True, timeout=600,
    )  # fmt: skip


def _run(
    venv: Path,
    image: str,
    argv: list[str],
    cwd: Path,
    timeout_s: int,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    env = {**image_env(venv, image, cwd), **(extra_env or {})}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)


VERSIONS = (
    "import importlib.metadata as m, sys; print(', '.join(f'{p} {m.version(p)}' for p in sys.argv[1:]))"
)


def _versions(venv: Path, image: str, work: Path, *packages: str) -> str:
    return _run(
        venv, image, [str(venv / "bin" / "python"), "-c", VERSIONS, *packages], work, 120
    ).stdout.strip()


# what vLLM (or torch under it) says when it finds no GPU: the eval jobs' first GPU point (vLLM 0.24:
# its platform has no device type, and its engine config's DeviceConfig refuses the empty string)
GPU_POINT = re.compile(
    r"Device string must not be empty|Failed to infer device type|No CUDA GPUs are available|"
    r"Found no NVIDIA driver|NVIDIA driver on your system|libcuda\.so",
    re.IGNORECASE,
)
