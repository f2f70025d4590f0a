"""A local directory standing in for the Hugging Face hub (`$FP8RL_HUB_MIRROR`): DAPO-Math-17k shaped
exactly like the published parquet (BytedTsinghua-SIA/DAPO-Math-17k: `data_source`, `prompt` as a list
of `{content, role}` messages, `ability`, `reward_model` `{ground_truth, style}`, `extra_info` `{index}`;
each problem repeated, as in the published file), lm-eval's eval sets, and tiny "models"."""

from __future__ import annotations

from pathlib import Path

DAPO = "BytedTsinghua-SIA/DAPO-Math-17k"
INSTRUCTION = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{q}\n\n"
    'Remember to put your answer on its own line after "Answer:".'
)


def dapo_rows(n_problems: int, repeats: int) -> list[dict]:
    rows = []
    for r in range(repeats):
        for i in range(n_problems):
            rows.append(
                {
                    "data_source": "math_dapo",
                    "prompt": [{"content": INSTRUCTION.format(q=f"What is {i} + {i}?"), "role": "user"}],
                    "ability": "MATH",
                    "reward_model": {"ground_truth": str(2 * i), "style": "rule-lighteval/MATH_v2"},
                    "extra_info": {"index": f"id-{i}-{r}"},
                }
            )
    return rows


def make_hub(root: Path, *, n_problems: int = 12, repeats: int = 3, models: tuple[str, ...] = ()) -> Path:
    """Write the stand-in hub under `root` and return it."""
    import pandas as pd

    from fp8rl.adapters.hub import EVAL_DATASETS

    data = root / DAPO / "data"
    data.mkdir(parents=True)
    pd.DataFrame(dapo_rows(n_problems, repeats)).to_parquet(data / "dapo-math-17k.parquet", index=False)
    (root / DAPO / "README.md").write_text("DAPO-Math-17k stand-in\n")
    for repo in EVAL_DATASETS.values():
        (root / repo).mkdir(parents=True)
        (root / repo / "test.jsonl").write_text('{"problem": "1+1", "answer": "2"}\n')
    for hf_id in models:
        (root / hf_id).mkdir(parents=True)
        (root / hf_id / "config.json").write_text('{"model_type": "qwen3"}\n')
        (root / hf_id / "model.safetensors").write_bytes(b"\0" * 64 + hf_id.encode())
        (root / hf_id / "tokenizer_config.json").write_text('{"chat_template": "{{ messages }}"}\n')
    return root
