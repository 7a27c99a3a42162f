"""The seed's bi-encoder ablation from one command (``samelang eval biencoder-ablation``): train each
loss setting with the same flags, then judge all with :class:`~samelang.evaluation.biencoder.BiencoderEvaluation`.
It trains, so it lives with the trainers, above the judge."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from pydantic import Field

from samelang.core.model_folder import read_history, read_training_args
from samelang.core.options import StrList, parse_options
from samelang.evaluation.biencoder import BiencoderEvalOptions, BiencoderEvaluation, markdown, markdown_ablation
from samelang.evaluation.common import EvalOptions, Report
from samelang.primitives.atomic import atomic_write_text
from samelang.training.biencoder import BiencoderArgs, train_biencoder

ABLATION_LOSSES = ("jsd+nce", "nce", "jsd", "nce-psg")


class AblationOptions(EvalOptions):
    """Options of ``samelang eval biencoder-ablation``."""

    runs: Path = Field(Path("runs/ablation"), description="One sub-folder per loss setting.")
    losses: StrList = Field(list(ABLATION_LOSSES), description="Loss settings to train and compare.")
    train_args: str = Field(
        "", description="Flags for `samelang train biencoder`, the same for every setting (e.g. '--per-lang 256')."
    )


class BiencoderAblation:
    """The seed's ablation from one command: train each loss setting with the same flags, then
    evaluate all; a setting whose folder already holds a finished model is evaluated, not retrained."""

    def __init__(self, options: AblationOptions, log=print):
        self.options, self.log = options, log

    def train_missing(self) -> dict[str, dict]:

        info = {}
        for loss in self.options.losses:
            folder = self.options.runs / loss
            if read_training_args(folder) is None:
                self.log(f"training {loss} -> {folder}")
                argv = ["--out", str(folder), *shlex.split(self.options.train_args), "--loss", loss]
                train_biencoder(parse_options(BiencoderArgs, argv), log=self.log)
            targs = read_training_args(folder)
            if targs["loss"] != loss:
                raise ValueError(f"{folder} holds a model trained with --loss {targs['loss']}")
            info[loss] = {**targs, "steps": len(read_history(folder) or [])}
        return info

    def run(self) -> Report:
        info = self.train_missing()
        budgets = {(i["batch_size"], i["steps"], i["max_length"], i["lr"], i["per_lang"]) for i in info.values()}
        evaluation = BiencoderEvaluation(BiencoderEvalOptions(home=self.options.home, base=True))
        names = list(self.options.losses)
        results = evaluation.evaluate([self.options.runs / x for x in names], names)
        table = markdown_ablation(results, info)
        if len(budgets) > 1:
            table += "\n\nWARNING: the runs do not share one budget (batch, steps, max length, lr, per-lang differ)."
        runs = self.options.runs
        atomic_write_text(runs / "ablation.json", json.dumps({"runs": info, "results": results}, indent=2))
        atomic_write_text(runs / "ablation.md", table + "\n\n" + markdown(results) + "\n")
        return Report(table, {"runs": info, "results": results})
