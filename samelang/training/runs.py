"""What every training run here shares besides its loop (:mod:`samelang.training.trainer`): the
options, seeds, torchrun/DDP set-up, device and precision, LoRA, and the model folder it writes
(run record, history, manifest, the atomic final save)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import time
from functools import lru_cache
from itertools import groupby
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from samelang.core import model_folder
from samelang.core.models.base_model import BASE_MODEL_NAME, ensure_base_model
from samelang.core.models.hub import check_remote_code, locate
from samelang.core.models.loading import adapter_base, base_record
from samelang.core.runtime.precision import cpu_has_bf16, cpu_summary
from samelang.core.settings import HubOptions, default_home

# the modules LoRA adapts in both trainers (every linear layer of the BERT encoder)
LORA_TARGETS = ["query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense"]
# options that change how a run is carried out, not the model it produces: left out of reproduce commands
OPERATIONAL = ("resume", "device", "eval_every", "save_every", "home", "corpora", "calibrate_only")


class TrainerArgs(HubOptions):
    """The options every trainer shares (each trainer's class adds its own).

    Declared once here: ``samelang train ...`` derives its flags, the ``SAMELANG_TRAIN_*``
    variables and the model card's reproduce command from these fields
    (:mod:`samelang.core.options`)."""

    model_config = SettingsConfigDict(
        env_prefix="SAMELANG_TRAIN_", extra="ignore", env_ignore_empty=True, validate_by_name=True
    )

    out: Path = Field(description="Output folder (adapter or full model); checkpoints go in OUT/checkpoints.")
    epochs: float = Field(1.0, gt=0, description="Passes over the training instances.")
    max_steps: int | None = Field(None, ge=1, description="Stop after this many optimiser steps.")
    max_minutes: float | None = Field(
        None, gt=0, description="Stop after this many minutes of training steps (over resumes), then save the model."
    )
    schedule_steps: int | None = Field(
        None, ge=1,
        description="Steps the learning-rate schedule spans (default: the run's own): a run stopped early at "
        "--max-steps keeps the schedule it was started with, and its reproduce command says so.",
    )  # fmt: skip
    batch_size: int = Field(16, ge=1, description="Instances per step and process.")
    lr: float = Field(2e-4, gt=0, description="Peak learning rate (AdamW).")
    warmup: float = Field(0.1, ge=0, le=1, description="Share of the steps spent warming up the learning rate.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    full: bool = Field(False, description="Full fine-tune instead of LoRA.")
    lora_r: int = Field(16, ge=1, description="LoRA rank.")
    lora_alpha: int = Field(32, ge=1, description="LoRA alpha (scale = alpha / r).")
    lora_dropout: float = Field(0.05, ge=0, lt=1, description="LoRA dropout.")
    max_length: int = Field(256, ge=8, le=512, description="Tokens per input (longer ones are truncated).")
    precision: Literal["auto", "bf16", "fp32"] = Field(
        "auto",
        description="Training precision; auto: bf16 autocast on GPU and on CPUs with native bf16 (AVX512_BF16 or "
        "AMX), fp32 on other CPUs.",
    )
    seed: int = Field(0, description="Seed of data order, sampling and new weights.")
    dev_n_articles: int = Field(3, ge=0, description="Train articles held out as the dev slice.")
    eval_every: int = Field(50, ge=1, description="Evaluate on the dev slice every N steps.")
    save_every: int = Field(100, ge=1, description="Checkpoint every N steps.")
    resume: bool = Field(True, description="Resume from the latest checkpoint in OUT.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="Training device.")
    home: Path = Field(
        default_factory=default_home,
        validation_alias="SAMELANG_HOME",
        description="Cache of the converted base model and teacher scores (default ~/.cache/samelang).",
    )

    def saved(self) -> dict:
        """The options as ``training_args.json`` keeps them (JSON types; not the machine's cache and corpus folders)."""
        return self.model_dump(mode="json", exclude={"home", "corpora"})


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


def uses_bf16(device: torch.device, precision: str) -> bool:
    """Whether :func:`autocast` runs bf16 for this device and ``--precision``."""
    return precision == "bf16" or (precision == "auto" and (device.type == "cuda" or cpu_has_bf16()))


def autocast(device: torch.device, precision: str):
    """bf16 autocast where the hardware multiplies bf16 natively: GPUs, and CPUs with AVX512_BF16 or AMX
    (read at run time). Where it is emulated (AVX2 only) bf16 made the backward pass ~30x slower
    (measured on an AMD EPYC without it), so ``auto`` stays fp32 there. On a Zen 4 EPYC (AVX512_BF16)
    one bi-encoder step ran 19.5 s at fp32 and 15.0 s in bf16 (``samelang bench --section train``)."""
    if not uses_bf16(device, precision):
        return torch.autocast(device.type, enabled=False)
    return torch.autocast(device.type, dtype=torch.bfloat16)


def start(args) -> tuple[int, int, int, torch.device]:
    """Every trainer's first step: (rank, world size, local rank, device), every seed set."""
    rank, world, local_rank = dist()
    device = device_for(args.device, local_rank)
    seed_all(args.seed)
    return rank, world, local_rank, device


def langs_of(text: str) -> tuple[str, ...]:
    """``--langs``' comma-separated codes."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


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


@lru_cache(maxsize=1)
def machine() -> str:
    """Where this process trains: the GPU's name, else :func:`cpu_summary` (the CPU and its speed flags)."""
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else cpu_summary()


def run_timing(history: list, seconds: float) -> dict:
    """The training time of a run that may have been resumed (each step's ``seconds`` in the history;
    steps recorded before steps were timed count at the median of the timed ones, and are counted),
    its steps/s, and the CPU or GPU it ran on. ``seconds``: this process's wall time, the total when
    no step is timed. ``median_step_s``: the median seconds a step, the rate a process stopped and
    continued does not distort (its pause lands in one step's wall time, and so in the total). A run
    resumed on another machine (each step records its machine, ``on``) has one ``segments`` entry per
    machine in step order: its steps and median seconds a step, the number that compares machines."""

    timed = [h["seconds"] for h in history if "seconds" in h]
    untimed = len(history) - len(timed)
    if timed:
        total = sum(timed) + untimed * float(np.median(timed))
    else:
        total = seconds
    out = {"train_seconds": round(total, 1), "steps_per_s": round(len(history) / max(total, 1e-9), 4),
           "trained_on": machine()}  # fmt: skip
    if timed:
        out["median_step_s"] = round(float(np.median(timed)), 3)  # unlike the total, blind to a paused process
    if timed and untimed:
        out["untimed_steps"] = untimed  # their time is the timed steps' median
    segments = [list(g) for _, g in groupby((h for h in history if "on" in h), key=lambda h: h["on"])]
    if len(segments) > 1:
        out["segments"] = [
            {"on": g[0]["on"], "steps": [g[0]["step"], g[-1]["step"]],
             "median_step_s": round(float(np.median([h["seconds"] for h in g])), 3)}
            for g in segments
        ]  # fmt: skip
    return out


def write_run_files(
    final: Path, args, base: str, history: list, seconds: float, world: int, counts: dict, kind: str,
    weights: tuple[str, ...], named: str | None = None,
) -> dict:  # fmt: skip
    """The run record (the arguments, the resolved base, counts, timing), the step history and the
    manifest (checksums: what the service's model fingerprint reads; the base it was trained on,
    ``named`` as the user named it: :func:`~samelang.core.models.loading.base_record`) in ``final``;
    the file names are the model folder's (:mod:`samelang.core.model_folder`)."""

    base_manifest = model_folder.read_manifest(base) or {}
    record = base_record(named, Path(base))
    training_args = {
        **args.saved(),
        "base_resolved": base_manifest.get("upstream", record["base"]),
        **counts,
        "world_size": world,
        **run_timing(history, seconds),
        "torch": torch.__version__,
    }
    (final / model_folder.TRAINING_ARGS).write_text(json.dumps(training_args, indent=2))
    (final / model_folder.HISTORY).write_text(json.dumps(history))
    adapter = model_folder.is_adapter(final)
    manifest = {
        "name": args.out.name,
        "kind": kind,
        **record,
        ("adapter_sha256" if adapter else "weights_sha256"): sha256_files(final, weights),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if getattr(args, "layers", None):
        manifest["base_layers"] = args.layers  # the loader keeps these first layers of the base
    model_folder.write_manifest(final, manifest)
    return training_args


def timing_line(training_args: dict) -> str:
    """The model card's words for :func:`run_timing`: time, steps/s and where, with the median seconds
    a step (each machine with its steps and its own median, when the run moved between machines)."""
    t = training_args
    rate = f", {t['steps_per_s']:.3f} steps/s" if t.get("steps_per_s") else ""
    if t.get("segments"):
        where = " on " + ", then ".join(
            f"{g['on']} (steps {g['steps'][0]}-{g['steps'][1]}, median {g['median_step_s']:.1f} s a step)"
            for g in t["segments"]
        )
    elif t.get("trained_on"):
        median = f" (median {t['median_step_s']:.1f} s a step)" if t.get("median_step_s") else ""
        where = f" on {t['trained_on']}{median}"
    else:
        where = ""
    est = (
        f" ({t['untimed_steps']} steps before timing was recorded counted at the median)"
        if t.get("untimed_steps")
        else ""
    )
    return f"{t['train_seconds']:.0f} s{rate}{where}{est}"


def with_lora(model, args, head_modules: list[str]):
    """``model`` with LoRA adapters on :func:`lora_targets` (``args``' rank, alpha, dropout) and those
    of the new ``head_modules`` it has trained in full and saved with the adapter (the cross-encoder
    trainers: a BERT classifier has a ``pooler``, an XLM-R one none)."""
    from peft import LoraConfig, get_peft_model  # deferred: keeps peft out of start-up

    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    cfg = LoraConfig(
        r=args.lora_r, lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
        target_modules=lora_targets(model), modules_to_save=[m for m in head_modules if m in names] or None,
        bias="none",
    )  # fmt: skip
    return get_peft_model(model, cfg)


def lora_targets(model) -> list[str] | str:
    """Every linear layer of the transformer: :data:`LORA_TARGETS` by name in a BERT-family model (the
    shipped adapters' own), peft's ``all-linear`` (all but the output layer) in any other."""
    kind = getattr(model.config, "model_type", "")
    return LORA_TARGETS if kind in model_folder.ONNX_MODEL_TYPES else "all-linear"


def no_dropout(base: str | Path) -> dict:
    """``from_pretrained`` overrides that turn the encoder's dropout off (on CPU it costs 3-4x in the
    forward pass: attention falls back from SDPA to the math kernel; LoRA brings its own): every float
    ``*dropout*`` field of the base's config, and no BERT pooler (unused by a bi-encoder)."""
    config = json.loads((Path(base) / model_folder.CONFIG).read_text())
    out = {k: 0.0 for k, v in config.items() if "dropout" in k and isinstance(v, float)}
    if config.get("model_type") in model_folder.ONNX_MODEL_TYPES:
        out["add_pooling_layer"] = False
    return out


def start_from(init: str | Path | None, named: str | None, args, home: Path) -> tuple[str, str | None]:
    """The base a run's model is made of and the name its record gives it: for ``--init`` a LoRA adapter,
    the adapter's own base (a later stage trains on over it; its manifest names it), else ``named``
    (:func:`resolve_base`). What every trainer's ``--init`` and ``--base`` mean, decided once."""
    if init and model_folder.is_adapter(init):
        return str(adapter_base(init, home)), (model_folder.read_manifest(init) or {}).get("base")
    return resolve_base(named, args), named


def resolve_base(named: str | None, args) -> str:
    """The base a trainer starts from: ``named`` (a folder or hub id, at ``--revision``), else the
    converted multilingual-e5-small."""
    if not named:
        return str(ensure_base_model(args.home))
    where = locate(named, "base model", "pass a model folder or a hub id in the cache", revision=args.revision)
    check_remote_code(where, args.trust_remote_code)
    return str(where)


def write_st_config(final: Path, base: str | Path, dim: int) -> None:
    """A complete sentence-transformers configuration in a trained bi-encoder folder: the base's own
    (pooling, normalisation, prompts), or for a plain transformers base the one sentence-transformers
    would give it (mean pooling, normalised, no prompts)."""
    base = Path(base)
    modules = base / model_folder.ST_MODULES
    if modules.exists():
        for entry in json.loads(modules.read_text()):
            if entry.get("path"):
                shutil.copytree(base / entry["path"], final / entry["path"], dirs_exist_ok=True)
        for name in (model_folder.ST_MODULES, "config_sentence_transformers.json", "sentence_bert_config.json"):
            if (base / name).exists():
                shutil.copy2(base / name, final / name)
        return
    st = "sentence_transformers.models"
    (final / model_folder.ST_MODULES).write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": f"{st}.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": f"{st}.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": f"{st}.Normalize"},
    ], indent=2))  # fmt: skip
    (final / "1_Pooling").mkdir(exist_ok=True)
    (final / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": dim, "pooling_mode_mean_tokens": True}, indent=2)
    )
    (final / "2_Normalize").mkdir(exist_ok=True)


def save_model(out: Path, model, tokenizer, base: str, named: str | None = None) -> tuple[Path, bool, tuple[str, ...]]:
    """Save ``model`` into a fresh ``out/model.tmp`` (moved over ``out`` by :func:`replace_contents`
    once its run files are written): the adapter with its config finished, or the full weights with
    the tokenizer. Returns (that folder, whether it is an adapter, the files its checksum covers)."""
    out.mkdir(parents=True, exist_ok=True)
    final = out / "model.tmp"
    shutil.rmtree(final, ignore_errors=True)
    final.mkdir()
    for cfg in getattr(model, "peft_config", {}).values():
        cfg.base_model_name_or_path = base  # a real path while saving; the card's name is written after
    model.save_pretrained(final)
    if model_folder.is_adapter(final):
        return final, True, finish_adapter_config(final, base, named)
    tokenizer.save_pretrained(final)
    return final, False, ("model.safetensors",)


def finish_adapter_config(final: Path, base: str | Path, named: str | None = None) -> tuple[str, ...]:
    """Name the base in a saved adapter's config as people know it (the path was machine-local) and
    write ``target_modules`` sorted (peft keeps a set: its order, hence the checksum, varied between
    runs). Returns the files the adapter checksum covers."""

    cfg = model_folder.read_adapter_config(final)
    record = base_record(named, Path(base))
    e5 = "intfloat/multilingual-e5-small (converted by `samelang models prepare`)"
    cfg["base_model_name_or_path"] = e5 if record["base"] == BASE_MODEL_NAME else record["base"]
    if isinstance(cfg.get("target_modules"), list):
        cfg["target_modules"] = sorted(cfg["target_modules"])
    model_folder.write_adapter_config(final, cfg)
    return (model_folder.ADAPTER_WEIGHTS, model_folder.ADAPTER_CONFIG)
