"""Write containers/bfcl/handlers.txt: the model names the pinned bfcl-eval can format prompts for (the keys
of its `bfcl_eval/constants/model_config.py` tables), read from the sources scripts/upstream_src.sh
unpacks. `fp8rl config validate` refuses a `bfcl_handler` (or, without one, an `hf_id`) not in the list.

    python scripts/bfcl_handlers.py [build/upstream]
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "containers" / "bfcl" / "handlers.txt"


def handler_names(upstream: Path) -> list[str]:
    """The string keys of every dict literal in bfcl-eval's model_config.py whose values are ModelConfig(...)."""
    tree = ast.parse((upstream / "bfcl_eval" / "constants" / "model_config.py").read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                is_config = isinstance(value, ast.Call) and getattr(value.func, "id", None) == "ModelConfig"
                if is_config and isinstance(key, ast.Constant) and isinstance(key.value, str):
                    names.add(key.value)
    return sorted(names)


def main() -> int:
    upstream = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "build" / "upstream"
    lock = (ROOT / "containers" / "bfcl" / "requirements.lock").read_text().splitlines()
    pin = next(line.split()[0] for line in lock if line.startswith("bfcl-eval=="))
    names = handler_names(upstream)
    OUT.write_text(f"# {pin}: model handler names (scripts/bfcl_handlers.py)\n" + "\n".join(names) + "\n")
    print(f"{OUT}: {len(names)} handlers of {pin}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
