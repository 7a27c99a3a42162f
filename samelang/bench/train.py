"""``samelang bench --section train``: the bi-encoder trainer's steps per second and peak resident
memory on this CPU, per configuration, side by side.

Each configuration runs ``python -m samelang.training.speed`` in a process of its own (the peak RSS of a process is
its own; the bench never imports the trainer, which brings torch). Same model, batches and tokens per step; only how
a step runs changes:

* ``fp32``: no autocast on the CPU (bf16 autocast on GPUs only);
* ``auto``: bf16 autocast where the CPU multiplies bf16 natively (AVX512_BF16 or AMX), else fp32;
* ``auto, --lora-dropout 0``: without LoRA's input dropout, whose Bernoulli masks take a large share of a CPU step
  (``docs/design.md``); the recipe does without it, as the encoder's own dropout is off for the same reason."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CONFIGS = (
    ("fp32 (the reference)", {"precision": "fp32"}),
    ("auto (bf16 where the CPU has it)", {"precision": "auto"}),
    ("auto, --lora-dropout 0", {"precision": "auto", "lora_dropout": 0.0}),
)
TINY = {"batch_size": 2, "max_length": 32, "langs": "zh", "per_lang": 8}  # a smoke test: measures nothing


def run_train(home: Path, steps: int, tiny: bool = False, log=print) -> list[dict]:
    """One row per configuration: its timing, or the error that stopped its child."""
    rows = []
    for name, options in CONFIGS:
        request = {"steps": steps, "home": str(home), **options, **(TINY if tiny else {})}
        log(f"[bench] train: {name} ...")
        proc = subprocess.run([sys.executable, "-m", "samelang.training.speed", json.dumps(request)],
                              capture_output=True, text=True, timeout=3600)  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"train bench child failed ({name}): {proc.stderr[-2000:]}")
        rows.append({"config": name, **json.loads(proc.stdout.strip().splitlines()[-1])})
    return rows


def format_train_table(rows: list[dict]) -> str:
    base = rows[0]["steps_per_s"]
    lines = [
        "| configuration | bf16 | s / step (median) | steps/s | x vs fp32 | tokens / step | peak RSS MB |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        cells = [r["config"], "yes" if r["bf16"] else "no", f"{r['median_s']:.2f}", f"{r['steps_per_s']:.3f}"]
        cells += [f"{r['steps_per_s'] / base:.2f}", f"{r['tokens_per_step']:,}", f"{r['peak_rss_mb']:,.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
