"""The interpreter-start hook (fp8rl.startup_hook): `import torch` before `import fp8rl` keeps the
reproducible numerics, with the same bits as importing fp8rl first; without the hook that order is
refused (so the hook is what makes it work)."""

import os
import subprocess
import sys

import pytest

from fp8rl import startup_hook

# A fresh interpreter started without `site` (`-S`: this environment's own `.pth` files, its hook
# included, are not run), given site-packages as a plain path, then the hook's `.pth` from `HOOK_DIR` (if
# set) run the way `site` runs it at start; it imports in the order given, computes, and prints a digest.
PROBE = r"""
import os, site, sys
sys.path.append(os.environ["SITE_PACKAGES"])
if os.environ.get("HOOK_DIR"):
    site.addsitedir(os.environ["HOOK_DIR"])
if sys.argv[1] == "torch_first":
    import torch
    import fp8rl
else:
    import fp8rl
    import torch
import hashlib
from fp8rl import numerics
numerics.ensure("reproducible")
torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
a, b = torch.randn(257, 300, generator=g), torch.randn(300, 129, generator=g)
torch.manual_seed(0)
lin = torch.nn.Linear(128, 96)
x = torch.randn(64, 128, generator=g, requires_grad=True)
lin(x).square().sum().backward()
q = torch.randn(2, 4, 33, 32, generator=g)
out = [a @ b, torch.softmax(a, -1), torch.nn.functional.scaled_dot_product_attention(q, q, q), x.grad]
print(hashlib.sha256(b"".join(t.detach().numpy().tobytes() for t in out)).hexdigest())
"""


def _env(hook_dir=None):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "FP8RL_NUMERICS")}
    env.pop("HOOK_DIR", None)
    env["SITE_PACKAGES"] = str(startup_hook.site_dir())
    if hook_dir is not None:
        env["HOOK_DIR"] = str(hook_dir)
    return env


def _probe(order, hook_dir=None):
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return subprocess.run([sys.executable, "-S", "-c", PROBE, order], env=_env(hook_dir), cwd=repo,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


@pytest.mark.slow
def test_torch_first_gives_the_same_bits_with_the_hook(tmp_path):
    startup_hook.install(tmp_path)
    assert startup_hook.installed(tmp_path)
    first = _probe("fp8rl_first")
    hooked = _probe("torch_first", tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    assert hooked.returncode == 0, hooked.stderr[-2000:]
    assert hooked.stdout == first.stdout


@pytest.mark.slow
def test_torch_first_without_the_hook_is_refused():
    bare = _probe("torch_first")
    assert bare.returncode != 0 and "startup_hook" in bare.stderr


def test_the_hook_line_leaves_fast_mode_and_an_explicit_core_alone():
    line = startup_hook.pth_line()
    assert line.startswith("import os;") and line.endswith("\n") and line.count("\n") == 1
    for env, expected in (({}, "Haswell"), ({"FP8RL_NUMERICS": "fast"}, None),
                          ({"OPENBLAS_CORETYPE": "Zen"}, "Zen")):  # fmt: skip
        namespace_env = dict(env)
        exec(line.replace("os.environ", "ENV").replace("import os; ", ""), {"ENV": namespace_env})
        assert namespace_env.get("OPENBLAS_CORETYPE") == expected


def test_this_environment_has_the_hook_when_made_by_make_install():
    if not startup_hook.installed():
        pytest.skip("environment not made by `make install` (no hook); CI's is")
    out = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('OPENBLAS_CORETYPE'))"],
                         env=_env(), capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.stdout.strip() == "Haswell"
