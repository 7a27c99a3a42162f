"""Which precision and backend a model runs at on this machine: the CPU's features read at run time
(``/proc/cpuinfo``: AMX / AVX512_BF16 make bf16 native, a class of CPU keys the recorded choice), the
choice a model folder's inference record holds, and the pairs this host cannot run.

Apart from the runtime (:mod:`.engine`) so that the bench, the evaluations and ``/info`` can ask what
a machine is, and what a model would run at, without building an engine."""

from __future__ import annotations

import logging
import platform
from dataclasses import dataclass, replace
from pathlib import Path

from samelang.core.model_folder import onnx_unfit, recorded_precision

log = logging.getLogger("samelang")

# padded tokens per forward pass when ``--max-batch-tokens`` is unset, by device, and passes of one call
# in flight on ONNX Runtime (the ``--parallel-batches`` default); both documented in samelang.core.settings.
# CPU: small batches stay in cache and fill the parallel lanes. GPU: a pass costs about the same at 256
# padded tokens as at thousands (kernel launches, not arithmetic, bound it), so 256 left an H200 at a
# sixth of its speed: 189 vs 1,202 XQuAD paragraphs/s at 256 vs 32,768 (scripts/gpu_batch_tokens.py).
MAX_BATCH_TOKENS = {"cpu": 256, "gpu": 32768}
PARALLEL_BATCHES = 2
PRECISIONS = ("auto", "fp32", "bf16", "fp16", "int8")
BACKENDS = ("auto", "torch", "onnx")
# Recorded tolerances against fp32 (tests/core/runtime/test_engine.py checks them on multilingual
# texts): minimum cosine of embeddings, maximum absolute difference of sigmoid reranker scores.
EMBEDDING_MIN_COSINE = {"fp32": 0.9999, "bf16": 0.99, "fp16": 0.99, "int8": 0.99}
SCORE_MAX_ABS_DIFF = {"fp32": 1e-4, "bf16": 0.03, "fp16": 0.03, "int8": 0.2}  # int8: up to 0.155 seen on XQuAD


class EngineConfigError(ValueError):
    """A precision/backend combination this host cannot run (message says which flag to change)."""


@dataclass(frozen=True)
class EngineOptions:
    """How to run a model (each is a ``samelang serve`` flag with a ``SAMELANG_*`` twin)."""

    precision: str = "auto"
    backend: str = "auto"
    max_batch_tokens: int | None = None  # padded tokens per pass; None: MAX_BATCH_TOKENS for the device
    max_batch_size: int = 64
    threads: int | None = None
    parallel_batches: int = (
        PARALLEL_BATCHES  # passes of one call in flight (ONNX; documented in samelang.service.config)
    )
    trust_remote_code: bool = False  # run a checkpoint's own code (config.json's auto_map); else refuse it

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            raise EngineConfigError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.backend not in BACKENDS:
            raise EngineConfigError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if (self.max_batch_tokens is not None and self.max_batch_tokens < 16) or self.max_batch_size < 1:
            raise EngineConfigError("max_batch_tokens must be >= 16 and max_batch_size >= 1")
        if self.parallel_batches < 1:
            raise EngineConfigError("parallel_batches must be >= 1")


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


SPEED_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")


def cpu_model() -> str:
    """The ``lscpu`` model line (the CPU the speeds were measured on)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def cpu_summary() -> str:
    """The CPU and the SIMD features that decide speed numbers (read at run time), as every speed
    number here prints it: ``model [flags]``."""
    flags = cpu_flags()
    return f"{cpu_model()} [{' '.join(f for f in SPEED_FLAGS if f in flags) or 'no AVX2'}]"


def cpu_class(flags: set[str] | None = None) -> str:
    """The class of CPU a precision choice holds for, from the instruction sets that decide int8 and
    bf16 speed and int8 numerics: ``x86-amx`` (AMX int8/bf16 tiles), ``x86-avx512-vnni``,
    ``x86-avx-vnni``, ``x86-avx2`` (int8 through u8s8 pairs that can saturate), else the machine.
    Why classes and not one "cpu" entry: int8 is ~1.7x fp32 with AMX and ~1.2x on AVX2, and on AVX2 its
    kernels round differently, so a choice measured on one class does not hold on another."""

    f = cpu_flags() if flags is None else flags
    if {"amx_int8", "amx_tile"} <= f:
        return "x86-amx"
    if "avx512_vnni" in f:
        return "x86-avx512-vnni"
    if "avx_vnni" in f:
        return "x86-avx-vnni"
    if "avx2" in f:
        return "x86-avx2"
    return platform.machine() or "unknown"


def precision_device(device: str) -> str:
    """The key of ``device``'s choice in a model's inference record: ``cuda``, or ``cpu:<class>``."""
    return "cuda" if device.startswith("cuda") else f"cpu:{cpu_class()}"


def cpu_has_bf16() -> bool:
    """Native bf16 matmuls on this CPU (AVX512_BF16 or AMX); elsewhere torch emulates them, slowly."""
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})


def resolve(options: EngineOptions, device: str, model_dir: Path | None = None) -> EngineOptions:
    """Concrete precision, backend and batch size for ``device``; raises EngineConfigError for impossible pairs."""
    precision = options.precision
    on_gpu = device.startswith("cuda")
    if precision == "auto":
        # no choice recorded for this GPU / this class of CPU: fp32 on CPU (the reference, safe on every
        # class), half precision on GPU (tensor cores)
        precision = recorded_precision(model_dir, precision_device(device)) or (_gpu_half() if on_gpu else "fp32")
    backend = options.backend
    unfit = onnx_unfit(model_dir)
    if backend == "auto":
        onnx = not on_gpu and precision in ("fp32", "int8") and unfit is None and _has_onnxruntime()
        backend = "onnx" if onnx else "torch"
    if unfit is not None and (backend == "onnx" or precision == "int8"):
        raise EngineConfigError(f"{Path(model_dir).name} does not export to ONNX here ({unfit}): it runs on --backend "
                                "torch, at fp32, bf16 or fp16, not int8")  # fmt: skip
    if precision == "int8" and (backend != "onnx" or on_gpu):
        raise EngineConfigError("precision int8 runs on the CPU with --backend onnx (needs onnxruntime)")
    if backend == "onnx" and on_gpu:
        raise EngineConfigError("--backend onnx is CPU only here; use --backend torch on GPU")
    if backend == "onnx" and precision not in ("fp32", "int8"):
        raise EngineConfigError(f"--backend onnx runs fp32 or int8, not {precision}")
    if precision == "fp16" and not on_gpu:
        raise EngineConfigError("precision fp16 needs a GPU (--device cuda); on CPU use fp32, int8 or bf16")
    if precision == "bf16" and not on_gpu and not cpu_has_bf16():
        log.warning("this CPU has no native bf16 (AVX512_BF16/AMX): bf16 is emulated and slow")
    if backend == "onnx" and not _has_onnxruntime():
        raise EngineConfigError("--backend onnx needs onnxruntime: pip install onnxruntime")
    tokens = options.max_batch_tokens or MAX_BATCH_TOKENS["gpu" if on_gpu else "cpu"]
    return replace(options, precision=precision, backend=backend, max_batch_tokens=tokens)


def _gpu_half() -> str:
    import torch  # deferred: keeps torch out of start-up

    return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp16"


def _has_onnxruntime() -> bool:
    try:
        import onnxruntime  # noqa: F401  # deferred: keeps onnxruntime out of start-up
    except ImportError:
        return False
    return True
