"""The one training loop: every trainer here (bi-encoder, reranker, reader, and ``samelang adapt``
through the bi-encoder) says what a step's loss terms are, which evaluators watch the dev slice and
how its model folder is written; the loop owns the rest.

Why one: steps, schedule, precision, checkpoints and resume, the time budget and the final save are
the same in every trainer, and when each had its own copy they drifted apart (one trainer had a time
budget, one logged its dev metrics, one did not). The evaluators are objects, as sentence-transformers'
``SentenceEvaluator``: each owns its metrics and its log line."""

from __future__ import annotations

import abc
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from samelang.primitives.atomic import atomic_dir
from samelang.training import runs


def warmup_linear(total: int, warmup: float):
    """LambdaLR factor: linear warm-up over ``warmup * total`` steps, then linear decay to 0."""
    warm = int(warmup * total)
    return lambda s: (s + 1) / max(1, warm) if s < warm else max(0.0, (total - s) / max(1, total - warm))


def latest_checkpoint(out: Path) -> Path | None:
    ckpts = sorted((out / "checkpoints").glob("step-*"), key=lambda p: int(p.name.split("-")[1]))
    return ckpts[-1] if ckpts else None


def save_checkpoint(out: Path, step: int, module, opt, sched, history, keep: tuple[str, ...] = ("lora_",)) -> None:
    """Trainable weights (the parameters whose names hold ``keep``, or all), optimiser, schedule, RNGs."""
    state = module.state_dict()
    trainable = {k: v for k, v in state.items() if any(m in k for m in keep)} or state
    with atomic_dir(out / "checkpoints" / f"step-{step:06d}") as tmp:
        torch.save(
            {
                "model": trainable, "optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "step": step,
                "history": history, "torch_rng": torch.get_rng_state(), "py_rng": random.getstate(),
            },
            tmp / "state.pt",
        )  # fmt: skip
    for old in sorted((out / "checkpoints").glob("step-*"))[:-2]:
        shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(ckpt: Path, module, opt, sched, device) -> tuple[int, list]:
    """Restore what ``save_checkpoint`` wrote; returns (step, history)."""
    state = torch.load(ckpt / "state.pt", map_location=device, weights_only=False)
    module.load_state_dict(state["model"], strict=False)
    opt.load_state_dict(state["optimizer"])
    sched.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["py_rng"])
    return state["step"], state["history"]


def setup(module, args, total: int, device, local_rank: int, world: int, log=print):
    """AdamW over the trainable parameters, warm-up + linear decay over ``args.schedule_steps`` (else
    ``total``), DDP when ``world > 1``, and the latest checkpoint in ``args.out`` restored when
    ``args.resume``.

    Returns ``(fwd, params, opt, sched, step, history)``; ``fwd`` is the module to call (DDP-wrapped)."""
    module.train()
    params = [p for p in module.parameters() if p.requires_grad]
    fwd = module
    if world > 1:
        fwd = torch.nn.parallel.DistributedDataParallel(
            module, device_ids=[local_rank] if device.type == "cuda" else None
        )
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=args.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_linear(args.schedule_steps or total, args.warmup))
    step, history = 0, []
    ckpt = latest_checkpoint(args.out) if args.resume else None
    if ckpt is not None:
        step, history = load_checkpoint(ckpt, module, opt, sched, device)
        log(f"resumed from {ckpt} at step {step}")
    return fwd, params, opt, sched, step, history


def optimiser_step(parts: dict, params, opt, sched, step: int, started: float | None = None) -> dict:
    """Backward on ``parts["loss"]``, clip to norm 1, step; returns the step's record for the history
    (with ``started``, the ``time.perf_counter()`` before the step's forward: its wall seconds, which
    the checkpoints carry, so a run resumed on another machine still knows its whole training time)."""
    opt.zero_grad(set_to_none=True)
    parts["loss"].backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    sched.step()
    rec = {"step": step, **{k: float(v.item()) for k, v in parts.items()}, "lr": sched.get_last_lr()[0]}
    if started is not None:
        rec["seconds"] = round(time.perf_counter() - started, 3)
        rec["on"] = runs.machine()  # a run resumed elsewhere keeps each machine's steps apart (runs.run_timing)
    return rec


def out_of_time(history: list[dict], minutes: float | None, log=print) -> bool:
    """Whether a run's training steps (every step's wall time, over resumes) used up ``minutes``."""
    if minutes is None or sum(h.get("seconds", 0.0) for h in history) < 60 * minutes:
        return False
    log(f"stopping after {len(history)} steps: --max-minutes {minutes:g} used up")
    return True


class Evaluator(abc.ABC):
    """Measures the module on held-out data every ``every`` steps and after the last one (rank 0, under
    the run's precision); the step's record keeps the result under ``key``."""

    key = "dev"

    def __init__(self, every: int):
        self.every = every

    @abc.abstractmethod
    def __call__(self, module) -> dict:
        """The metrics (``module`` in eval mode while measured, back in train mode after)."""

    def line(self, step: int, result: dict) -> str:
        return f"step {step}: {self.key} {result}"

    def due(self, step: int, total: int) -> bool:
        return step % self.every == 0 or step == total


@dataclass
class Plan:
    """What one trainer asks of the loop.

    ``terms(fwd, step)``: the step's loss terms, ``"loss"`` their sum (``fwd``: the module, DDP-wrapped
    on several processes); ``save(history, seconds)``: writes the model folder on rank 0;
    ``keep``: the parameter-name parts a checkpoint stores (the trainable ones; all when none match)."""

    desc: str
    terms: Callable[..., dict[str, torch.Tensor]]
    save: Callable[[list, float], None]
    evaluators: Sequence[Evaluator] = ()
    keep: tuple[str, ...] = ("lora_", "modules_to_save")


def fit(module, args, total: int, device: torch.device, plan: Plan, log=print):
    """Train ``module`` for ``total`` steps (or until ``args.max_minutes`` of steps are used up, over
    resumes), from the latest checkpoint in ``args.out`` when ``args.resume``; checkpoint every
    ``args.save_every`` steps; then save, drop the checkpoints and return ``args.out``."""
    rank, world, local_rank = runs.dist()
    fwd, params, opt, sched, step, history = setup(module, args, total, device, local_rank, world, log)
    t0 = time.perf_counter()
    bar = tqdm(total=total, initial=step, desc=plan.desc, disable=rank != 0)
    while step < total and not out_of_time(history, args.max_minutes, log):
        started = time.perf_counter()
        with runs.autocast(device, args.precision):
            parts = plan.terms(fwd, step)
        step += 1
        rec = optimiser_step(parts, params, opt, sched, step, started)
        bar.update(1)
        bar.set_postfix({k: f"{v:.4f}" for k, v in rec.items() if k not in ("step", "lr", "seconds", "on")})
        for evaluator in plan.evaluators if rank == 0 else ():
            if evaluator.due(step, total):
                with runs.autocast(device, args.precision):
                    rec[evaluator.key] = evaluator(module)
                log(evaluator.line(step, rec[evaluator.key]))
        history.append(rec)
        if rank == 0 and step % args.save_every == 0 and step < total:
            save_checkpoint(args.out, step, module, opt, sched, history, keep=plan.keep)
    bar.close()
    if rank == 0:
        plan.save(history, time.perf_counter() - t0)
        shutil.rmtree(args.out / "checkpoints", ignore_errors=True)
    if world > 1:
        torch.distributed.barrier()
    return args.out


def epoch_batch(step: int, steps_per_epoch: int, n: int, batch_size: int, seed: int, world: int = 1, rank: int = 0):
    """The indices of ``step``'s batch over ``n`` instances: a fresh order each epoch (seeded by
    ``seed + epoch``, so a resumed run draws the batches it would have drawn), each process its slice."""
    epoch, pos = divmod(step, steps_per_epoch)
    order = np.random.default_rng(seed + epoch).permutation(n)
    start = (pos * world + rank) * batch_size
    return order[start : start + batch_size]
