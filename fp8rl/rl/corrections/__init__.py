"""The rollout/trainer mismatch corrections, one module each, registered by name (`_registry`).

The rollout engine samples from pi_rollout, the trainer scores the same tokens as pi_old; with the
per-token log-ratio `d_t = old_t - rollout_t` and `r_t = exp(d_t)`, each correction (vocabulary
`CORRECTIONS`) gives detached per-token weights that multiply the PPO loss and/or a per-sequence keep
mask that removes sequences from the loss (and from its token counts), as verl's
`algorithm.rollout_correction` does with `rollout_is_weights` and the rejection-sampled response mask;
score centering adds a term to the loss instead, and QuRL's adaptive clip range moves each update's
clip bounds. The modules: `tis` (tis, seq_tis), `mis`, `icepop`, `icepop_adaptive`, `scorecenter`
(scorecenter, tis_scorecenter), `qurl`, `none`.

Adding a correction is one module here, named after it, that registers its function with
`@register_correction("<module name>")`, plus its test (qurl.py and tests/unit/rl/test_rl_new_corrections.py
are one): every module of this package is imported below, and fp8rl.vocabulary finds the new name by
the file's name, adding the correction and its variants `fp8_<name>` and `fp8_<name>_calib`, so the
config, the run ids, the DAG and the report take them with no other edit (CONTRIBUTING.md). A module
whose name starts with `_` is a helper, not a correction. At import, each module must have registered
its own name and every name of vocabulary `CORRECTIONS` must be registered.
Calibrated clipping composes with each: it moves the clip bounds, the correction weights the loss.
"""

from __future__ import annotations

import importlib
import pkgutil

from fp8rl.rl.corrections._aliases import mismatch_aliases
from fp8rl.rl.corrections._registry import (
    REGISTRY,
    Correction,
    CorrectionDef,
    CorrectionInputs,
    CorrectionOptions,
    get_correction,
    register_correction,
    rollout_correction,
)
from fp8rl.vocabulary import CORRECTIONS, ICEPOP_BAND, MIS_BAND

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")

_unregistered = sorted(
    {m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")} - set(REGISTRY)
)
if _unregistered:
    raise ImportError(
        f"fp8rl.rl.corrections: module {_unregistered[0]}.py registers no correction under its own name; "
        f'a correction module registers its function with @register_correction("{_unregistered[0]}")'
    )
if set(REGISTRY) != set(CORRECTIONS):
    raise ImportError(
        f"fp8rl.rl.corrections: registered {sorted(REGISTRY)}, but vocabulary CORRECTIONS names "
        f"{sorted(CORRECTIONS)}"
    )

from fp8rl.rl.corrections.icepop import icepop_weights  # noqa: E402
from fp8rl.rl.corrections.mis import mis_keep  # noqa: E402

__all__ = [
    "ICEPOP_BAND",
    "MIS_BAND",
    "REGISTRY",
    "Correction",
    "CorrectionDef",
    "CorrectionInputs",
    "CorrectionOptions",
    "get_correction",
    "icepop_weights",
    "mis_keep",
    "mismatch_aliases",
    "register_correction",
    "rollout_correction",
]
