"""Time the bi-encoder trainer's optimiser steps, in this process: what ``samelang bench --section
train`` runs once per configuration, each in a process of its own so that its peak resident memory is
its own (``python -m samelang.training.speed '{"steps": 3, ...}'`` prints one JSON line).

A step is the trainer's own: :func:`~samelang.training.biencoder.compute_loss` on a batch of the
recipe's triplets (English question, English and target-language paragraph, target-language question,
a hard negative), then :func:`~samelang.training.loop.optimiser_step`; the batches are the trainer's
group-unique batches, so every configuration sees the same tokens. The first step is a warm-up."""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

import torch

from samelang.core.models.base_model import ensure_base_model
from samelang.core.settings import default_home
from samelang.corpora import dev_articles
from samelang.training import loop
from samelang.training.biencoder import BiencoderArgs, BiEncoderModule, compute_loss
from samelang.training.data import build_triplets, group_unique_batches
from samelang.training.losses import InfoNCELoss, JSDLoss

# the recipe whose steps are timed: seed 000's objective plus target-language queries and hard negatives
RECIPE = {"target_queries": True, "hard_negatives": True, "per_lang": 256, "batch_size": 16}


def time_steps(steps: int, home: Path, **options) -> dict:
    """Median seconds per optimiser step over ``steps`` steps (after one warm-up), the tokens the
    batches held, and this process's peak resident memory. ``options``: :class:`BiencoderArgs` fields
    over :data:`RECIPE` (``precision``, ``lora_dropout``, ``max_length``, ``batch_size``, ``langs``)."""
    args = BiencoderArgs(out=home / "speed-run", home=home, device="cpu", **{**RECIPE, **options})
    loop.seed_all(args.seed)
    triplets = build_triplets(args.langs, "train", args.seed, args.per_lang, exclude_articles=dev_articles(3))
    batches = group_unique_batches([t.group for t in triplets], args.batch_size, args.seed)
    module = BiEncoderModule(str(ensure_base_model(home)), args)
    device = torch.device("cpu")
    fwd, params, opt, sched, _, _ = loop.setup(module, args, steps + 1, device, 0, 1, log=lambda *a: None)
    jsd, nce = JSDLoss(), InfoNCELoss(args.temperature)
    seconds, tokens = [], 0
    for step in range(steps + 1):
        batch = [triplets[i] for i in batches[step % len(batches)]]
        t0 = time.perf_counter()
        with loop.autocast(device, args.precision):
            parts = compute_loss(fwd, args.loss, batch, jsd, nce, None, args.target_queries, args.hard_negatives)
        loop.optimiser_step(parts, params, opt, sched, step + 1)
        if step:
            seconds.append(time.perf_counter() - t0)
            texts = [x for t in batch for x in (t.q_en, t.p_en, t.p_tgt, t.q_tgt, t.p_neg) if x]
            tokens += sum(map(len, module.tokenizer(texts, truncation=True, max_length=args.max_length)["input_ids"]))
    seconds.sort()
    median = seconds[len(seconds) // 2]
    return {
        "median_s": median,
        "steps_per_s": 1.0 / median,
        "tokens_per_step": tokens // max(1, len(seconds)),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "bf16": loop.uses_bf16(device, args.precision),
        "loss": float(parts["loss"]),
    }


if __name__ == "__main__":  # pragma: no cover - the bench runs it in a child process
    request = json.loads(sys.argv[1])
    home = Path(request.pop("home", None) or default_home())
    print(json.dumps(time_steps(request.pop("steps"), home, **request)))
