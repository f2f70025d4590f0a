"""`models[].package` is a distribution looked up in its installed-files record, never a module
imported: a name like `this.x` ran the module `this` (it printed the Zen of Python)."""

from __future__ import annotations

import pytest

from fp8rl.engine.pretrained import package_gguf


@pytest.mark.parametrize("name", ["this.x", "this", "antigravity", "fp8rl"])
def test_a_package_name_is_never_imported(name, capsys):
    import sys

    before = set(sys.modules)
    with pytest.raises(ValueError, match=f"model package {name!r} (is not installed|.* ships no .gguf)"):
        package_gguf(name)
    assert capsys.readouterr().out == ""
    assert not {"this", "antigravity"} & (set(sys.modules) - before)
