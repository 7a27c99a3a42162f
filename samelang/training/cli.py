"""``samelang train ...`` and ``samelang eval ...``: argument parsing only.

Each command's options are one declared class (:mod:`samelang.core.options` turns its fields into
flags and ``SAMELANG_*`` variables); the work is done by the trainers and by the evaluation
objects of :mod:`samelang.training.evaluation`, which own their scoring, caches and written sections.
"""

from __future__ import annotations

import functools
import json

import typer

from samelang.core import options
from samelang.core.paths import DATA_DOC, EVALUATION_DOC
from samelang.corpora.provenance import PROVENANCE, render_provenance
from samelang.indexes.atomic import atomic_write_text
from samelang.training.biencoder import BiencoderArgs, train_biencoder
from samelang.training.contamination import DataFilterOptions, run_filter
from samelang.training.corpus import DATA_DOC_HEAD, DataImportOptions, DataInfoOptions, import_sources, info_report
from samelang.training.evaluation.answers import AnswerEvalOptions, run_answer_evaluation
from samelang.training.evaluation.bias_audit import BiasEvalOptions, run_bias_audit
from samelang.training.evaluation.biencoder import (
    AblationOptions,
    BiencoderAblation,
    BiencoderEvalOptions,
    BiencoderEvaluation,
)
from samelang.training.evaluation.fusion import FusionEvalOptions, FusionTuning
from samelang.training.evaluation.pipeline import PipelineEvalOptions, run_pipeline_evaluation
from samelang.training.evaluation.precision import PrecisionEvalOptions, PrecisionEvaluation
from samelang.training.evaluation.reranker import RerankerEvalOptions, RerankerEvaluation
from samelang.training.evaluation.shapes_run import run_ood_only, run_shapes
from samelang.training.reader import ReaderArgs, train_reader
from samelang.training.reranker import RerankerArgs, train_reranker

train_app = typer.Typer(help="Train the models (CPU for small runs, GPUs via torchrun).", no_args_is_help=True)
eval_app = typer.Typer(help="Evaluate on the held-out XQuAD test articles.", no_args_is_help=True)
data_app = typer.Typer(help="The training corpora: import, keep XQuAD out, describe.", no_args_is_help=True)


def _usage_errors(fn):
    """Errors of the user's making (a folder that holds the wrong thing, no model to evaluate)
    become usage errors, not tracebacks."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (ValueError, FileNotFoundError) as e:
            raise typer.BadParameter(str(e)) from e

    return run


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


@eval_app.command("biencoder")
@options.command(BiencoderEvalOptions)
def eval_biencoder_cmd(opts: BiencoderEvalOptions) -> None:
    """Multi (Comp@10, Max@R, Max@R_norm), Mono-Same and Mono-Cross on the XQuAD test articles."""

    typer.echo(BiencoderEvaluation(opts).run().table)


@eval_app.command("biencoder-ablation")
@options.command(AblationOptions)
@_usage_errors
def eval_ablation_cmd(opts: AblationOptions) -> None:
    """The seed's ablation from one command: train each loss setting with the same flags
    (``--train-args``), evaluate all; a finished setting is evaluated, not retrained."""

    typer.echo(BiencoderAblation(opts, log=typer.echo).run().table)


@eval_app.command("reranker")
@options.command(RerankerEvalOptions)
@_usage_errors
def eval_reranker_cmd(opts: RerankerEvalOptions) -> None:
    """Oracle language coherence, reranking of retrieved top-20, Mono-Same: XQuAD test articles.

    With several ``--model`` folders (stage 1, stage 2, the ``--objective`` ablations) it also
    prints the ablation table: each model's training settings beside its scores."""

    typer.echo(RerankerEvaluation(opts).run().table)


@eval_app.command("precision")
@options.command(PrecisionEvalOptions)
def eval_precision_cmd(opts: PrecisionEvalOptions) -> None:
    """fp32 vs int8 (vs bf16): eval-table quality and speed side by side; picks each model's default
    precision: the fastest within ``--tolerance`` points of fp32 on every metric."""

    typer.echo(PrecisionEvaluation(opts, log=typer.echo).run().table)


@eval_app.command("fusion")
@options.command(FusionEvalOptions)
@_usage_errors
def eval_fusion_cmd(opts: FusionEvalOptions) -> None:
    """Tune the hybrid retriever's BM25 weight on train-article questions (never the test articles);
    ``--card`` writes it to models/fusion.json for ``eval pipeline``'s hybrid rows."""

    typer.echo(FusionTuning(opts, log=typer.echo).run().table)


@eval_app.command("bias")
@options.command(BiasEvalOptions)
def eval_bias_cmd(opts: BiasEvalOptions) -> None:
    """The label-free language-bias audit (/diagnose's code) on the partial-translation and parallel
    shapes (test articles), for the served default beside the rows it replaced."""
    typer.echo(run_bias_audit(opts, doc=EVALUATION_DOC, log=typer.echo))


@eval_app.command("answer")
@options.command(AnswerEvalOptions)
@_usage_errors
def eval_answer_cmd(opts: AnswerEvalOptions) -> None:
    """What /answer says, end to end over HTTP: the extractive reader and the generator, answer F1/EM per
    language on the parallel and partial-translation shapes (test articles), beside the reader alone on the
    gold paragraph."""
    typer.echo(run_answer_evaluation(opts, EVALUATION_DOC, log=typer.echo).table)


@eval_app.command("pipeline")
@options.command(PipelineEvalOptions)
def eval_pipeline_cmd(opts: PipelineEvalOptions) -> None:
    """What the reader gets, end to end: every retriever x reranker x candidate strategy through the
    served pipeline on the XQuAD test articles (12-language pool, bilingual pools, Mono-Same)."""
    if opts.ood_only:
        typer.echo(run_ood_only(opts, EVALUATION_DOC, log=typer.echo).table)
        return
    if opts.shapes or opts.tiny:
        typer.echo(run_shapes(opts, EVALUATION_DOC, log=typer.echo).table)
        return

    typer.echo(run_pipeline_evaluation(opts, EVALUATION_DOC, log=typer.echo).table)


@data_app.command("import")
@options.command(DataImportOptions)
@_usage_errors
def data_import_cmd(opts: DataImportOptions) -> None:
    """Copy the declared corpus files from snapshots of their repositories into the corpus store,
    each checked against its sha256 (PROVENANCE.md lists them)."""
    store = opts.store()
    for name, what in import_sources(opts.snapshots, store, force=opts.force).items():
        typer.echo(f"{name}: {what}")
    typer.echo(f"store: {store.root}")


@data_app.command("filter")
@options.command(DataFilterOptions)
@_usage_errors
def data_filter_cmd(opts: DataFilterOptions) -> None:
    """Drop every corpus passage the aligned model finds as close to an XQuAD paragraph as XQuAD's own
    translations are to each other (the threshold is calibrated on XQuAD); writes contamination.json."""
    result = run_filter(opts)
    typer.echo(json.dumps(result["calibration"], indent=1))
    embedded = f"{result['texts']} texts, their nearest XQuAD paragraph in {result['seconds']} s; cached"
    typer.echo(f"dropped {len(result['dropped'])} of {result['passages']} passages ({embedded})")


@data_app.command("info")
@options.command(DataInfoOptions)
@_usage_errors
def data_info_cmd(opts: DataInfoOptions) -> None:
    """Examples per source x language x view, what the filters dropped, licences and sizes on disk."""
    report = info_report(opts)
    typer.echo(report)
    if opts.write:
        atomic_write_text(PROVENANCE, render_provenance())
        atomic_write_text(DATA_DOC, DATA_DOC_HEAD + report + "\n")
        typer.echo(f"wrote {PROVENANCE} and {DATA_DOC}")
