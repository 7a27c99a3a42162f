"""``samelang train ...``, ``samelang data ...`` and ``samelang eval biencoder-ablation`` (which
trains): argument parsing only.

Each command's options are one declared class (:mod:`samelang.core.options` turns its fields into
flags and ``SAMELANG_*`` variables); the work is done by the trainers.
"""

from __future__ import annotations

import json

import typer

from samelang.cli.evaluate import eval_app
from samelang.core import options
from samelang.core.paths import DATA_DOC
from samelang.corpora.fetch import fetch_sources
from samelang.corpora.provenance import PROVENANCE, render_provenance
from samelang.primitives.atomic import atomic_write_text
from samelang.training.ablation import AblationOptions, BiencoderAblation
from samelang.training.adapt import Adaptation, AdaptOptions
from samelang.training.adapt_eval import AdaptEvalOptions, run_adapt_eval
from samelang.training.biencoder import BiencoderArgs, train_biencoder
from samelang.training.contamination import DataFilterOptions, run_filter
from samelang.training.corpus import (
    DATA_DOC_HEAD,
    DataFetchOptions,
    DataImportOptions,
    DataInfoOptions,
    import_sources,
    info_report,
)
from samelang.training.lamar import RerankerArgs, train_reranker
from samelang.training.reader import ReaderArgs, train_reader

train_app = typer.Typer(help="Train the models (CPU for small runs, GPUs via torchrun).", no_args_is_help=True)
data_app = typer.Typer(help="The training corpora: import, keep XQuAD out, describe.", no_args_is_help=True)


@train_app.command("biencoder")
@options.command(BiencoderArgs)
def train_biencoder_cmd(args: BiencoderArgs) -> None:
    """Fine-tune the bi-encoder with L_JSD + L_NCE on XQuAD train-article triplets."""

    typer.echo(f"model: {train_biencoder(args)}")


@train_app.command("reranker")
@options.command(RerankerArgs)
def train_reranker_cmd(args: RerankerArgs) -> None:
    """Train the LAMAR cross-encoder: stage 1 (distillation) or stage 2 (ADR-MSE + language coherence)."""

    typer.echo(f"model: {train_reranker(args)}")


@train_app.command("reader")
@options.command(ReaderArgs)
def train_reader_cmd(args: ReaderArgs) -> None:
    """Train the extractive reader (a span head for /answer) on XQuAD train articles and the corpus's QA spans."""

    typer.echo(f"model: {train_reader(args)}")


@data_app.command("fetch")
@options.command(DataFetchOptions)
@options.usage_errors
def data_fetch_cmd(opts: DataFetchOptions) -> None:
    """Download every declared corpus file from its repository at the pinned commit (pooch: cached, retried,
    each checked against its sha256) into the corpus store, one complete folder per source."""
    store = opts.store()
    report = fetch_sources(opts.chosen(), store, opts.base_url, opts.home / "cache" / "fetch", opts.force,
                           log=typer.echo)  # fmt: skip
    for name, what in report.items():
        typer.echo(f"{name}: {what}")
    typer.echo(f"store: {store.root}")
    if any(what.startswith("not fetched") for what in report.values()):
        raise typer.Exit(1)


@data_app.command("import")
@options.command(DataImportOptions)
@options.usage_errors
def data_import_cmd(opts: DataImportOptions) -> None:
    """Copy the declared corpus files from snapshots of their repositories into the corpus store,
    each checked against its sha256 (PROVENANCE.md lists them)."""
    store = opts.store()
    for name, what in import_sources(opts.snapshots, store, force=opts.force).items():
        typer.echo(f"{name}: {what}")
    typer.echo(f"store: {store.root}")


@data_app.command("filter")
@options.command(DataFilterOptions)
@options.usage_errors
def data_filter_cmd(opts: DataFilterOptions) -> None:
    """Drop every corpus passage the aligned model finds as close to an XQuAD paragraph as XQuAD's own
    translations are to each other (the threshold is calibrated on XQuAD); writes contamination.json."""
    result = run_filter(opts)
    typer.echo(json.dumps(result["calibration"], indent=1))
    embedded = f"{result['texts']} texts, their nearest XQuAD paragraph in {result['seconds']} s; cached"
    typer.echo(f"dropped {len(result['dropped'])} of {result['passages']} passages ({embedded})")


@data_app.command("info")
@options.command(DataInfoOptions)
@options.usage_errors
def data_info_cmd(opts: DataInfoOptions) -> None:
    """Examples per source x language x view, what the filters dropped, licences and sizes on disk."""
    report = info_report(opts)
    typer.echo(report)
    if opts.write:
        atomic_write_text(PROVENANCE, render_provenance())
        atomic_write_text(DATA_DOC, DATA_DOC_HEAD + report + "\n")
        typer.echo(f"wrote {PROVENANCE} and {DATA_DOC}")


@eval_app.command("biencoder-ablation")
@options.command(AblationOptions)
@options.usage_errors
def eval_ablation_cmd(opts: AblationOptions) -> None:
    """The seed's ablation from one command: train each loss setting with the same flags
    (``--train-args``), evaluate all; a finished setting is evaluated, not retrained."""

    typer.echo(BiencoderAblation(opts, log=typer.echo).run().table)


@options.command(AdaptOptions)
@options.usage_errors
def adapt_cmd(opts: AdaptOptions) -> None:
    """Fit the served bi-encoder to an index's own documents, with no labels (translations, inverse cloze
    queries, mined negatives); serve it (a new index generation) only if it wins on a held-out slice and
    loses nothing on the XQuAD dev shapes. Re-run the same command to resume."""
    report = Adaptation(opts, log=typer.echo).run()
    typer.echo(json.dumps({k: report[k] for k in ("dev", "guard", "verdict", "seconds")}, indent=1))
    typer.echo(f"card: {opts.output() / 'README.md'}")


@eval_app.command("adapt")
@options.command(AdaptEvalOptions)
@options.usage_errors
def eval_adapt_cmd(opts: AdaptEvalOptions) -> None:
    """The judge's adapt row: `samelang adapt` over the out-of-domain shape's passages alone (TyDi QA, held out
    of every training run), then its questions asked of the adapted retriever, beside the base model's dense
    row and the served default; the XQuAD dev shapes before and after."""

    typer.echo(run_adapt_eval(opts, log=typer.echo).table)
