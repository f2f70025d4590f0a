"""fp8rl: fully-FP8 RL benchmark harness.

Importing the package puts the math libraries in the numerics mode the environment asks for (pinned,
reproducible kernels by default) before torch runs anything: `fp8rl.numerics`.
"""

from fp8rl import numerics as _numerics

_numerics.apply()
