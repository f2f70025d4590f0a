"""lm-eval's hub tasks offline on a compute node: `datasets` 5.2 loads a hub id offline
only from a prepared cache, which nothing builds; the eval reads the snapshot `fetch data` put in the
shared cache instead. A stand-in gsm8k (same card configs and splits) goes through the real path:
fetch_snapshot -> hub.json -> plan_tasks -> build_tasks (lm-eval's TaskManager, datasets) with the hub
switched off, in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fp8rl.adapters.hub import fetch_snapshot

ROOT = Path(__file__).resolve().parents[3]
CARD = """---
configs:
- config_name: main
  data_files:
  - split: train
    path: main/train.jsonl
  - split: test
    path: main/test.jsonl
---
# a stand-in for openai/gsm8k
"""

CHILD = r"""
import datasets, json, sys
from pathlib import Path
from fp8rl.config_loader import load_config
from fp8rl.evaluate.eval_tasks import plan_tasks
from fp8rl.evaluate.lm_eval_runner import build_tasks

data = Path(sys.argv[1])
try:
    datasets.load_dataset("openai/gsm8k", "main")
    hub_id = "loaded"
except Exception as exc:
    hub_id = type(exc).__name__
cfg = load_config(sys.argv[2], ["eval.lm_eval_tasks=[gsm8k]", "eval.repeats={}"])
plan = plan_tasks("lm_eval", ["gsm8k"], data)
tasks, _ = build_tasks(cfg, plan)
print(json.dumps({"hub_id": hub_id, "docs": len(list(tasks[0].eval_docs)),
                  "path": tasks[0].config.dataset_path}))
"""


def test_lm_eval_reads_the_fetched_snapshot_offline(tmp_path):
    mirror = tmp_path / "mirror" / "openai" / "gsm8k"
    (mirror / "main").mkdir(parents=True)
    (mirror / "README.md").write_text(CARD)
    for split, n in (("train", 8), ("test", 5)):
        rows = [
            {"question": f"What is {i} + 1?", "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"} for i in range(n)
        ]
        (mirror / "main" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    hf_home = tmp_path / "hf_home"
    snap = fetch_snapshot("openai/gsm8k", repo_type="dataset", revision=None, hf_home=hf_home,
                          mirror=tmp_path / "mirror")  # fmt: skip
    data = tmp_path / "data"
    data.mkdir()
    (data / "hub.json").write_text(json.dumps({"hf_home": str(hf_home), "datasets": {"openai/gsm8k": snap}}))
    env = {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(tmp_path / "ds_cache")}  # fmt: skip
    res = subprocess.run([sys.executable, "-c", CHILD, str(data), str(ROOT / "config" / "paper.yaml")],
                         env=env, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["hub_id"] != "loaded"  # the hub id alone does not load offline (the issue)
    assert got["docs"] == 5 and got["path"] == snap["path"]
