"""fp8rl's verl losses through verl's own actor update over two data-parallel ranks (gloo, CPU).

verl gathers each micro-batch's loss metrics over the DP group and `Metric.aggregate_dp` raises unless
every rank logged every key equally often; GRPO groups whose advantages are all 0 leave micro-batches
without an A<0 or A>0 token. The update must go through and log the fractions the reference trainer
would: pooled over each mini-batch, all ranks, then averaged over the step's mini-batches. Calibrated
clipping sets one pair of bounds per update, the same on every micro-batch and rank: the reference
trainer's for the update's pooled tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from fp8rl.adapters.verl_rehearse_dp import run_ranks
from fp8rl.rl import ClipBounds, LossTerms, policy_loss

WORLD, MINI, MICRO, T = 2, 4, 2, 6

# per rank, per sequence: its advantage (GRPO: one per sequence). Micro-batches are pairs of sequences,
# mini-batches quadruples. Rank 0's first micro-batch has no A != 0 token, rank 1's has A<0 ones: in
# the first mini-batch rank 0 logs `clip/low_neg` once, rank 1 twice. Rank 1's third micro-batch has
# no A<0 token, rank 0's fourth no token with A != 0.
ADVANTAGES = [
    [0.0, 0.0, 1.0, -1.0, -0.5, -0.5, 0.0, 0.0],
    [1.0, -1.0, -1.0, 0.0, 1.0, 1.0, -1.0, 0.5],
]


def _case(loss: str) -> dict:
    g = torch.Generator().manual_seed(7)
    ranks = []
    for adv in ADVANTAGES:
        b = len(adv)
        old = -torch.rand(b, T, generator=g) * 2.0
        new = old + 0.5 * torch.randn(b, T, generator=g)
        mask = torch.ones(b, T)
        for i in range(b):
            mask[i, 2 + (i % 4) :] = 0.0
        ranks.append(
            {
                "old_log_probs": old.tolist(),
                "new_log_probs": new.tolist(),
                "response_mask": mask.tolist(),
                "advantages": torch.tensor(adv).unsqueeze(1).expand(b, T).tolist(),
            }
        )
    return {"loss": loss, "mini": MINI, "micro": MICRO, "ranks": ranks}


def _run_ranks(case: dict, tmp: Path, spec: dict | None) -> list[dict]:
    loss = None
    if spec is not None:
        loss = tmp / "verl_loss.json"
        loss.write_text(json.dumps(spec))
    results = run_ranks(case, tmp, WORLD, loss, timeout_s=300)
    for res in results:
        assert "wrote nothing" not in res.get("error", ""), res["traceback"]
    return results


def _mini_batches(case: dict):
    """Each mini-batch's tensors, both ranks' sequences together (what verl's DP ranks trained on)."""
    for j in range(len(ADVANTAGES[0]) // MINI):
        rows = slice(j * MINI, (j + 1) * MINI)
        yield {
            k: torch.cat([torch.tensor(r[k])[rows] for r in case["ranks"]])
            for k in ("old_log_probs", "new_log_probs", "response_mask", "advantages")
        }


def _micro_batches(case: dict, j: int):
    for r in case["ranks"]:
        for start in range(j * MINI, (j + 1) * MINI, MICRO):
            yield {k: torch.tensor(v)[start : start + MICRO] for k, v in r.items()}


def _reference_bounds(mb: dict, first_update: bool) -> ClipBounds:
    """The bounds the reference trainer's update sets on the mini-batch's tokens (static target 0.05)."""
    from types import SimpleNamespace

    from fp8rl.engine.phase_timer import PhaseTimer
    from fp8rl.engine.update_bounds import UpdateBounds
    from fp8rl.rl import Calibrator

    reference = UpdateBounds(
        ClipBounds.fixed(0.2, 0.28), calibrator=Calibrator(0.2, 0.28, reference="static:0.05"), shadow=None,
        reference="static:0.05", run_targets={}, updates_per_step=2, timer=PhaseTimer(),
    )  # fmt: skip
    mask = mb["response_mask"].bool()
    update = SimpleNamespace(advantages=mb["advantages"], mask=mask, first_update=first_update)
    bounds, _ = reference.for_update(1, update, torch.exp(mb["new_log_probs"] - mb["old_log_probs"]))
    return bounds


@pytest.mark.parametrize("loss", ["fp8rl_clip", "calibrated_clip"])
def test_the_update_aggregates_fp8rls_loss_metrics_over_dp_ranks(verl_site, tmp_path, loss):
    from fp8rl.rl import ratio_quantiles

    case = _case(loss)
    spec = {"clip_c": 3.0, "calib": None}
    if loss == "calibrated_clip":
        spec["calib"] = {"reference": "static:0.05", "population": "neg", "upper": "proportional"}
    results = _run_ranks(case, tmp_path, spec)
    for rank, res in enumerate(results):
        assert "error" not in res, f"rank {rank}: {res.get('traceback', res)}"
    metrics = results[0]["metrics"]
    same = [{k: v for k, v in r["metrics"].items() if not k.startswith("perf/")} for r in results]
    assert same[1] == same[0]  # every rank returns the gathered metrics
    assert not [k for k in metrics if k.startswith(("fp8rl_sum/", "fp8rl_n/"))]

    # the fractions of each mini-batch over both ranks' tokens, as the reference trainer's update has them
    want: dict[str, list[float]] = {}
    micro_per_rank = MINI // MICRO
    for j, mb in enumerate(_mini_batches(case)):
        mask = mb["response_mask"].bool()
        bounds = ClipBounds.fixed(0.2, 0.28)
        if loss == "calibrated_clip":
            # one pair for the update: every micro-batch of both ranks clipped with the reference
            # trainer's bounds of the pooled mini-batch (the first update clips nothing below)
            bounds = _reference_bounds(mb, first_update=j == 0)
            used = [
                b for r in results for b in r["micro_bounds"][j * micro_per_rank : (j + 1) * micro_per_rank]
            ]
            assert used == [pytest.approx(list(bounds), rel=1e-6)] * (WORLD * micro_per_rank), j
            assert metrics["calib/low"][j] == pytest.approx(bounds.low, rel=1e-6)
        _, m = policy_loss(mb["new_log_probs"], mb["old_log_probs"], mb["advantages"], mask, bounds,
                           LossTerms(clip_c=3.0))  # fmt: skip
        for k in (
            "clip/low_neg",
            "clip/high_pos",
            "clip/dual",
            "clip/low_all",
            "clip/high_all",
            "loss/ppo_kl",
        ):
            if k in m:
                want.setdefault(k, []).append(m[k])
        micro = [
            ratio_quantiles(torch.exp(u["new_log_probs"] - u["old_log_probs"]), u["response_mask"].bool())
            for u in _micro_batches(case, j)
        ]
        want.setdefault("ratio/p50", []).append(sum(q["ratio/p50"] for q in micro) / len(micro))
    for k, values in want.items():
        assert metrics[k] == pytest.approx(values, rel=1e-6), k
    n_mini = len(ADVANTAGES[0]) // MINI
    assert [r["forward_only_calls"] for r in results] == [n_mini if loss == "calibrated_clip" else 0] * WORLD
    assert metrics["actor/ppo_kl"] == pytest.approx(want["loss/ppo_kl"], rel=1e-6)
    for k in ("clip/low_neg", "clip/high_pos", "clip/low_all", "loss/tokens", "actor/pg_loss"):
        assert len(metrics[k]) == len(ADVANTAGES[0]) // MINI, k


def test_a_non_finite_input_on_one_rank_stops_every_rank_before_the_update(verl_site, tmp_path):
    """calibrated_clip gathers the update's ratios over the DP group before any micro-batch: a NaN
    old log-prob on rank 1 is raised there and, after the gather, on rank 0 too (no rank waits for
    another in a collective)."""
    case = _case("calibrated_clip")
    case["ranks"][1]["old_log_probs"][2][0] = float("nan")  # a valid token of rank 1's first mini-batch
    spec = {
        "clip_c": 3.0,
        "calib": {"reference": "static:0.05", "population": "neg", "upper": "proportional"},
    }
    results = _run_ranks(case, tmp_path, spec)
    assert [r.get("error", "").split(":")[0] for r in results] == ["NonFiniteLoss"] * WORLD
    assert "another data-parallel rank" in results[0]["error"]
    assert "old_log_prob" in results[1]["error"]


def test_a_non_finite_input_of_a_plain_loss_on_one_rank_stops_every_rank_after_the_mini_batch(
    verl_site, tmp_path
):
    """fp8rl_clip finds the NaN in its own micro-batch on rank 1 only. Raising there at once would leave
    rank 0 in the next collective of the update (the gradient all-reduce) until the NCCL timeout: rank 1
    records the divergence and gives a zero loss for the micro-batch instead, every rank finishes the
    mini-batch, and the DP group agrees after it, so both ranks raise NonFiniteLoss together."""
    case = _case("fp8rl_clip")
    case["ranks"][1]["old_log_probs"][2][0] = float("nan")  # a valid token of rank 1's first mini-batch
    results = _run_ranks(case, tmp_path, {"clip_c": 3.0})
    assert [r.get("error", "").split(":")[0] for r in results] == ["NonFiniteLoss"] * WORLD
    assert "another data-parallel rank" in results[0]["error"]
    assert "old_log_prob" in results[1]["error"]
    # the rank that found it recorded the divergence beside the loss spec, for the run's import
    from fp8rl.adapters.verl_launch import DIVERGENCE_FILE

    record = json.loads((tmp_path / DIVERGENCE_FILE).read_text())
    assert record["kind"] == "non_finite" and "old_log_prob" in record["what"]
