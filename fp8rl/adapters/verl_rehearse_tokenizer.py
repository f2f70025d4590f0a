"""The `tokenizer` step of a training job's rehearsal past its first GPU point
(fp8rl.adapters.verl_rehearse): verl's save of the tokenizer (the job's base tokenizer loaded and saved
again by this machine's transformers, as the train image's transformers 5 does), exported with the
`--tokenizer` the job script passes (fp8rl.adapters.verl_checkpoint), and loaded by the bfcl image's
transformers 4.51.3 from `build/tf4-venv`, as the agent eval's handler first loads it (skipped, and said
so, without that venv)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from fp8rl.adapters.verl_checkpoint import HF_SUBDIR, export
from fp8rl.adapters.verl_run import SCRIPT_FILE

TF4_PYTHON = Path(__file__).resolve().parents[2] / "build" / "tf4-venv" / "bin" / "python"
TAIL_CHARS = 4000

# the export's `--tokenizer` (on one of the command's continued lines)
TOKENIZER_RE = re.compile(r"verl_checkpoint export (?:[^\n]*\\\n)*[^\n]*?--tokenizer (\S+)")
LOAD_TOKENIZER = """
import sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
assert tok.chat_template, "no chat template"
print(len(tok("1 + 1?")["input_ids"]), tok.eos_token)
"""
RESAVE_TOKENIZER = "import sys\nfrom transformers import AutoTokenizer\nAutoTokenizer.from_pretrained(sys.argv[1]).save_pretrained(sys.argv[2])\n"


def tokenizer_check(out: Path, base: Path, tf4_python: Path = TF4_PYTHON) -> tuple[bool, str, bool]:
    """`(ok, what it found, skipped)`: verl's save of the tokenizer exported as the job script under
    `out` exports it, loaded by transformers 4.51.3 (module docstring)."""
    if not Path(tf4_python).is_file():
        return True, f"no {tf4_python} (make build/tf4-venv)", True
    script = (out / SCRIPT_FILE).read_text()
    m = TOKENIZER_RE.search(script)
    tokenizer = Path(shlex.split(m[1])[0]) if m else None
    work = out / "rehearsal_export"
    shutil.rmtree(work, ignore_errors=True)
    hf = work / "actor" / HF_SUBDIR
    subprocess.run([sys.executable, "-c", RESAVE_TOKENIZER, str(base), str(hf)], check=True,
                   capture_output=True, timeout=300)  # fmt: skip
    shutil.copyfile(Path(base) / "config.json", hf / "config.json")
    (hf / "model.safetensors").write_bytes(b"")  # the weights are not what this step reads
    target = export(work / "actor", work / "checkpoint", tokenizer=tokenizer)
    res = subprocess.run([str(tf4_python), "-c", LOAD_TOKENIZER, str(target)], capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    how = f"--tokenizer {tokenizer}" if tokenizer else "no --tokenizer in the job script"
    if res.returncode != 0:
        return (
            False,
            f"transformers 4.51.3 cannot load the export ({how}):\n{res.stderr[-TAIL_CHARS:]}",
            False,
        )
    return True, f"the export ({how}) loads in transformers 4.51.3 with its chat template", False
