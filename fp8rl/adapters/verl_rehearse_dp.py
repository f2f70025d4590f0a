"""One data-parallel rank of verl 0.9.1's actor update on CPU: the DP step of a rehearsal
(fp8rl.adapters.verl_rehearse) and of test_adapters_verl_dp.py.

    python -m fp8rl.adapters.verl_rehearse_dp RANK WORLD INIT_FILE CASE_JSON OUT_JSON

Runs verl's own `TrainingWorker.train_mini_batch` (mini-batches, `train_batch`, `_postprocess_output`: the
all-gather of every metric over the DP group, `Metric.aggregate_dp`) with verl's `ppo_loss` calling the
policy loss named in the case through verl's registry, in a gloo process group. Only the engine is a
stand-in (`Engine`): it splits a mini-batch into micro-batches with verl's own `prepare_micro_batches`
(by `micro_batch_size_per_gpu`, or by `max_token_len_per_gpu` with `use_dynamic_bsz`, the same number
on every rank as the Megatron engine asks), sets the global batch counts verl's engines set, and
returns the case's log-probs as the model's, flattened as verl's no-padding layout holds them.

The case names the loss, the actor's settings (`actor`: verl's clip ratios, `loss_agg_mode`,
`use_dynamic_bsz`, `max_token_len_per_gpu`; defaults below) and either each rank's tensors (`ranks`) or
`groups`: GRPO groups generated on each rank (`group_batch`: `groups` prompts of `n` responses of up to
`max_len` tokens, binary rewards, a share of groups all right or all wrong whose advantages are all 0).
Writes `{"metrics": ..., "micro_bounds": the calib/low and calib/high each trained micro-batch's loss
used, "micro_qurl": its qurl/low and qurl/high, "forward_only_calls": ...}` or `{"error": ...}` to OUT_JSON.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path


class Engine:
    """The parts of verl's engine (`BaseEngine`) that `TrainingWorker.train_mini_batch` calls."""

    def __init__(self, group, micro: int) -> None:
        self.group, self.micro = group, micro
        self.micro_bounds: list[list[float | None]] = []  # per trained micro-batch: calib/low, calib/high
        self.micro_qurl: list[list[float | None]] = []  # per trained micro-batch: qurl/low, qurl/high
        self.forward_only_calls = 0

    def get_data_parallel_size(self) -> int:
        import torch.distributed as dist

        return dist.get_world_size(self.group)

    def get_data_parallel_rank(self) -> int:
        import torch.distributed as dist

        return dist.get_rank(self.group)

    def get_data_parallel_group(self):
        return self.group

    def is_mp_src_rank_with_outputs(self) -> bool:
        return True

    @contextlib.contextmanager
    def train_mode(self, disable_auto_offload: bool = False):
        yield

    def lr_scheduler_step(self) -> float:
        return 1e-6

    def train_batch(self, data, loss_function):
        return self._batches(data, loss_function, record=True)

    def infer_batch(self, data, loss_function=None):
        import torch

        self.forward_only_calls += 1
        with torch.no_grad():
            return self._batches(data, loss_function, record=False)

    def _batches(self, data, loss_function, record: bool):
        """verl's engine loop: verl's micro-batches (`prepare_micro_batches` on the keys verl's
        `TrainingWorker.train_batch` sets), each through `loss_function`."""
        import torch.distributed as dist
        from verl.utils import tensordict_utils as tu
        from verl.workers.engine.utils import postprocess_batch_func, prepare_micro_batches

        micro = tu.get(data, "micro_batch_size_per_gpu")
        assert micro == self.micro, (micro, self.micro)
        mask = data["response_mask"].bool()
        tokens = mask.sum().clone()
        dist.all_reduce(tokens, group=self.group)
        world = self.get_data_parallel_size()
        # the padded ids verl's balancing reads the sequence lengths from (attention_mask), engine-side
        # only: train_mini_batch reads `input_ids` as verl's nested no-padding layout
        data = data.clone()
        data["input_ids"] = data["attention_mask"].clone()
        micro_batches, indices = prepare_micro_batches(data, dp_group=self.group, same_micro_num_in_dp=True)
        outputs = []
        for mb in micro_batches:
            tu.assign_non_tensor(
                mb, dp_size=world, batch_num_tokens=int(tokens), global_batch_size=data.shape[0] * world
            )
            loss, metrics = loss_function(model_output={"log_probs": _flat(mb)}, data=mb, dp_group=self.group)
            if record:  # the bounds this micro-batch's loss clipped with (weight 1: the value)
                for record, name in ((self.micro_bounds, "calib"), (self.micro_qurl, "qurl")):
                    record.append(
                        [_value(metrics.get(f"fp8rl_sum/{name}/{side}")) for side in ("low", "high")]
                    )
            outputs.append({"loss": float(loss.detach()), "metrics": metrics})
        return postprocess_batch_func(outputs, indices, data)


def _value(metric) -> float | None:
    return None if metric is None else float(sum(getattr(metric, "values", [metric])))


def _flat(mb):
    """The micro-batch's current log-probs in verl's no-padding layout: one row per sequence of prompt +
    response tokens, the response's log-probs one position left (verl.workers.utils.padding)."""
    import torch

    prompt_len = mb["prompts"].shape[1]
    parts = []
    for lp, n in zip(mb["new_log_probs"], mb["response_mask"].sum(-1).tolist(), strict=True):
        n = int(n)
        parts += [torch.zeros(prompt_len - 1), lp[:n], torch.zeros(1)]
    return torch.cat(parts)


# verl's actor settings the loss and the engine read, as the unit test's cases had them
ACTOR_DEFAULTS = {
    "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "clip_ratio_c": 3.0, "loss_agg_mode": "token-mean",
    "use_kl_loss": False, "use_dynamic_bsz": False, "max_token_len_per_gpu": None,
}  # fmt: skip


def group_batch(rank: int, groups: dict) -> dict:
    """One rank's share of a rollout as GRPO leaves it: `groups["prompts"]` groups of `groups["n"]`
    responses of 1 to `groups["max_len"]` tokens; each group's reward rate drawn from {0, 1, a value
    in between} (a third all wrong or all right: advantages all 0), advantages the group-normalized
    binary rewards; the policy's log-probs the rollout's plus noise (`groups["noise"]`); with
    `groups["rollout_is_threshold"]` also the truncated importance weights verl's token-level TIS hands
    the loss (`rollout_is_weights`: exp(old - rollout log-prob), at most the threshold)."""
    import torch

    g = torch.Generator().manual_seed(1000 * groups.get("seed", 0) + rank)
    n, t = groups["n"], groups["max_len"]
    b = groups["prompts"] * n
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).float()
    adv = []
    for _ in range(groups["prompts"]):
        rate = [0.0, 1.0, float(torch.rand((), generator=g))][int(torch.randint(0, 3, (), generator=g))]
        r = (torch.rand(n, generator=g) < rate).float()
        adv.append((r - r.mean()) / (r.std() + 1e-6))
    old = -torch.rand(b, t, generator=g) * 2.0
    out = {
        "old_log_probs": old,
        "new_log_probs": old + groups.get("noise", 0.3) * torch.randn(b, t, generator=g),
        "response_mask": mask,
        "advantages": torch.cat(adv)[:, None].expand(b, t).contiguous(),
    }
    if groups.get("rollout_is_threshold") is not None:  # verl's token-level TIS weights, truncated
        rollout = old + groups.get("noise", 0.3) * torch.randn(b, t, generator=g)
        out["rollout_is_weights"] = torch.exp(old - rollout).clamp(max=groups["rollout_is_threshold"]) * mask
    return out


def main(rank: int, world: int, init_file: str, case_path: str, out_path: str) -> None:
    import torch
    import torch.distributed as dist

    with open(case_path) as fh:
        case = json.load(fh)
    try:
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
        from functools import partial
        from types import SimpleNamespace

        from omegaconf import OmegaConf
        from verl.utils import seqlen_balancing
        from verl.utils import tensordict_utils as tu
        from verl.workers.engine_workers import TrainingWorker
        from verl.workers.utils.losses import ppo_loss

        import fp8rl.adapters.verl_loss  # noqa: F401  (registers the losses, wraps TrainingWorker)

        # verl has no CPU platform (it falls back to CUDA's): the micro-batch count `use_dynamic_bsz`
        # agrees on over the DP group is all-reduced on the CPU here, as gloo needs
        seqlen_balancing.get_device_name = lambda: "cpu"

        actor = {**ACTOR_DEFAULTS, **case.get("actor", {})}
        config = OmegaConf.create(
            {
                "clip_ratio": actor["clip_ratio_low"], "clip_ratio_low": actor["clip_ratio_low"],
                "clip_ratio_high": actor["clip_ratio_high"], "clip_ratio_c": actor["clip_ratio_c"],
                "loss_agg_mode": actor["loss_agg_mode"], "loss_scale_factor": None,
                "use_kl_loss": actor["use_kl_loss"], "entropy_coeff": 0.0, "global_batch_info": {},
                "policy_loss": {"loss_mode": case["loss"]},
            }
        )  # fmt: skip
        worker = TrainingWorker.__new__(TrainingWorker)
        worker.engine = Engine(dist.group.WORLD, case["micro"])
        worker.engine_config = SimpleNamespace(
            use_dynamic_bsz=actor["use_dynamic_bsz"], max_token_len_per_gpu=actor["max_token_len_per_gpu"],
            micro_batch_size_per_gpu=case["micro"], use_fused_kernels=False, forward_only=False,
        )  # fmt: skip
        worker.model_config = {}
        worker.loss_fn = partial(ppo_loss, config=config)
        worker.profiler = SimpleNamespace(
            step=lambda: None,
            rank=rank,
            check_enable=lambda: False,
            check_this_step=lambda: False,
            check_this_rank=lambda: False,
        )
        worker.flops_counter = None
        worker.device_name = "cpu"

        if "groups" in case:
            tensors = group_batch(rank, case["groups"])
        else:
            tensors = {k: torch.tensor(v, dtype=torch.float32) for k, v in case["ranks"][rank].items()}
        b, t = tensors["old_log_probs"].shape
        prompt_len = 3
        data = tu.get_tensordict(
            tensor_dict={
                "prompts": torch.ones(b, prompt_len, dtype=torch.long),
                "responses": torch.ones(b, t, dtype=torch.long),
                "attention_mask": torch.cat([torch.ones(b, prompt_len), tensors["response_mask"]], 1).long(),
                "response_mask": tensors["response_mask"].long(),
                "old_log_probs": tensors["old_log_probs"],
                "new_log_probs": tensors["new_log_probs"],
                "advantages": tensors["advantages"],
                **(
                    {"rollout_is_weights": tensors["rollout_is_weights"]}
                    if "rollout_is_weights" in tensors
                    else {}
                ),
            },
            non_tensor_dict={"mini_batch_size": case["mini"] * world, "epochs": 1, "seed": 1},
        )
        output = worker.train_mini_batch(data)
        metrics = tu.get(output, "metrics") if output is not None else None
        result = {"metrics": {k: [float(x) for x in v] if isinstance(v, list) else repr(v)
                              for k, v in (metrics or {}).items()},
                  "micro_bounds": worker.engine.micro_bounds, "micro_qurl": worker.engine.micro_qurl,
                  "forward_only_calls": worker.engine.forward_only_calls}  # fmt: skip
    except Exception as exc:  # the caller reads what went wrong on which rank
        result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    with open(out_path, "w") as fh:
        json.dump(result, fh)
    if dist.is_initialized():
        dist.destroy_process_group()


def run_ranks(case: dict, work: Path, world: int, loss_spec: Path | None, timeout_s: int = 600) -> list[dict]:
    """Run `world` ranks of `main` on `case` (gloo, a file store under `work`), the loss spec file as
    `FP8RL_VERL_LOSS` (what the job's Ray workers get): each rank's result, `{"error": ...}` for a
    rank that wrote none (its output's tail)."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "case.json").write_text(json.dumps(case))
    (work / "store").unlink(missing_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if loss_spec is not None:
        env["FP8RL_VERL_LOSS"] = str(loss_spec)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fp8rl.adapters.verl_rehearse_dp",
                str(rank),
                str(world),
                str(work / "store"),
                str(work / "case.json"),
                str(work / f"rank{rank}.json"),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        for rank in range(world)
    ]
    results = []
    for rank, proc in enumerate(procs):
        try:
            log = proc.communicate(timeout=timeout_s)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            log = proc.communicate()[0] + f"\n(timed out after {timeout_s} s)"
        path = work / f"rank{rank}.json"
        results.append(
            json.loads(path.read_text())
            if path.is_file()
            else {"error": f"rank {rank} wrote nothing", "traceback": log[-3000:]}
        )
    return results


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5])
