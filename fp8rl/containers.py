"""Container images of the cluster path: what each role holds, how it is built, and the pin checks.

Every image lives in `containers/{name}/`: a `Dockerfile` whose every `FROM` is pinned by digest and a
`requirements.lock` (made by `scripts/lock_containers.sh`) where every requirement is `==`-pinned with
`--hash`. `build_command` / `sif_command` return the argv the DAG runs (docker buildx or podman, then
apptainer); `check_pins` returns every unpinned base or requirement, which the tests and `fp8rl
containers check` turn into failures.
"""

from __future__ import annotations

import re
from pathlib import Path

from fp8rl.config import ContainersConfig

IMAGES = ("train", "eval", "bfcl", "cpu")
# Which image each rule role runs in.
ROLE_IMAGES = {
    "train": "train", "eval": "eval", "agent": "bfcl", "bfcl": "bfcl", "cpu": "cpu", "data": "cpu",
    "report": "cpu",
}  # fmt: skip


def image_for_role(role: str) -> str:
    """The image a rule role runs in; KeyError naming the known roles for an unknown one."""
    try:
        return ROLE_IMAGES[role]
    except KeyError:
        raise KeyError(
            f"no container image for role {role!r}; known roles: {', '.join(ROLE_IMAGES)}"
        ) from None


CONTAINERS_DIR = Path(__file__).resolve().parents[1] / "containers"

_FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?\s*$", re.IGNORECASE)
_ARG = re.compile(r"^\s*ARG\s+([A-Za-z_][A-Za-z0-9_]*)(?:=(\S+))?\s*$", re.IGNORECASE)
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==[^\s;\\]+")
_HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")


def image_ref(cc: ContainersConfig, name: str) -> str:
    """The registry reference of an image, `{registry}/fp8rl-{name}:{tag}` (`@sha256:..` for a digest)."""
    sep = "@" if cc.tag.startswith("sha256:") else ":"
    return f"{cc.registry}/fp8rl-{name}{sep}{cc.tag}"


def base_images(dockerfile: Path) -> list[str]:
    """The base image of every `FROM` (ARG defaults substituted; earlier stage names excluded)."""
    args: dict[str, str] = {}
    stages: set[str] = set()
    out = []
    for line in dockerfile.read_text().splitlines():
        if m := _ARG.match(line):
            if m.group(2) is not None:
                args[m.group(1)] = m.group(2).strip("\"'")
            continue
        if m := _FROM.match(line):
            ref = re.sub(
                r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda a: args.get(a.group(1), a.group(0)), m.group(1)
            )
            if ref not in stages:
                out.append(ref)
            if m.group(2):
                stages.add(m.group(2))
    return out


def lock_entries(lock: Path) -> list[str]:
    """The requirement entries of a pip lock file, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\s*\n", " ", lock.read_text())
    entries = []
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if line and not line.startswith("#") and not line.startswith("--"):
            entries.append(line)
    return entries


def check_pins(root: Path = CONTAINERS_DIR) -> list[str]:
    """Every problem with the pins under `root`: a `FROM` without `@sha256:` digest, a lock entry not
    `==`-pinned or without a sha256 hash, an image folder without its Dockerfile or lock."""
    problems = []
    for name in IMAGES:
        d = root / name
        dockerfile, lock = d / "Dockerfile", d / "requirements.lock"
        if not dockerfile.is_file():
            problems.append(f"{dockerfile}: missing")
            continue
        bases = base_images(dockerfile)
        if not bases:
            problems.append(f"{dockerfile}: no FROM line")
        for ref in bases:
            if not _DIGEST.search(ref):
                problems.append(f"{dockerfile}: base image {ref!r} is not pinned by @sha256 digest")
        locks = sorted(d.glob("*.lock"))
        if not lock.is_file():
            problems.append(f"{lock}: missing")
        for lk in locks:
            for entry in lock_entries(lk):
                if not _PIN.match(entry):
                    problems.append(f"{lk}: {entry.split()[0]!r} is not pinned with ==")
                elif not _HASH.search(entry):
                    problems.append(f"{lk}: {entry.split()[0]!r} has no --hash=sha256")
    return problems


def build_command(cc: ContainersConfig, name: str, *, git_commit: str, context: str = ".") -> list[list[str]]:
    """The commands that build image `name` from `containers/{name}/Dockerfile` with the repository as
    context, labelled with the source commit, and record its id in `{out}.iid` (`{iidfile}` placeholder)."""
    ref = image_ref(cc, name)
    dockerfile = f"containers/{name}/Dockerfile"
    labels = ["--label", f"org.opencontainers.image.revision={git_commit}",
              "--label", f"org.opencontainers.image.title=fp8rl-{name}"]  # fmt: skip
    args = ["--build-arg", f"GIT_COMMIT={git_commit}"]
    if cc.engine == "docker":
        return [["docker", "buildx", "build", "--file", dockerfile, "--tag", ref, *labels, *args,
                 "--load", "--iidfile", "{iidfile}", context]]  # fmt: skip
    return [["podman", "build", "--file", dockerfile, "--tag", ref, *labels, *args,
             "--iidfile", "{iidfile}", context]]  # fmt: skip


def sif_command(cc: ContainersConfig, name: str, sif: str) -> list[list[str]]:
    """The commands that turn the locally built image into an Apptainer `.sif` file."""
    ref = image_ref(cc, name)
    if cc.engine == "docker":
        return [["apptainer", "build", "--force", sif, f"docker-daemon://{ref}"]]
    archive = f"{sif}.oci.tar"
    return [
        ["podman", "save", "--format", "oci-archive", "--output", archive, ref],
        ["apptainer", "build", "--force", sif, f"oci-archive://{archive}"],
        ["rm", "-f", archive],
    ]


def pull_command(cc: ContainersConfig, name: str, sif: str) -> list[list[str]]:
    """The command that makes a `.sif` from the prebuilt registry image (containers.mode: prebuilt)."""
    return [["apptainer", "pull", "--force", sif, f"docker://{image_ref(cc, name)}"]]


def image_location(cfg_containers: ContainersConfig, results_dir: str, name: str) -> str | None:
    """Where a rule finds image `name`: None without containers, the `.sif` the DAG makes when
    `apptainer` is on, else the registry image as a `docker://` URI."""
    cc = cfg_containers
    if cc.mode == "none":
        return None
    if cc.apptainer:
        return f"{results_dir}/containers/{name}.sif"
    return "docker://" + image_ref(cc, name)


# Set in every image: the shared hub cache, read offline (the fetch rules filled it on the login node).
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def image_env(cfg) -> dict[str, str]:
    """Environment of every job in an image: `HF_HOME` (config `hub.home`, absolute) and offline flags."""
    return {"HF_HOME": str(Path(cfg.hub.home).resolve()), **OFFLINE_ENV}


def apptainer_exec(cfg, image: str) -> str:
    """`apptainer exec --nv` of `image` with the working directory and the hub cache bound and
    `image_env` set, as a shell prefix (ends with a space)."""
    import shlex

    env = ",".join(f"{k}={v}" for k, v in image_env(cfg).items())
    home = shlex.quote(image_env(cfg)["HF_HOME"])
    return f'apptainer exec --nv --bind "$PWD" --bind {home} --env {shlex.quote(env)} {shlex.quote(image)} '


def run_prefix(cfg, role: str) -> str:
    """What a rule of `role` puts before its `fp8rl` command (workflows/containers.smk): nothing to run
    on the host (containers off; or the verl train rule, whose job script enters the train image on every
    node itself), else `apptainer exec` of the role's image. The rules enter their image themselves, so
    Snakemake needs no container runtime to plan or submit (no `--software-deployment-method`), and no
    job needs a Docker daemon: images are built or pulled by local rules on the login node."""
    if role == "train" and cfg.backend == "verl":
        return ""
    loc = image_location(cfg.containers, cfg.results_dir, image_for_role(role))
    return "" if loc is None else apptainer_exec(cfg, loc)


def container_inputs(cfg, role: str) -> list[str]:
    """The image file a rule of `role` needs before it starts (the .sif this DAG makes), or []."""
    loc = image_location(cfg.containers, cfg.results_dir, image_for_role(role))
    return [loc] if loc and loc.endswith(".sif") else []
