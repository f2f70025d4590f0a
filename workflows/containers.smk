# Pinned images for the rules (containers/, docs/architecture.md#pieces-and-layering): build them with docker buildx or podman,
# record each image's id in {results_dir}/containers/{name}.json, convert it to an Apptainer .sif for
# clusters, or pull prebuilt registry images instead (`containers.mode`: none | build | prebuilt).
#
# `in_image(role)` is the prefix a rule puts before its `fp8rl` command: empty when containers are off
# (the smoke/CI default: rules run on the host), else `apptainer exec` of the role's image (the .sif when
# `containers.apptainer` is on, else the registry image) with the hub cache bound and read offline.
# Rules enter their image themselves, so Snakemake needs no container runtime to plan or submit. Rules
# that use a .sif made by this DAG list `container_inputs(role)` as an input so that the image is built
# before them. The verl training launcher runs its Ray processes inside the train image itself
# (`apptainer exec` on every node), so with `backend: verl` the train rule's prefix is empty.
# Building (docker buildx / podman) and converting images are local rules: they run on the login node
# (or wherever a container engine is), never as cluster jobs.

from functools import partial

import fp8rl.containers as images

CONTAINER_DIR = f"{CFG.results_dir}/containers"
IMAGES = images.IMAGES

# in_image(role) -> shell prefix or ""; container_inputs(role) -> [the .sif to wait for] or [].
in_image = partial(images.run_prefix, CFG)
container_inputs = partial(images.container_inputs, CFG)


wildcard_constraints:
    image="|".join(IMAGES),


localrules:
    container_image,
    container_sif,
    containers,


rule container_image:
    """Build one image from containers/{image}/ and record its id, tag and source commit."""
    input:
        dockerfile="containers/{image}/Dockerfile",
        lock="containers/{image}/requirements.lock",
    output:
        f"{CONTAINER_DIR}/{{image}}.json",
    params:
        config=CONFIG_FILE,
    log:
        f"{R}/logs/container_image/{{image}}.log",
    resources:
        mem_mb=16000,
        runtime=240,
    conda:
        CONDA_ENV
    shell:
        "fp8rl containers build {wildcards.image:q} --config {params.config:q} --out {output:q} > {log:q} 2>&1"


rule container_sif:
    """Convert the built image (mode build) or pull the prebuilt one (mode prebuilt) into a .sif."""
    input:
        lambda wc: [f"{CONTAINER_DIR}/{wc.image}.json"] if CFG.containers.mode == "build" else [],
    output:
        f"{CONTAINER_DIR}/{{image}}.sif",
    params:
        config=CONFIG_FILE,
    log:
        f"{R}/logs/container_sif/{{image}}.log",
    resources:
        mem_mb=16000,
        runtime=120,
    conda:
        CONDA_ENV
    shell:
        "fp8rl containers sif {wildcards.image:q} --config {params.config:q} --out {output:q} > {log:q} 2>&1"


rule containers:
    """Every image of the tier, ready for the cluster (`snakemake containers`)."""
    input:
        [
            f"{CONTAINER_DIR}/{name}.sif" if CFG.containers.apptainer else f"{CONTAINER_DIR}/{name}.json"
            for name in IMAGES
        ]
        if CFG.containers.mode != "none"
        else [],
