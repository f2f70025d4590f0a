"""Preflight of a verl training job: the pitfalls the frameworks' users report, checked before a GPU hour
is spent. A failing check stops the job with one message per problem (exit 3).

    python -m fp8rl.adapters.preflight job RUN_DIR/verl_overrides.json   # start of every job (verl_launch)

The login node's part (the config's checks and these exclusions on each fetched model) is
`python -m fp8rl.validation CONFIG` (`fp8rl.validation.login_problems`): the config's checks sit above
this module.

Checks (`problems(overrides, env)`, pure, so tests feed it what a node would report):

- **CUDA for blockwise FP8**: Transformer Engine's blockwise recipe (`Float8BlockScaling`) needs a CUDA
  >= 12.9 torch build.
- **NVTE_FP8_BLOCK_SCALING_FP32_SCALES**: on Hopper (compute capability 9.x) the blockwise recipe needs
  fp32 scales (`=1`); on Blackwell (>= 10.0) TE runs blockwise through MXFP8 with power-of-two scales
  and it must be 0 or unset. The job script sets it from the GPU (`nvidia-smi`); this checks the result.
- **Attention backend**: megatron-core asserts that NVTE_FLASH_ATTN / NVTE_FUSED_ATTN / NVTE_UNFUSED_ATTN
  are unset or match the chosen backend; `flash` needs the flash-attn package.
- **FP8 exclusions**: of the model's linear layers and routers (its config.json, built on the meta
  device), those vLLM's FP8 config quantizes under verl's `ignored_layers` (`fp8_modules`) hold no router /
  gate / lm_head / embedding / norm.
- **vLLM pin**: the rollout's FP8 weight loader is verl's patch of one vLLM release (`VLLM_PIN`, the train
  image's lock); another vLLM may load the weights differently without failing.

In a rehearsal on a CPU machine (`FP8RL_REHEARSAL=1`, fp8rl.adapters.verl_rehearse) the checks of what
only the GPU node and its image report (torch's CUDA build, the GPU, vLLM, flash-attn) are skipped, and
said so; the others run as in a job.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import sys
from pathlib import Path

from fp8rl.adapters.rehearsal_hook import REHEARSAL_ENV

VLLM_PIN = "0.24.0"  # containers/train/requirements.lock (checked by the tests)
MIN_CUDA_BLOCKWISE = (12, 9)
TE = "actor_rollout_ref.actor.megatron.override_transformer_config"
NODE_KEYS = ("cuda", "capability", "vllm", "flash_attn")  # what only the GPU node and its image report
# What FP8 applies to, as the frameworks decide it: by a module's kind, not by its name. vLLM's FP8 config
# (verl's `rollout.quantization=fp8`) quantizes every linear layer (vLLM's LinearBase, MoE routers included:
# a Hugging Face model's modules holding a 2-D `weight`) except the `ignored_layers` verl passes
# (`model.layers.N.mlp.gate`); the LM head (vLLM's ParallelLMHead) and the embeddings are embeddings, which
# it leaves alone. Megatron runs FP8 in Transformer Engine's linears, the transformer layers' (its router,
# output layer and embedding are not TE modules): a subset of vLLM's set, so vLLM's set is the one checked.
LM_HEAD = "lm_head"
VERL_FP8_IGNORED = re.compile(r"model\.layers\.\d+\.mlp\.gate")
NEVER_FP8 = ("lm_head", "*embed_tokens*", "*.gate", "*_gate", "*router*", "*norm*")


def _overrides_map(overrides: list[str]) -> dict[str, str]:
    return {k.lstrip("+"): v for k, v in (o.split("=", 1) for o in overrides)}


def fp8_modules(weight_modules: list[str]) -> list[str]:
    """The modules FP8 applies to, of a model's linear-weight modules (`meta_weight_modules`): all but the
    LM head and the layers verl tells vLLM to ignore."""
    return [n for n in weight_modules if n != LM_HEAD and not VERL_FP8_IGNORED.fullmatch(n)]


def exclusion_problems(weight_modules: list[str]) -> list[str]:
    """Modules that must stay high precision but that FP8 would quantize."""
    bad = [n for n in fp8_modules(weight_modules) if any(fnmatch.fnmatchcase(n, p) for p in NEVER_FP8)]
    return [
        f"FP8 would apply to {n} (router/gate/lm_head/embedding/norm stay high precision; verl's vLLM "
        "FP8 config ignores only model.layers.N.mlp.gate)"
        for n in bad
    ]


def meta_weight_modules(model_path: str) -> list[str]:
    """The modules of the model at `model_path` (built from its config on the meta device) that hold a 2-D
    `weight` of their own, embeddings aside: its linear layers and routers, what vLLM's FP8 config can
    quantize."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    out = []
    for name, module in model.named_modules():
        weight = module._parameters.get("weight")
        if name and weight is not None and weight.dim() == 2 and not isinstance(module, torch.nn.Embedding):
            out.append(name)
    return out


def problems(overrides: list[str], env: dict) -> list[str]:
    """What would waste the job, given its verl overrides and what the node reports in `env`:
    `cuda` (torch.version.cuda), `capability` ((major, minor) of GPU 0), `environ`, `vllm` (version),
    `flash_attn` (installed), `modules` (the model's linear-weight modules, `meta_weight_modules`, or None
    when not checked). A check
    whose node key is absent from `env` (a rehearsal: `NODE_KEYS`) is skipped."""
    ov = _overrides_map(overrides)
    environ = env.get("environ", {})
    out = []
    recipe = ov.get(f"{TE}.fp8_recipe")
    cap = env.get("capability")
    if recipe == "blockwise" and "cuda" in env:
        cuda = env.get("cuda")
        if cuda is None or tuple(int(x) for x in str(cuda).split(".")[:2]) < MIN_CUDA_BLOCKWISE:
            out.append(f"blockwise FP8 needs a CUDA >= 12.9 torch build (torch.version.cuda is {cuda})")
        scales = environ.get("NVTE_FP8_BLOCK_SCALING_FP32_SCALES")
        if cap is not None and cap[0] == 9 and scales != "1":
            out.append(f"blockwise FP8 on Hopper needs NVTE_FP8_BLOCK_SCALING_FP32_SCALES=1 (got {scales})")
        if cap is not None and cap[0] >= 10 and scales not in (None, "", "0"):
            out.append(
                "blockwise FP8 on Blackwell runs through MXFP8 with power-of-two scales: "
                f"NVTE_FP8_BLOCK_SCALING_FP32_SCALES must be 0 or unset (got {scales})"
            )
    if recipe and cap is not None and cap < (8, 9):
        out.append(f"FP8 GEMMs need compute capability >= 8.9 (GPU 0 is {cap[0]}.{cap[1]})")
    if recipe == "mxfp8" and cap is not None and cap[0] < 10:
        out.append(
            f"the mxfp8 recipe needs Blackwell (compute capability >= 10.0; GPU 0 is {cap[0]}.{cap[1]})"
        )
    backend = ov.get(f"{TE}.attention_backend", "flash")
    want = {"flash": ("1", "0", "0"), "fused": ("0", "1", "0"), "unfused": ("0", "0", "1")}.get(backend)
    for name, value in zip(
        ("NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN", "NVTE_UNFUSED_ATTN"), want or (), strict=False
    ):
        if environ.get(name) not in (None, value):
            out.append(
                f"{name}={environ[name]} contradicts attention_backend {backend} (megatron-core asserts)"
            )
    if backend == "flash" and "flash_attn" in env and not env["flash_attn"]:
        out.append("attention_backend flash needs the flash-attn package, which is not installed")
    if (
        ov.get("actor_rollout_ref.rollout.quantization") == "fp8"
        and "vllm" in env
        and env["vllm"] != VLLM_PIN
    ):
        out.append(
            f"the FP8 rollout's weight loader is verl's patch of vLLM {VLLM_PIN}; found {env.get('vllm')}"
        )
    if env.get("modules") is not None:
        out.extend(exclusion_problems(env["modules"]))
    return out


def node_env(model_path: str | None) -> dict:
    """What this node reports (torch, the GPU, installed packages, the model's module names)."""
    from importlib.metadata import PackageNotFoundError, version

    import torch

    def _v(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    cap = torch.cuda.get_device_capability(0) if torch.cuda.is_available() else None
    modules = (
        meta_weight_modules(model_path) if model_path and Path(model_path, "config.json").is_file() else None
    )
    return {"cuda": torch.version.cuda, "capability": cap, "environ": dict(os.environ), "vllm": _v("vllm"),
            "flash_attn": _v("flash-attn") is not None, "modules": modules}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "job":
        print("\n\n".join(__doc__.split("\n\n")[1:3]), file=sys.stderr)
        return 2
    overrides = json.loads(Path(args[1]).read_text())["overrides"]
    env = node_env(_overrides_map(overrides).get("actor_rollout_ref.model.path"))
    if os.environ.get(REHEARSAL_ENV) == "1":
        env = {k: v for k, v in env.items() if k not in NODE_KEYS}
        print("preflight: rehearsal on a CPU machine: torch's CUDA build, the GPU, vLLM and flash-attn "
              "are the GPU node's and its image's, not checked here", file=sys.stderr)  # fmt: skip
    return report(problems(overrides, env), "the job stops before starting Ray")


def report(found: list[str], consequence: str) -> int:
    """Print each problem as `preflight: ...` on stderr; 3 when there is one, 0 (and `preflight: ok`) not."""
    for p in found:
        print(f"preflight: {p}", file=sys.stderr)
    if found:
        print(f"preflight: {len(found)} problem(s); {consequence}", file=sys.stderr)
        return 3
    print("preflight: ok", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
