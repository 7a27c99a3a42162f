"""How fast the inference engine embeds on this GPU at each padded-token budget per forward pass
(``--max-batch-tokens``): the default for the device beside 256 (the CPU default), 8,192 and 32,768.

Why it exists: on a GPU a pass costs about the same at 256 padded tokens as at thousands (kernel
launches bound it, not arithmetic), so the CPU's 256 left an H200 at a sixth of its speed; this is the
check that the device default stays where the speed is. Each row: the base model in bf16 over the
XQuAD test paragraphs of en, zh and de, fed in the index build's batches of 32 (median of 3 warm passes,
after one cold pass that meets each new shape first), and every test question in one call.

    python scripts/gpu_batch_tokens.py            # prints the table (needs `samelang models prepare`)
    python scripts/gpu_batch_tokens.py --write    # and keeps it in docs/gpu-host.md
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from samelang.core.model_folder import replace_section
from samelang.core.models.base_model import base_model_dir
from samelang.core.models.encoder import Encoder
from samelang.core.runtime.precision import EngineOptions, cpu_summary
from samelang.core.settings import settings
from samelang.corpora import load_xquad
from samelang.indexes.writes import _embed_all  # the index build's own batching, so that this times it

HEADING = "## Padded tokens per pass on a GPU (measured)"
DOC = Path(__file__).resolve().parent.parent / "docs" / "gpu-host.md"


def timed(fn, device: str) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def measure(enc: Encoder, docs: list[str], questions: list[str], device: str, default: bool) -> str:
    """One table row: the cold pass, the warm passes' median, the questions in one call."""

    def build():  # what `samelang index build` runs: longest first, 32 texts per call
        _embed_all(docs, enc.encode_passages, enc.dim, 32, "embedding documents")

    cold = timed(build, device)
    warm = statistics.median(timed(build, device) for _ in range(3))
    q = timed(lambda: enc.encode_queries(questions), device)
    label = f"{enc.engine.options.max_batch_tokens:,}" + (" (device default)" if default else "")
    return f"| {label} | {cold:.2f} | {len(docs) / warm:,.0f} | {len(questions) / q:,.0f} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help=f"keep the table in {DOC.relative_to(DOC.parents[1])}")
    args = ap.parse_args()
    cfg = settings()
    device = cfg.torch_device()
    if device != "cuda":
        raise SystemExit("gpu_batch_tokens: no GPU here (torch sees none); this measures the GPU default only")
    base = base_model_dir(cfg.home)
    x = load_xquad(["en", "zh", "de"], split="test")
    docs, questions = [d.text for d in x.documents()], [q.text for q in x.questions]
    rows = []
    for budget in (None, 256, 8192, 32768):
        enc = Encoder(base, device, home=cfg.home, options=EngineOptions(precision="bf16", max_batch_tokens=budget))
        rows.append(measure(enc, docs, questions, device, default=budget is None))
        print(rows[-1], flush=True)
        del enc  # one model on the GPU at a time
    host = f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}; host CPU {cpu_summary()}"
    body = (
        f"`python scripts/gpu_batch_tokens.py --write` on {host}: the base model in bf16, {len(docs)} XQuAD "
        f"test paragraphs (en, zh, de) in the index build's batches of 32, and {len(questions)} test questions "
        "in one call.\n\n"
        "| padded tokens per pass | cold pass s | paragraphs/s (warm median of 3) | questions/s |\n|---|---|---|---|\n"
        + "\n".join(rows) + "\n"
    )  # fmt: skip
    print(body)
    if args.write:
        replace_section(DOC, HEADING, body)


if __name__ == "__main__":
    main()
