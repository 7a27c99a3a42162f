"""``samelang eval ...``: argument parsing only.

Each command's options are one declared class (:mod:`samelang.core.options` turns its fields into
flags and ``SAMELANG_*`` variables); the work is done by the evaluation objects of
:mod:`samelang.evaluation`, which own their scoring, caches and written sections.
``eval biencoder-ablation`` trains, so it joins this group from :mod:`samelang.cli.train`.
"""

from __future__ import annotations

import typer

from samelang.core import options
from samelang.core.paths import EVALUATION_DOC
from samelang.evaluation.answers import AnswerEvalOptions, run_answer_evaluation
from samelang.evaluation.bias_audit import BiasEvalOptions, run_bias_audit
from samelang.evaluation.biencoder import BiencoderEvalOptions, BiencoderEvaluation
from samelang.evaluation.fusion import FusionEvalOptions, FusionTuning
from samelang.evaluation.judge import run_ood_only, run_shapes
from samelang.evaluation.pipeline import PipelineEvalOptions, run_pipeline_evaluation
from samelang.evaluation.precision import PrecisionEvalOptions, PrecisionEvaluation
from samelang.evaluation.reranker import RerankerEvalOptions, RerankerEvaluation

eval_app = typer.Typer(help="Evaluate on the held-out XQuAD test articles.", no_args_is_help=True)


@eval_app.command("biencoder")
@options.command(BiencoderEvalOptions)
def eval_biencoder_cmd(opts: BiencoderEvalOptions) -> None:
    """Multi (Comp@10, Max@R, Max@R_norm), Mono-Same and Mono-Cross on the XQuAD test articles."""

    typer.echo(BiencoderEvaluation(opts).run().table)


@eval_app.command("reranker")
@options.command(RerankerEvalOptions)
@options.usage_errors
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
@options.usage_errors
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
@options.usage_errors
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
