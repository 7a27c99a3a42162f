"""Which precision to serve: quality against fp32 on the eval tables, and speed, side by side.

The rule: the default precision of a model on a class of CPU (:func:`cpu_class`) is
the fastest one whose loss against fp32 is at most ``tolerance`` points on every metric of its eval
table, measured on a machine of that class: Max@R_norm average and Mono-Same nDCG@10 for the
bi-encoder; oracle nDCG@1 and Mono-Same nDCG@10 for the reranker (the seed-002 slice of
``max_questions`` questions per language); answer F1 and EM for the extractive reader (the dev
articles' questions, each read as ``/answer`` reads: its gold paragraph and another of its article).
A choice, so the questions are the TRAIN articles' (the test articles judge the served pipeline,
they never select); the reader's are the train articles no model here trains on. The choice and the table go into the
model folder's inference record under ``cpu:<class>`` (read by ``precision=auto``;
:mod:`samelang.core.model_folder`) and its card; the base model's record ships in
``models/multilingual-e5-small/`` since its folder is converted on each machine.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from pydantic import Field

from samelang.core.catalogue import default_cross_encoder, default_reader, default_weights
from samelang.core.metrics.answers import answer_f1, exact_match
from samelang.core.model_folder import SHIPPED_RECORDS, record_precision, write_card_section
from samelang.core.models.base_model import BASE_MODEL_NAME
from samelang.core.models.cross_encoder import CrossEncoderReranker
from samelang.core.models.encoder import Encoder
from samelang.core.models.reader import ExtractiveReader
from samelang.core.options import StrList
from samelang.core.runtime.precision import EngineOptions, cpu_has_bf16, cpu_model, cpu_summary, precision_device
from samelang.core.settings import settings
from samelang.corpora import XQUAD_LANGS, dev_articles, dev_reading, load_xquad
from samelang.evaluation import reranker as ev
from samelang.evaluation.biencoder import embed_xquad, evaluate
from samelang.evaluation.common import EvalOptions, Report

BIENCODER_METRICS = ("max_r_norm", "mono_same_ndcg10")
RERANKER_METRICS = ("oracle_ndcg_at_1", "mono_same_ndcg10")
READER_METRICS = ("f1", "em")
READER_SPEED_QUESTIONS = 20  # English dev questions a read is timed on (median)
SPLIT = "train"  # what choices are made on


def median_time(fn, repeats: int) -> float:
    fn()  # warm-up: first-call allocations, ONNX Runtime's kernel choice
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def speed_texts(n: int = 64) -> list[str]:
    """The first ``n`` English test-article paragraphs (the bench's texts)."""
    return [d.text for d in load_xquad(["en"], split="test").documents()[:n]]


def biencoder_row(encoder, emb_eval: dict, repeats: int = 3) -> dict:
    texts = speed_texts()
    sec = median_time(lambda: encoder.encode_passages(texts), repeats)
    queries = [q.text for q in load_xquad(["en"], split="test").questions[:20]]
    encoder.encode_queries(queries[:1])  # warm-up once, not before every query
    one = statistics.median(_seconds(lambda q=q: encoder.encode_queries([q])) for q in queries)
    return {
        "precision": encoder.precision,
        "backend": encoder.engine.backend_name,
        "max_r_norm": emb_eval["multi_average"]["max_r_norm"],
        "mono_same_ndcg10": emb_eval["mono_same_ndcg10_avg"],
        "passages_per_s": len(texts) / sec,
        "query_ms": 1000 * one,  # what /search waits for
    }


def reranker_row(reranker, result: dict, repeats: int = 3) -> dict:
    texts = speed_texts(20)
    query = load_xquad(["en"], split="test").questions[0].text
    sec = median_time(lambda: reranker.score(query, texts), repeats)
    return {
        "precision": reranker.precision,
        "backend": reranker.engine.backend_name,
        "oracle_ndcg_at_1": result["oracle"]["ndcg_at_1"],
        "mono_same_ndcg10": result["mono_same"]["ndcg_at_10"],
        "rerank20_s": sec,
        "pairs_per_s": len(texts) / sec,
    }


def reader_questions(per_lang: int) -> list[tuple[str, str, list[str], list[str]]]:
    """``(question, language, gold answers, passages)`` of the dev articles' first ``per_lang`` questions
    per language (the train articles held out of every training run: see ``dev_articles``), each with
    the two passages ``/answer`` reads: its gold paragraph, then another of its article that holds none
    of its answers (the retriever ranks the gold first mostly; the reader must still pick). The very
    pairs the reader's trainer calibrates on (:func:`samelang.corpora.dev_reading`), so that the fp32
    row repeats the trainer's dev F1 at the same ``per_lang``."""
    return [
        (q.text, q.lang, [a.text for a in q.answers], [gold, *others[:1]])
        for q, gold, others in dev_reading(XQUAD_LANGS, dev_articles(), per_lang, distractors=2)
    ]


def reader_row(reader: ExtractiveReader, questions: list, repeats: int = 3) -> dict:
    """F1 and EM (%) of the reader's answers at its calibrated threshold (what ``/answer`` returns),
    and the speed of one read of a question's passages (median over English questions)."""
    answers = [reader.read(q, passages) for q, _, _, passages in questions]
    f1 = [answer_f1(a.text if a else None, g, lang) for a, (_, lang, g, _) in zip(answers, questions)]
    em = [exact_match(a.text if a else None, g, lang) for a, (_, lang, g, _) in zip(answers, questions)]
    timed = [(q, passages) for q, lang, _, passages in questions if lang == "en"][:READER_SPEED_QUESTIONS]
    one = statistics.median(median_time(lambda q=q, p=p: reader.spans(q, p), repeats) for q, p in timed)
    described = reader.describe()
    return {
        "precision": described["precision"],
        "backend": described["backend"],
        "f1": float(statistics.fmean(f1)),
        "em": float(statistics.fmean(em)),
        "reads_per_s": 1.0 / one,
        "read_ms": 1000 * one,  # what /answer waits for after the search
    }


def choose(rows: list[dict], metrics: tuple[str, ...], speed_key: str, tolerance: float = 0.3, on_gpu=False) -> dict:
    """Mark each row's largest loss against fp32, whether it is within ``tolerance`` and whether it
    may be served; return the fastest row that is both (fp32 itself always is). On a CPU only the
    ONNX rows may: a torch-backed precision (bf16) would put torch and a second copy of the weights
    into the server (a server holds one copy of each model), and on one query it is slower than ONNX."""
    ref = next(r for r in rows if r["precision"] == "fp32")
    for r in rows:
        r["max_loss_vs_fp32"] = max(float(ref[m] - r[m]) for m in metrics)
        r["within_tolerance"] = r["max_loss_vs_fp32"] <= tolerance
        r["servable"] = on_gpu or r["backend"] == "onnx"
        r["speedup_vs_fp32"] = r[speed_key] / ref[speed_key]
    return max((r for r in rows if r["within_tolerance"] and r["servable"]), key=lambda r: r[speed_key])


def markdown(rows: list[dict], metrics: tuple[str, ...], speed_key: str, chosen: str) -> str:
    names = {
        "max_r_norm": "Max@R_norm avg",
        "mono_same_ndcg10": "Mono-Same nDCG@10",
        "oracle_ndcg_at_1": "oracle nDCG@1",
        "passages_per_s": "passages/s",
        "pairs_per_s": "pairs/s",
        "f1": "F1 (dev)",
        "em": "EM (dev)",
        "reads_per_s": "reads/s",
    }
    per_query = all("query_ms" in r for r in rows)
    head = ["precision", "backend", *[names[m] for m in metrics], "max loss vs fp32", names[speed_key], "x fp32"]
    head += ["1 query ms"] if per_query else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        p = f"**{r['precision']}** (default)" if r["precision"] == chosen else r["precision"]
        p += "" if r.get("servable", True) else " (not served on CPU: torch)"
        cells = [p, r["backend"], *[f"{r[m]:.2f}" for m in metrics], f"{r['max_loss_vs_fp32']:+.2f}"]
        cells += [f"{r[speed_key]:.1f}", f"{r['speedup_vs_fp32']:.2f}"]
        cells += [f"{r['query_ms']:.1f}"] if per_query else []
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_inference_card(model_dir: Path, rows: list[dict], chosen: str, note: str, device: str) -> list[Path]:
    """Record the choice for ``device`` (``cuda`` / ``cpu:<class>``) in the model folder's inference
    record (what ``precision=auto`` reads), keeping the other devices'; for the base model, whose
    folder is converted under $SAMELANG_HOME on each machine, also in the record the repository
    ships (``models/multilingual-e5-small/``). The folders written (the caller writes their cards)."""

    folders = [Path(model_dir)]
    if Path(model_dir).name == BASE_MODEL_NAME and Path(model_dir).resolve() != SHIPPED_RECORDS / BASE_MODEL_NAME:
        folders.append(SHIPPED_RECORDS / BASE_MODEL_NAME)
        folders[-1].mkdir(exist_ok=True)
    for folder in folders:
        record_precision(folder, device, chosen, rows, note, model=model_dir)
    return folders


def device_name(device: str) -> str:
    import torch  # deferred: keeps torch out of start-up

    return torch.cuda.get_device_name(torch.device(device))


# ----------------------------------------------------------------------------- the command's object
PRECISION_HEADING = "## Inference precision"


class PrecisionEvalOptions(EvalOptions):
    """Options of ``samelang eval precision``."""

    biencoder: Path | None = Field(None, description="Bi-encoder folder (default: the served one).")
    reranker: str | None = Field(None, description="Cross-encoder folder (default: the served one; 'none' to skip).")
    record_biencoder: bool = Field(
        True, description="Also compare and record the bi-encoder (off: the reranker only; its candidates still come "
        "from the fp32 bi-encoder).",
    )  # fmt: skip
    precision: StrList = Field(
        default_factory=list,
        description="Precisions to compare with fp32 (default: int8, and bf16 where the CPU has it natively).",
    )
    reader: str | None = Field(
        None, description="Extractive reader folder (default: the served one, when there is one; 'none' to skip)."
    )
    max_questions: int = Field(6, ge=1, description="Reranker slice: test questions per language.")
    reader_questions: int = Field(
        40, ge=1, le=200, description="Reader: dev-article questions per language (F1 and EM against fp32)."
    )
    tolerance: float = Field(0.3, ge=0, description="Largest admissible loss against fp32, in points, on any metric.")
    repeats: int = Field(3, ge=1, description="Speed: timed repetitions (median).")
    card: bool = Field(False, description="Record the default precision in each model folder (inference record, card).")
    out: Path = Field(Path("runs/eval-precision"), description="Folder for results.json and results.md.")


class PrecisionEvaluation:
    """fp32 vs int8 (vs bf16) for the served bi-encoder, cross-encoder and extractive reader: quality
    on their eval tables and speed, side by side; picks each model's default precision (the fastest within
    ``tolerance`` points of fp32 on every metric) and, with ``card``, records it in the model folder."""

    def __init__(self, options: PrecisionEvalOptions, log=print):
        self.options, self.log, self.cfg = options, log, settings(home=options.home)
        self.device = self.cfg.torch_device()
        self.on_gpu = self.device.startswith("cuda")
        self.record_key = precision_device(self.device)  # cuda, or cpu:<this CPU's class>
        alternatives = ["bf16", "fp16"] if self.on_gpu else ["int8"] + (["bf16"] if cpu_has_bf16() else [])
        self.precisions = list(dict.fromkeys(["fp32", *(options.precision or alternatives)]))
        self.biencoder = Path(options.biencoder or default_weights(self.cfg.home))
        skip = options.reranker is not None and options.reranker.lower() == "none"
        chosen = None if skip else (options.reranker or default_cross_encoder())
        self.reranker = Path(chosen) if chosen else None
        self.reader = default_reader(options.reader, self.cfg.home)

    def _biencoder_rows(self) -> tuple[list[dict], object]:
        rows, emb_fp32 = [], None
        for p in self.precisions:
            enc = Encoder(self.biencoder, device=self.device, home=self.cfg.home, options=EngineOptions(precision=p))
            emb = embed_xquad(enc, self.cfg.home / "cache", split=SPLIT)
            emb_fp32 = emb if p == "fp32" else emb_fp32
            rows.append(biencoder_row(enc, evaluate(emb), self.options.repeats))
            self.log(f"bi-encoder {p}: {rows[-1]}")
            del enc
        return rows, emb_fp32

    def _reranker_rows(self, emb_fp32) -> list[dict]:
        texts, rows = ev.load_texts(split=SPLIT), []
        for p in self.precisions:
            rr = CrossEncoderReranker(
                self.reranker, device=self.device, home=self.cfg.home, options=EngineOptions(precision=p)
            )
            scorer = ev.cached_scorer(
                ev.cross_encoder_scorer(rr, texts), self.cfg.home / "cache", f"{ev.score_identity(rr)}|{SPLIT}"
            )
            result = ev.evaluate_reranker(scorer, emb_fp32, self.options.max_questions)
            rows.append(reranker_row(rr, result, self.options.repeats))
            self.log(f"reranker {p}: {rows[-1]}")
            del rr
        return rows

    def _reader_rows(self) -> list[dict]:
        questions, rows = reader_questions(self.options.reader_questions), []
        for p in self.precisions:
            reader = ExtractiveReader(self.reader, self.device, home=self.cfg.home, options=EngineOptions(precision=p))
            rows.append(reader_row(reader, questions, self.options.repeats))
            self.log(f"reader {p}: {rows[-1]}")
            del reader
        return rows

    def how(self) -> str:
        o = self.options
        where = device_name(self.device) if self.on_gpu else cpu_summary()
        return (
            f"Measured on {where} (class {self.record_key}; {self.cfg.threads or 'all'} threads): speed = median of "
            f"{o.repeats} runs over the first 64 English test paragraphs (bi-encoder), one query x 20 paragraphs "
            f"(reranker) or one read of a question's 2 passages, median over {READER_SPEED_QUESTIONS} English "
            "questions (reader); quality on the XQuAD TRAIN articles' questions over the 12-language pool (a choice: "
            f"the test articles never select; reranker: {o.max_questions} questions per language, candidates from the "
            f"fp32 retriever; reader: F1 and EM at its calibrated threshold on the dev articles' first "
            f"{o.reader_questions} questions per language, each over its gold paragraph and another of its article, "
            f"as /answer reads). Default on this class of CPU = the fastest precision within {o.tolerance} points of "
            "fp32 on every metric. Command: `samelang eval precision --card` on a machine of the class."
        )

    def run(self) -> Report:
        tol = self.options.tolerance
        data: dict = {"cpu": cpu_model(), "record_key": self.record_key, "split": SPLIT,
                      "biencoder": str(self.biencoder), "reranker": str(self.reranker),
                      "reader": str(self.reader)}  # fmt: skip
        sections = {}
        if self.options.record_biencoder:
            rows, emb_fp32 = self._biencoder_rows()
            chosen = choose(rows, BIENCODER_METRICS, "passages_per_s", tol, self.on_gpu)["precision"]
            sections[self.biencoder] = (rows, chosen, markdown(rows, BIENCODER_METRICS, "passages_per_s", chosen))
            data["biencoder_rows"], data["biencoder_default"] = rows, chosen
        elif self.reranker is not None:  # the reranker's candidates
            enc = Encoder(
                self.biencoder, device=self.device, home=self.cfg.home, options=EngineOptions(precision="fp32")
            )
            emb_fp32 = embed_xquad(enc, self.cfg.home / "cache", split=SPLIT)
        if self.reranker is not None:
            rows = self._reranker_rows(emb_fp32)
            chosen = choose(rows, RERANKER_METRICS, "pairs_per_s", tol, self.on_gpu)["precision"]
            sections[self.reranker] = (rows, chosen, markdown(rows, RERANKER_METRICS, "pairs_per_s", chosen))
            data["reranker_rows"], data["reranker_default"] = rows, chosen
        if self.reader is not None:
            rows = self._reader_rows()
            chosen = choose(rows, READER_METRICS, "reads_per_s", tol, self.on_gpu)["precision"]
            sections[self.reader] = (rows, chosen, markdown(rows, READER_METRICS, "reads_per_s", chosen))
            data["reader_rows"], data["reader_default"] = rows, chosen
        how = self.how()
        text = "\n\n".join(f"### {path.name}\n\n{table}" for path, (_, _, table) in sections.items()) + "\n\n" + how
        report = Report(text, data)
        report.write(self.options.out)
        if self.options.card:
            for path, (rows, chosen, table) in sections.items():
                heading = f"{PRECISION_HEADING} ({self.record_key})"
                for folder in write_inference_card(path, rows, chosen, how, self.record_key):
                    write_card_section(folder, heading, f"{table}\n\n{how}\n")
        return report
