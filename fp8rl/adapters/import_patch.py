"""Patch a class of an upstream module in this process, now if the module is loaded, else the moment it
is: how the verl adapters reach into every Ray worker (each imports fp8rl's loss module, which installs
the patches) without editing verl's files."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable


class _Finder:
    """A meta-path finder that runs `wrap(module.<cls>)` right after `module` executes, then leaves."""

    def __init__(self, module: str, cls: str, wrap: Callable[[type], type]):
        self.module, self.cls, self.wrap = module, cls, wrap

    def find_spec(self, name, path=None, target=None):
        if name != self.module:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def patched(module):
            exec_module(module)
            self.wrap(getattr(module, self.cls))

        spec.loader.exec_module = patched
        return spec


def patch_class(module: str, cls: str, wrap: Callable[[type], type]) -> None:
    """`wrap(module.<cls>)` now if `module` is loaded, else when it is imported (once: a second call
    while the first waits adds nothing; `wrap` itself must be idempotent)."""
    if module in sys.modules:
        wrap(getattr(sys.modules[module], cls))
    elif not any(isinstance(f, _Finder) and f.module == module for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(module, cls, wrap))
