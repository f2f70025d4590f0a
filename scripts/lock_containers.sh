#!/usr/bin/env bash
# Re-make containers/*/requirements.lock: every package pinned with == and its sha256 hashes, resolved for
# the image's Python on linux x86_64 (uv resolves from package metadata; nothing is built or installed).
#   scripts/lock_containers.sh              # all images
#   scripts/lock_containers.sh train eval   # some
# Then rebuild the images (`snakemake containers`) and commit the locks with the change that needed them.
set -euo pipefail
cd "$(dirname "$0")/.."
UV="${UV:-.venv/bin/uv}"
export UV_PYTHON_DOWNLOADS=never
# Python of each image's base (see the FROM lines).
declare -A PYVER=([train]=3.12 [eval]=3.12 [bfcl]=3.12 [cpu]=3.11)
images=("$@")
[ ${#images[@]} -eq 0 ] && images=(train eval bfcl cpu)
for name in "${images[@]}"; do
    dir="containers/$name"
    common=(--quiet --generate-hashes --python-version "${PYVER[$name]}"
            --python-platform x86_64-manylinux_2_28 --custom-compile-command "scripts/lock_containers.sh $name")
    case "$name" in
    train)
        # transformer-engine-torch is a source distribution compiled against the image's torch: it gets
        # its own lock so the Dockerfile can build it without build isolation after torch is installed.
        "$UV" pip compile "${common[@]}" --no-emit-package transformer-engine-torch \
            "$dir/requirements.in" -o "$dir/requirements.lock"
        te=$(sed -n 's/^transformer-engine==\([^ ]*\).*/\1/p' "$dir/requirements.lock")
        echo "transformer-engine-torch==$te" > "$dir/te.in"
        "$UV" pip compile "${common[@]}" --no-deps "$dir/te.in" -o "$dir/te.lock"
        rm "$dir/te.in"
        ;;
    cpu)
        # torch's CPU build is not on PyPI: resolve it from a local copy of the wheel (FP8RL_TORCH_WHEELS,
        # a folder holding torch-2.13.0+cpu-cp311-...whl); its hash is the file's, as on PyTorch's index.
        "$UV" pip compile "${common[@]}" --find-links "${FP8RL_TORCH_WHEELS:-/opt/wheels}" \
            pyproject.toml "$dir/requirements.in" -o "$dir/requirements.lock"
        ;;
    *)
        "$UV" pip compile "${common[@]}" "$dir/requirements.in" -o "$dir/requirements.lock"
        ;;
    esac
    echo "$dir/requirements.lock: $(grep -c '==' "$dir/requirements.lock") packages"
done
