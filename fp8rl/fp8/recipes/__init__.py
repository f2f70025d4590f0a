"""The FP8 training recipes, one module each, named after the recipe (a run id's granularity).

Each module registers one builder with `@register_recipe("<module name>")` (fp8rl.fp8.recipe, where a
recipe's GEMMs, operands and `get_recipe` are defined). Every module here is imported below, so no list
elsewhere names it; fp8rl.vocabulary finds a new one by its file name and adds it to GRANULARITIES,
which the config's `matrix.granularities`, the run ids and the DAG take. At import, each module must
have registered its own name and every name of GRANULARITIES must have a builder.
"""

from __future__ import annotations

import importlib
import pkgutil

from fp8rl.fp8.recipe import BUILDERS
from fp8rl.vocabulary import GRANULARITIES

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

if {m.name for m in pkgutil.iter_modules(__path__)} != set(BUILDERS) or set(BUILDERS) != set(GRANULARITIES):
    raise ImportError(
        f"fp8rl.fp8.recipes: modules {sorted(m.name for m in pkgutil.iter_modules(__path__))}, builders "
        f"{sorted(BUILDERS)} and vocabulary GRANULARITIES {sorted(GRANULARITIES)} must be one set: a "
        'recipe module registers its builder under its own name, @register_recipe("<module name>")'
    )
