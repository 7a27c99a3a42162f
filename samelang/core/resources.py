"""Resident memory of this process, for ``/info`` and the benchmark.

Why per component, and how: a server's memory is what decides the machine it fits on, and the
question a user asks is which part holds it. Each component (encoder, index, reranker, generator,
language identifier) is loaded one after the other, so the growth of the process's resident set
(RSS) across its load is what it costs. That is the load-time cost: memory-mapped weights (ONNX
external data, FAISS on disk) add pages as requests touch them, so ``/info`` also reports the
process's RSS now and its peak.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from contextlib import contextmanager
from pathlib import Path

_PAGE = None


def rss_mb() -> float | None:
    """The process's resident set now, MB (Linux ``/proc/self/statm``; None elsewhere)."""
    global _PAGE
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    if _PAGE is None:
        _PAGE = os.sysconf("SC_PAGE_SIZE")
    return round(pages * _PAGE / 2**20, 1)


def peak_rss_mb() -> float:
    """The process's peak resident set since it started, MB: Linux's ``VmHWM`` (``/proc/self/status``),
    else ``getrusage`` (KB on Linux, bytes on macOS). Why not ``getrusage`` on Linux: its ``ru_maxrss``
    survives ``exec``, so a server started by a big process (the bench, after loading models) reports
    its parent's size at fork as its own peak; ``VmHWM`` belongs to the new program's memory only."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 2**10, 1)
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (2**20 if sys.platform == "darwin" else 2**10), 1)


class LoadLedger:
    """Load-time RSS growth and seconds per component, in load order."""

    def __init__(self):
        self.rss_mb: dict[str, float | None] = {}
        self.seconds: dict[str, float] = {}

    @contextmanager
    def measure(self, name: str):
        before, t0 = rss_mb(), time.perf_counter()
        try:
            yield
        finally:
            after = rss_mb()
            self.rss_mb[name] = None if before is None or after is None else round(after - before, 1)
            self.seconds[name] = round(time.perf_counter() - t0, 2)

    def report(self) -> dict:
        return {"load_rss_mb": dict(self.rss_mb), "load_seconds": dict(self.seconds)}


def memory_now() -> dict:
    """What ``/info`` adds at request time: the process's RSS now, its peak, and whether torch was
    imported (a server answering from ONNX without the embedded generator never imports it)."""
    return {"process_rss_mb": rss_mb(), "process_peak_rss_mb": peak_rss_mb(), "torch_imported": "torch" in sys.modules}
