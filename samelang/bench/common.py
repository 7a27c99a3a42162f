"""What every bench section shares: its configuration, the machine line printed with each speed
number (CPU model, cores, clock, ISA, bf16, VNNI: read at run time, CPUs differ between machines),
medians of alternating runs, Markdown tables and the server command."""

from __future__ import annotations

import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from samelang.core.runtime.precision import cpu_flags, cpu_has_bf16


@dataclass
class BenchConfig:
    quick: bool = False
    tiny: bool = False  # smoke-test sizes: every section runs end to end in seconds; its numbers mean nothing
    sections: tuple[str, ...] = ("build", "scale", "embed", "rerank", "http", "memory", "peers", "stream")
    repeats: int = 5
    home: Path | None = None
    out: Path = Path("runs/bench")
    # fp32 per core; None: two 256-bit FMA pipes (32: AVX2 Zen 2-4, Skylake client), or two 512-bit ones
    # where the CPU has AVX-512 (64: Xeon Gold/Platinum class; a one-FMA AVX-512 part has 32 and is overstated)
    flops_per_cycle: int | None = None
    soak_seconds: float = 600.0
    doc: bool = False  # also write the tables into docs/performance.md, under the command's own heading
    log: list[str] = field(default_factory=list)


def cpu_line() -> str:
    """The ``lscpu`` model line, core count and clock, as measured here."""
    model, mhz = "unknown CPU", None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("cpu MHz") and mhz is None:
                mhz = float(line.split(":", 1)[1])
    except OSError:
        pass
    isa = "AVX-512" if "avx512f" in cpu_flags() else ("AVX2" if "avx2" in cpu_flags() else "no AVX2")
    bf16 = "native bf16" if cpu_has_bf16() else "no native bf16"
    vnni = "VNNI" if cpu_flags() & {"avx512_vnni", "avx_vnni"} else "no VNNI"
    return f"{model}, {os.cpu_count()} cores @ {mhz or 0:.0f} MHz, {isa}, {bf16}, {vnni}"


def fp32_peak_gflops(cfg: BenchConfig) -> float:
    mhz = 0.0
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("cpu MHz"):
            mhz = float(line.split(":", 1)[1])
            break
    per_cycle = cfg.flops_per_cycle or (64 if "avx512f" in cpu_flags() else 32)
    return (os.cpu_count() or 1) * mhz / 1000 * per_cycle


def encoder_flops_per_token(model, seq_len: float) -> float:
    """2 x (weights of every Linear) + attention's two matmuls (4 x seq x hidden per layer)."""
    import torch  # deferred: keeps torch out of start-up

    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    cfg = model.config
    return 2.0 * linear + 4.0 * seq_len * cfg.hidden_size * cfg.num_hidden_layers


def median_alternating(fns: dict, repeats: int) -> dict[str, float]:
    for fn in fns.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def precisions(cfg: BenchConfig) -> list[str]:
    """fp32 and the alternatives; ``--quick`` keeps fp32 only (each int8 graph is a one-off ~1 min export)."""
    return ["fp32"] if cfg.quick else ["fp32", "int8"] + (["bf16"] if cpu_has_bf16() else [])


TINY_LANGS = "en"  # the demo index served at tiny sizes (240 paragraphs); else the server's default


def serve_command(cfg: BenchConfig, port: int) -> list[str]:
    return [sys.executable, "-m", "samelang", "serve", "--port", str(port), "--generator", "none",
            *(["--langs", TINY_LANGS] if cfg.tiny else [])]  # fmt: skip


def torch_threads() -> int:
    import torch  # deferred: keeps torch out of start-up

    return torch.get_num_threads()
