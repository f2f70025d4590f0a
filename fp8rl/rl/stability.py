"""Divergence detection: every failure the instability takes, one detector each.

`StabilityMonitor` reads one line of step metrics at a time and reports the first divergence it sees,
with its kind (`DIVERGENCE_KINDS`) and a reason that names the numbers:
- `non_finite`: a NaN/inf entropy or reward, at once;
- `entropy_spike`: entropy above `entropy_spike_k` x its baseline for `entropy_spike_m` consecutive steps
  (the baseline is the median entropy of the first `baseline_steps` steps);
- `entropy_collapse`: entropy below `entropy_collapse_frac` x the baseline, or below the absolute
  `entropy_floor` (nats per token; no baseline needed, so a collapse inside the baseline window is
  seen too), for `patience` consecutive steps (a policy that has stopped exploring: lr 0.3 drives
  entropy to 1e-33);
- `gibberish`: `gibberish/rate` above `gibberish_max` for `patience` consecutive steps after the first
  (the first step samples the base model: when that is already above `gibberish_max`, the limit is
  halfway from its rate to 1, since a garbled base model is not a divergence);
- `reward_collapse`: after learning (the best `reward_window`-step mean reward reached at least
  `reward_min_peak`), that mean falls below `reward_collapse_frac` x its best for `patience` consecutive
  steps.
A detector whose threshold is None is off. The first divergence is sticky: later steps never replace
it, so a run that keeps going after it (`stability.on_divergence: continue`) still reports when and why
it first broke. A step not greater than the last one seen is ignored (a resumed run may replay one),
and `state_dict` / `load_state_dict` carry the whole state, so a resumed run detects exactly what an
uninterrupted one would.

The verl adapter replays a finished run's imported metrics through the same monitor.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any

from fp8rl.vocabulary import DIVERGENCE_KINDS, GIBBERISH_RATE, REWARD_MEAN


@dataclass(frozen=True)
class Divergence:
    """The first divergence of a run: its kind (one of DIVERGENCE_KINDS), step and reason."""

    kind: str
    step: int
    reason: str

    def __post_init__(self) -> None:
        if self.kind not in DIVERGENCE_KINDS:
            raise ValueError(
                f"Divergence: unknown kind {self.kind!r}; allowed: {', '.join(DIVERGENCE_KINDS)}"
            )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Streak:
    """Consecutive steps for which a condition held, and where the streak began."""

    def __init__(self) -> None:
        self.n, self.start = 0, None

    def update(self, hit: bool, step: int) -> int:
        if hit:
            self.start = step if self.n == 0 else self.start
            self.n += 1
        else:
            self.n, self.start = 0, None
        return self.n

    def state(self) -> list:
        return [self.n, self.start]

    def load(self, state: list) -> None:
        self.n, self.start = int(state[0]), state[1]


class StabilityMonitor:
    """Feed one metrics dict per optimizer step; `update` returns the run's first `Divergence` or None."""

    def __init__(
        self,
        *,
        entropy_spike_k: float = 3.0,
        entropy_spike_m: int = 3,
        baseline_steps: int = 5,
        entropy_collapse_frac: float | None = None,
        entropy_floor: float | None = None,
        gibberish_max: float | None = None,
        reward_collapse_frac: float | None = None,
        reward_window: int = 5,
        reward_min_peak: float = 0.1,
        patience: int = 3,
    ) -> None:
        if not entropy_spike_k > 1.0:
            raise ValueError(f"StabilityMonitor: entropy_spike_k must be > 1, got {entropy_spike_k}")
        for name, v in (
            ("entropy_collapse_frac", entropy_collapse_frac),
            ("reward_collapse_frac", reward_collapse_frac),
        ):
            if v is not None and not 0.0 < v < 1.0:
                raise ValueError(f"StabilityMonitor: {name} must be in (0, 1), got {v}")
        if gibberish_max is not None and not 0.0 <= gibberish_max < 1.0:
            raise ValueError(f"StabilityMonitor: gibberish_max must be in [0, 1), got {gibberish_max}")
        if min(entropy_spike_m, baseline_steps, reward_window, patience) < 1:
            raise ValueError(
                "StabilityMonitor: entropy_spike_m, baseline_steps, reward_window and patience must be >= 1"
            )
        self.k, self.m, self.baseline_steps = (
            float(entropy_spike_k),
            int(entropy_spike_m),
            int(baseline_steps),
        )
        self.collapse_frac, self.gibberish_max = entropy_collapse_frac, gibberish_max
        self.entropy_floor = entropy_floor
        self.reward_frac, self.reward_window = reward_collapse_frac, int(reward_window)
        self.reward_min_peak, self.patience = float(reward_min_peak), int(patience)
        self.entropy_history: list[float] = []
        self.baseline: float | None = None
        self.gibberish_first: float | None = None  # the base model's rate (the first step's rollout)
        self.rewards: list[float] = []  # the last `reward_window` step rewards
        self.best_reward: float | None = None
        self.streaks = {
            k: _Streak() for k in ("entropy_spike", "entropy_collapse", "gibberish", "reward_collapse")
        }
        self.last_step: int | None = None
        self.divergence: Divergence | None = None

    @classmethod
    def from_config(cls, stability: Any) -> StabilityMonitor:
        """From a `StabilityConfig` of fp8rl.config."""
        return cls(
            entropy_spike_k=stability.entropy_spike_k,
            entropy_spike_m=stability.entropy_spike_m,
            baseline_steps=stability.baseline_steps,
            entropy_collapse_frac=stability.entropy_collapse_frac,
            entropy_floor=stability.entropy_floor,
            gibberish_max=stability.gibberish_max,
            reward_collapse_frac=stability.reward_collapse_frac,
            reward_window=stability.reward_window,
            reward_min_peak=stability.reward_min_peak,
            patience=stability.patience,
        )

    def update(self, step: int, metrics: dict[str, float]) -> Divergence | None:
        """Check one step's metrics (`entropy`, `reward/mean`, `gibberish/rate`; absent ones are skipped)."""
        if self.last_step is not None and step <= self.last_step:
            return self.divergence
        self.last_step = step
        found = self._check(step, metrics)
        if self.divergence is None and found is not None:
            label = "non-finite" if found[0] == "non_finite" else found[0].replace("_", " ")
            self.divergence = Divergence(found[0], step, f"{label}: {found[1]}")
        return self.divergence

    def record_non_finite(self, step: int, what: str) -> Divergence:
        """A NaN/inf met inside the step (log-probs, loss, gradient norm), where the step writes no
        metrics: the run's first divergence unless one was detected before."""
        if self.divergence is None:
            self.divergence = Divergence("non_finite", step, f"non-finite: {what} at step {step}")
        return self.divergence

    def _check(self, step: int, metrics: dict[str, float]) -> tuple[str, str] | None:
        """Every detector sees every step (their state stays exact after the first detection); returns
        the first one that fires this step, in DIVERGENCE_KINDS order."""
        fired: list[tuple[str, str]] = []
        bad = {
            k: metrics[k] for k in ("entropy", REWARD_MEAN) if k in metrics and not math.isfinite(metrics[k])
        }
        if bad:
            fired.append(("non_finite", ", ".join(f"{k} = {v}" for k, v in bad.items()) + f" at step {step}"))
        if "entropy" in metrics and "entropy" not in bad:
            fired += self._entropy(step, float(metrics["entropy"]))
        if self.gibberish_max is not None and GIBBERISH_RATE in metrics:
            fired += self._gibberish(step, float(metrics[GIBBERISH_RATE]))
        if REWARD_MEAN in metrics and REWARD_MEAN not in bad:
            fired += self._reward(step, float(metrics[REWARD_MEAN]))
        return fired[0] if fired else None

    def _entropy(self, step: int, entropy: float) -> list[tuple[str, str]]:
        out = []
        in_window = self.baseline is None
        if in_window:
            self.entropy_history.append(entropy)
            if len(self.entropy_history) >= self.baseline_steps:
                self.baseline = statistics.median(self.entropy_history)
        else:
            hi = self.k * self.baseline
            s = self.streaks["entropy_spike"]
            if s.update(entropy > hi, step) >= self.m:
                out.append(
                    ("entropy_spike", f"entropy above {self.k:g} x baseline {self.baseline:.4g} (= {hi:.4g}) "
                     f"for {s.n} consecutive steps, steps {s.start}-{step} (last {entropy:.4g})")
                )  # fmt: skip
        lows = []
        if self.entropy_floor is not None:
            lows.append((self.entropy_floor, f"the floor {self.entropy_floor:g}"))
        if self.collapse_frac is not None and not in_window:
            lo = self.collapse_frac * self.baseline
            lows.append((lo, f"{self.collapse_frac:g} x baseline {self.baseline:.4g} (= {lo:.4g})"))
        if lows:
            limit, what = max(lows)
            s = self.streaks["entropy_collapse"]
            if s.update(entropy < limit, step) >= self.patience:
                out.append(
                    ("entropy_collapse", f"entropy below {what} for {s.n} consecutive steps, "
                     f"steps {s.start}-{step} (last {entropy:.4g})")
                )  # fmt: skip
        return out

    def _gibberish(self, step: int, rate: float) -> list[tuple[str, str]]:
        if self.gibberish_first is None:
            self.gibberish_first = rate
            return []
        early = self.gibberish_first
        limit = max(self.gibberish_max, (early + 1.0) / 2 if early > self.gibberish_max else 0.0)
        s = self.streaks["gibberish"]
        if s.update(rate > limit, step) >= self.patience:
            return [
                ("gibberish", f"gibberish rate above {limit:.3g} for {s.n} consecutive steps, "
                 f"steps {s.start}-{step} (last {rate:.3g}; first step {early:.3g})")
            ]  # fmt: skip
        return []

    def _reward(self, step: int, reward: float) -> list[tuple[str, str]]:
        self.rewards = [*self.rewards, reward][-self.reward_window :]
        if len(self.rewards) < self.reward_window or self.reward_frac is None:
            return []
        mean = sum(self.rewards) / len(self.rewards)
        self.best_reward = mean if self.best_reward is None else max(self.best_reward, mean)
        learned = self.best_reward >= self.reward_min_peak
        s = self.streaks["reward_collapse"]
        if s.update(learned and mean < self.reward_frac * self.best_reward, step) >= self.patience:
            return [
                ("reward_collapse", f"{self.reward_window}-step mean reward {mean:.4g} below {self.reward_frac:g} x "
                 f"its best {self.best_reward:.4g} for {s.n} consecutive steps, steps {s.start}-{step}")
            ]  # fmt: skip
        return []

    def state_dict(self) -> dict[str, Any]:
        return {
            "entropy_history": list(self.entropy_history),
            "baseline": self.baseline,
            "gibberish_first": self.gibberish_first,
            "rewards": list(self.rewards),
            "best_reward": self.best_reward,
            "streaks": {k: s.state() for k, s in self.streaks.items()},
            "last_step": self.last_step,
            "divergence": None if self.divergence is None else self.divergence.as_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        missing = set(self.state_dict()) - set(state)
        if missing:
            raise ValueError(f"StabilityMonitor.load_state_dict: missing keys {sorted(missing)}")
        self.entropy_history = [float(x) for x in state["entropy_history"]]
        self.baseline = None if state["baseline"] is None else float(state["baseline"])
        self.gibberish_first = state["gibberish_first"]
        self.rewards = [float(x) for x in state["rewards"]]
        self.best_reward = None if state["best_reward"] is None else float(state["best_reward"])
        for k, s in self.streaks.items():
            s.load(state["streaks"][k])
        self.last_step = state["last_step"]
        d = state["divergence"]
        self.divergence = None if d is None else Divergence(d["kind"], int(d["step"]), d["reason"])
