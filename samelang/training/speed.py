"""Time the bi-encoder trainer's optimiser steps, in this process: what ``samelang bench --section
train`` runs once per configuration, each in a process of its own so that its peak resident memory is
its own (``python -m samelang.training.speed '{"steps": 3, ...}'`` prints one JSON line).

A step is the trainer's own: :func:`~samelang.training.biencoder.compute_loss` on a batch of the
recipe's triplets (English question, English and target-language paragraph, target-language question,
a hard negative), stepped by the one training loop (:func:`~samelang.training.trainer.fit`, which times
every step); the batches are the trainer's group-unique batches, so every configuration sees the same
tokens. The first step is a warm-up."""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

import torch

from samelang.core.models.base_model import ensure_base_model
from samelang.core.settings import default_home
from samelang.corpora import dev_articles
from samelang.training import runs
from samelang.training.biencoder import BiencoderArgs, BiEncoderModule, compute_loss
from samelang.training.data import build_triplets, group_unique_batches
from samelang.training.losses import InfoNCELoss, JSDLoss
from samelang.training.trainer import Plan, fit

# the recipe whose steps are timed: seed 000's objective plus target-language queries and hard negatives
RECIPE = {"target_queries": True, "hard_negatives": True, "per_lang": 256, "batch_size": 16}


def time_steps(steps: int, home: Path, **options) -> dict:
    """Median seconds per optimiser step over ``steps`` steps (after one warm-up), the tokens the
    batches held, and this process's peak resident memory. ``options``: :class:`BiencoderArgs` fields
    over :data:`RECIPE` (``precision``, ``lora_dropout``, ``max_length``, ``batch_size``, ``langs``)."""
    args = BiencoderArgs(out=home / "speed-run", home=home, device="cpu", resume=False, save_every=10**9,
                         **{**RECIPE, **options})  # fmt: skip
    runs.seed_all(args.seed)
    triplets = build_triplets(args.langs, "train", args.seed, args.per_lang, exclude_articles=dev_articles(3))
    batches = group_unique_batches([t.group for t in triplets], args.batch_size, args.seed)
    module = BiEncoderModule(str(ensure_base_model(home)), args)
    device = torch.device("cpu")
    jsd, nce = JSDLoss(), InfoNCELoss(args.temperature)

    def batch(step: int) -> list:
        return [triplets[i] for i in batches[step % len(batches)]]

    def terms(fwd, step: int) -> dict:
        return compute_loss(fwd, args.loss, batch(step), jsd, nce, None, args.target_queries, args.hard_negatives)

    history = []
    fit(module, args, steps + 1, device, Plan("time steps", terms, lambda h, _: history.extend(h)), lambda *a: None)
    seconds = [h["seconds"] for h in history[1:]]
    texts = [
        x for step in range(1, steps + 1) for t in batch(step) for x in (t.q_en, t.p_en, t.p_tgt, t.q_tgt, t.p_neg)
    ]
    tokens = sum(
        map(len, module.tokenizer([x for x in texts if x], truncation=True, max_length=args.max_length)["input_ids"])
    )
    seconds.sort()
    median = seconds[len(seconds) // 2]
    return {
        "median_s": median,
        "steps_per_s": 1.0 / median,
        "tokens_per_step": tokens // max(1, len(seconds)),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "bf16": runs.uses_bf16(device, args.precision),
        "loss": history[-1]["loss"],
    }


if __name__ == "__main__":  # pragma: no cover - the bench runs it in a child process
    request = json.loads(sys.argv[1])
    home = Path(request.pop("home", None) or default_home())
    print(json.dumps(time_steps(request.pop("steps"), home, **request)))
