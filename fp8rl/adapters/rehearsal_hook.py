"""The GPU boundary of a rehearsal (fp8rl.adapters.verl_rehearse), copied as `sitecustomize.py` onto the
rehearsed job script's `PYTHONPATH` so that every Python process of the job (the driver, Ray's workers)
runs it at start-up. Standard library only: it must not import fp8rl or verl before they are asked for.

With `FP8RL_REHEARSAL=1` it patches verl's `ResourcePoolManager.create_resource_pool` (in
`verl.single_controller.ray.base`, right after that module executes): the trainer's request for its
GPU resource pools, the first point of a job that needs a GPU, prints `MARKER` with the trainer class
(found up the stack) and the GPUs asked for, and raises `RehearsalReachedGPU`.
"""

from __future__ import annotations

import importlib.util
import os
import sys

MARKER = "fp8rl-rehearsal: reached the first GPU point"
REHEARSAL_ENV = "FP8RL_REHEARSAL"
BOUNDARY_MODULE = "verl.single_controller.ray.base"


class RehearsalReachedGPU(RuntimeError):
    """Raised where verl first needs a GPU (its resource pools), in a rehearsal only."""


def gpu_boundary(self) -> None:
    """Stands in for `ResourcePoolManager.create_resource_pool`: print the marker and stop."""
    trainer, frame = None, sys._getframe(1)
    while frame is not None and trainer is None:
        obj = frame.f_locals.get("self")
        if obj is not None and getattr(obj, "resource_pool_manager", None) is self:
            trainer = type(obj)
        frame = frame.f_back
    name = f"{trainer.__module__}.{trainer.__qualname__}" if trainer else "unknown"
    gpus = sum(n for nodes in self.resource_pool_spec.values() for n in nodes)
    message = f"{MARKER}: trainer={name} gpus={gpus} pools={dict(self.resource_pool_spec)}"
    print(message, flush=True)
    raise RehearsalReachedGPU(message)


class BoundaryFinder:
    """A meta-path finder that patches `BOUNDARY_MODULE` right after it executes."""

    def find_spec(self, name, path=None, target=None):
        if name != BOUNDARY_MODULE:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def patched(module):
            exec_module(module)
            module.ResourcePoolManager.create_resource_pool = gpu_boundary

        spec.loader.exec_module = patched
        return spec


def install() -> None:
    """Make verl stop at its GPU resource pools in this process."""
    if not any(isinstance(f, BoundaryFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, BoundaryFinder())


if os.environ.get(REHEARSAL_ENV) == "1":
    install()
