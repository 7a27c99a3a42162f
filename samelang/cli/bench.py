"""``samelang bench``: the speed and scale tables of ``docs/performance.md`` (never part of the test run)."""

from __future__ import annotations

from pathlib import Path

import typer

from samelang.bench.common import BenchConfig
from samelang.bench.run import run
from samelang.core.settings import settings

SECTIONS = ("build", "scale", "embed", "rerank", "http", "memory", "peers", "stream")
ON_REQUEST = ("soak", "scale-10m", "milvus", "train", "burst", "mixed")  # run only when named


def bench(
    quick: bool = typer.Option(False, "--quick", help="Smaller sizes and fewer repeats: under 10 minutes on 2 cores."),
    tiny: bool = typer.Option(
        False, "--tiny", help="Smoke-test sizes (a few inputs per section; implies --quick): checks that it runs."
    ),
    section: list[str] = typer.Option(None, help=f"Run only these sections ({', '.join(SECTIONS)}); repeatable."),
    repeats: int = typer.Option(None, help="Timed repetitions per measurement (default 5, --quick 3)."),
    soak_seconds: float = typer.Option(600, help="Seconds of --section soak, and of --section mixed per store."),
    out: Path = typer.Option(Path("runs/bench"), envvar="SAMELANG_BENCH_OUT", help="bench.md and the server log."),
    flops_per_cycle: int = typer.Option(
        None, help="fp32 FLOP per cycle per core, for the %-of-peak column (default: 64 with AVX-512, else 32)."
    ),
    home: Path = typer.Option(None, help="[env: SAMELANG_HOME]"),
    doc: bool = typer.Option(
        False,
        "--doc",
        envvar="SAMELANG_BENCH_DOC",
        help="Also write the tables into docs/performance.md, in the section headed by this command.",
    ),  # fmt: skip
) -> None:
    """Embedding and reranking vs sentence-transformers, HTTP load at concurrency 1/8/32, index build
    time, and Flat/HNSW/IVF at 10k-1M vectors; prints Markdown tables (also in OUT/bench.md)."""

    bad = [s for s in section or [] if s not in SECTIONS + ON_REQUEST]
    if bad:
        choices = SECTIONS + ON_REQUEST
        raise typer.BadParameter(f"unknown section(s) {bad}; choose from {choices}", param_hint="--section")
    cfg = BenchConfig(
        quick=quick or tiny,
        tiny=tiny,
        sections=tuple(s for s in SECTIONS + ON_REQUEST if (s in section if section else s in SECTIONS)),
        soak_seconds=soak_seconds,
        repeats=repeats or (1 if tiny else 3 if quick else 5),
        home=settings(home=home).home,
        out=out,
        flops_per_cycle=flops_per_cycle,
        doc=doc and not tiny,
    )
    typer.echo(run(cfg))
