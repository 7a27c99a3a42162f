"""What every trainer here shares: seeds, torchrun/DDP set-up, device and precision,
the warm-up + linear-decay schedule, checkpoints that resume, and the atomic final save."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
from pathlib import Path

import numpy as np
import torch

from indexes.atomic import atomic_dir


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def dist() -> tuple[int, int, int]:
    """(rank, world size, local rank) under torchrun, else (0, 1, 0)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not torch.distributed.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        torch.distributed.init_process_group(backend)
    return int(os.environ.get("RANK", "0")), world, int(os.environ.get("LOCAL_RANK", "0"))


def device_for(name: str, local_rank: int) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(f"cuda:{local_rank}" if name == "cuda" else "cpu")


def autocast(device: torch.device, precision: str):
    # CPU autocast to bf16 makes the backward pass ~30x slower here (measured): bf16 only on GPU by default
    use_bf16 = precision == "bf16" or (precision == "auto" and device.type == "cuda")
    if not use_bf16:
        return torch.autocast(device.type, enabled=False)
    return torch.autocast(device.type, dtype=torch.bfloat16)


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


def sha256_files(path: Path, names: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for n in names:
        f = path / n
        if f.exists():
            h.update(f.read_bytes())
    return h.hexdigest()


def replace_contents(src: Path, dst: Path) -> None:
    """Move every entry of ``src`` into ``dst`` (each one an atomic rename), then drop ``src``."""
    for item in src.iterdir():
        target = dst / item.name
        if target.is_dir():
            shutil.rmtree(target)
        os.replace(item, target)
    src.rmdir()
