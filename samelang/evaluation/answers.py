"""``samelang eval answer``: what ``/answer`` tells the reader, end to end, in every language.

Each collection shape's index (:mod:`.collection_shapes`: the 12-language parallel pool, partial translations) is served
as ``samelang serve`` serves it (defaults from ``models/serving.json``, the real models, a real uvicorn server), and the
test articles' questions go through ``POST /answer`` twice: ``answer_mode: extractive`` (the reader) and ``generative``
(Gemma 3 270M on llama.cpp). Beside them, the reader alone on the gold paragraph in the question's language: its upper
bound. Metrics (:mod:`samelang.core.metrics.answers`): token F1 and exact match against the gold answers in the
question's language, in %, per language and their mean with a 95% percentile-bootstrap interval over questions. Partial
translations give two rows: questions whose gold the index holds in the reader's language (an answer in another language
scores 0), and the others (scored against XQuAD's gold in the answer's language). p50: one ``/answer`` at a time, client
wall time. ``--per-lang`` fixed question positions per language; nothing is tuned."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Literal

import httpx
import numpy as np
from pydantic import Field, model_validator
from tqdm.auto import tqdm

from samelang.core.catalogue import SERVED_DEFAULTS, default_reader, served_defaults
from samelang.core.metrics.answers import answer_f1, exact_match
from samelang.core.model_folder import replace_section, write_card_section
from samelang.core.models.reader import ExtractiveReader
from samelang.core.options import StrList
from samelang.core.runtime.precision import cpu_summary
from samelang.corpora import XQUAD_LANGS, dev_articles, load_xquad
from samelang.evaluation.cached_models import bootstrap_ci
from samelang.evaluation.collection_shapes import ShapeJudge
from samelang.evaluation.common import EvalOptions, Report
from samelang.evaluation.serving_rule import ShapeRow
from samelang.primitives.atomic import atomic_write_text
from samelang.service.components import Components, load_components
from samelang.service.config import ServiceSettings

ANSWER_SECTION = "## What /answer says (answer F1 per language)"
MODES = ("extractive", "generative")


class AnswerEvalOptions(EvalOptions):
    """Options of ``samelang eval answer``."""

    reader: str | None = Field(None, description="Extractive reader folder (default: the shipped one).")
    split: Literal["test", "dev"] = Field(
        "test",
        description="test: the held-out test articles (what is reported); dev: the dev articles' questions over the "
        "train articles' shapes (held out of every training run: what chooses a reader, as the judge chooses)",
    )  # fmt: skip
    per_lang: int = Field(24, ge=1, le=374, description="Questions per language (fixed positions).")
    shapes: StrList = Field(default_factory=lambda: ["parallel", "partial"], description="Collection shapes.")
    generator: bool = Field(True, description="Also the embedded generator's row on the same questions.")
    card: bool = Field(
        False, description="Write the tables into docs/evaluation.md and the reader's card; serve extractive "
        "answers by default (models/serving.json) when they beat the generator's on every shape.",
    )  # fmt: skip
    tiny: bool = Field(False, description="A few paragraphs and questions (seconds): checks that it runs.")
    out: Path = Field(Path("runs/eval-answer"), description="Folder for results.json and results.md.")

    @model_validator(mode="after")
    def _card_is_the_test_table(self) -> AnswerEvalOptions:
        if self.card and self.split != "test":
            raise ValueError("split: --card writes the test articles' table; choose on --split dev with --no-card")
        return self


def _position_key(i: int) -> bytes:
    return hashlib.sha256(f"answer|{i}".encode()).digest()


def asked(judge: ShapeJudge, per_lang: int) -> np.ndarray:
    """Indices into ``judge.queries``: the first ``per_lang`` positions of one seeded order, the same
    positions (the same question) in every language."""
    positions = sorted(set(judge.position.tolist()), key=_position_key)[:per_lang]
    return np.flatnonzero(np.isin(judge.position, positions))


def gold_answers() -> dict[tuple[str, str], list[str]]:
    """(language, question) -> the gold answer texts in that language (every XQuAD question)."""
    return {(q.lang, q.text): [a.text for a in q.answers] for q in load_xquad(list(XQUAD_LANGS)).questions}


def gold_paragraphs() -> dict[str, str]:
    """Paragraph id -> text (the reader-gold paragraph of each question)."""
    return {p.id: p.text for p in load_xquad(list(XQUAD_LANGS)).paragraphs}


def served_row() -> ShapeRow:
    """What ``/search`` runs by default (``models/serving.json``): its reranker only when it reranks."""
    s = served_defaults()
    row = ShapeRow(s.retriever, s.lexical_weight, s.candidates, s.search_reranker, s.rerank_k, s.rerank_fusion)
    return row if row.reranked else row.unreranked


def score(answers: list[tuple[str | None, str | None]], queries: list, golds: dict, reader_lang_only: bool,
          gold_in=None) -> dict:  # fmt: skip
    """Per-question F1 and EM (an answer in another language than the question's counts 0 when
    ``reader_lang_only``), summarised per language with the mean's interval. ``gold_in(i, lang)``:
    score question ``i``'s answer against the gold answers in the answer's own language instead
    (the same question's, XQuAD being parallel)."""
    f1, em = [], []
    for i, ((text, lang), q) in enumerate(zip(answers, queries)):
        ok = not reader_lang_only or lang in (None, q.lang)
        at = lang if gold_in is not None and lang in XQUAD_LANGS else q.lang
        gold = gold_in(i, at) if gold_in is not None else golds[(q.lang, q.query)]
        f1.append(answer_f1(text, gold, at) if ok else 0.0)
        em.append(exact_match(text, gold, at) if ok else 0.0)
    if not f1:
        raise ValueError("no questions to score: --per-lang must leave at least one per language")
    f1, em = np.array(f1), np.array(em)
    langs = np.array([q.lang for q in queries])
    per = {x: float(f1[langs == x].mean()) for x in XQUAD_LANGS if (langs == x).any()}
    lo, hi = bootstrap_ci(f1)
    return {"f1": float(f1.mean()), "f1_ci95": [lo, hi], "em": float(em.mean()), "f1_per_lang": per,
            "em_per_lang": {x: float(em[langs == x].mean()) for x in per}, "n": len(f1),
            "answered": float(np.mean([t is not None for t, _ in answers]) * 100)}  # fmt: skip


class AnswerEvaluation:
    """The rows of ``samelang eval answer`` on each shape (see the module docstring)."""

    def __init__(self, options: AnswerEvalOptions, log=print):
        self.options, self.log = options, log
        self.reader_path = default_reader(options.reader, options.home)
        if self.reader_path is None:
            raise ValueError("no extractive reader: pass --reader DIR (train one with `samelang train reader`)")
        tiny = dict(max_paragraphs=3, max_questions=2, memo=False) if options.tiny else {}
        # dev: the dev articles' questions over the train split's pools (a tiny run's few paragraphs hold none)
        split, articles = ("test", None)
        if options.split == "dev":
            split, articles = "train", None if options.tiny else dev_articles()
        self.judge = ShapeJudge(options.home, split=split, articles=articles, shapes=tuple(options.shapes), log=log,
                                **tiny)  # fmt: skip
        self.which = asked(self.judge, options.per_lang)
        self.queries = [self.judge.queries[i] for i in self.which]
        self.golds = gold_answers()
        # (language, position) -> question text: XQuAD is parallel, question i of each language is one question
        self.parallel = {(q.lang, int(p)): q.query for q, p in zip(self.judge.queries, self.judge.position)}
        self.row = served_row()
        self.reader_runs: dict | None = None

    def upper_bound(self) -> dict:
        """The reader alone on each question's gold paragraph in its own language."""
        reader = ExtractiveReader(self.reader_path, home=self.options.home)
        paragraphs = gold_paragraphs()
        out = []
        for q in tqdm(self.queries, desc="reader on the gold paragraph", unit="q", leave=False):
            span = reader.read(q.query, [paragraphs[q.reader_gold]])
            out.append((span.text if span else None, q.lang))
        return score(out, self.queries, self.golds, reader_lang_only=False)

    def over_http(self, shape: str) -> dict[str, dict]:
        """Each mode's answers to the questions through ``POST /answer`` of a server over ``shape``: its
        rows by name (``shape: mode``; partial translations in two rows, :meth:`partial_rows`)."""
        from samelang.service.api.app import create_app  # deferred: fastapi only when this runs
        from samelang.service.api.server import serve_in_thread  # deferred: fastapi only when this runs

        index = self.judge.index("parallel" if shape == "mono" else shape, self.judge.encoder(self.row.retriever))
        modes = MODES if self.options.generator else MODES[:1]
        cfg = ServiceSettings(home=self.options.home, index=index, reader=str(self.reader_path), micro_batching=False,
                              index_reload_s=0, generator="llamacpp" if self.options.generator else "none")  # fmt: skip
        components = load_components(cfg)
        self.reader_runs = components.pipeline.reader.describe()  # as the server runs it
        app = create_app(cfg, Components(components.pipeline))
        out = {}
        with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=600) as client:
            for mode in modes:
                answers, ms = [], []
                for q in tqdm(self.queries, desc=f"HTTP /answer {mode}: {shape}", unit="q", leave=False):
                    t0 = time.perf_counter()
                    r = client.post("/answer", json={"query": q.query, "answer_mode": mode})
                    ms.append((time.perf_counter() - t0) * 1000)
                    body = r.raise_for_status().json()
                    answers.append((body["answer"] or None, body["answer_lang"]))
                p50 = {"p50_ms": float(np.median(ms))}
                if shape != "partial":
                    out[f"{shape}: {mode}"] = {
                        **score(answers, self.queries, self.golds, reader_lang_only=False),
                        **p50,
                    }
                    continue
                for name, row in self.partial_rows(answers).items():
                    out[name.format(mode=mode)] = {**row, **p50}
        components.pipeline.index.close()
        return out

    def partial_rows(self, answers: list) -> dict[str, dict]:
        """Partial translations, two rows: the questions whose gold paragraph the index holds in the
        reader's language (only an answer in that language counts: the acceptance figure), and the
        others (their answer, in another language by necessity, scored in that language)."""
        present = self.judge.present("partial")
        has = [(q.group, q.lang) in present for q in self.queries]
        rows = {}
        for name, keep in (("{mode}", True), ("{mode}, no version in the reader's language", False)):
            idx = [i for i, h in enumerate(has) if h is keep]
            if not idx:
                continue
            sub_a, sub_q = [answers[i] for i in idx], [self.queries[i] for i in idx]
            gold_in = None if keep else (lambda i, lang, idx=idx: self.gold_in(self.which[idx[i]], lang))
            rows["partial: " + name] = score(sub_a, sub_q, self.golds, reader_lang_only=keep, gold_in=gold_in)
        return rows

    def gold_in(self, k: int, lang: str) -> list[str]:
        """The gold answers of the judge's question ``k`` as XQuAD gives them in ``lang`` (the parallel
        question; :func:`score` asks only in XQuAD's languages, a generated answer detected in another
        being scored in the question's own)."""
        return self.golds[(lang, self.parallel[(lang, int(self.judge.position[k]))])]

    def run(self) -> dict:
        results = {"gold paragraph (reader alone)": self.upper_bound()}
        for shape in self.options.shapes:
            results.update(self.over_http(shape))
        return results


def answer_table(results: dict) -> str:
    langs = [x for x in XQUAD_LANGS if any(x in r["f1_per_lang"] for r in results.values())]
    head = "| row | " + " | ".join(langs) + " | F1 mean [95% CI] | EM | answered % | p50 ms |"
    lines = [head, "|---|" + "---|" * (len(langs) + 4)]
    for name, r in results.items():
        cells = [f"{r['f1_per_lang'][x]:.1f}" if x in r["f1_per_lang"] else "-" for x in langs]
        p50 = f"{r['p50_ms']:.0f}" if "p50_ms" in r else "-"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | **{r['f1']:.1f}** [{r['f1_ci95'][0]:.1f}, "
                     f"{r['f1_ci95'][1]:.1f}] | {r['em']:.1f} | {r['answered']:.0f} | {p50} |")  # fmt: skip
    return "\n".join(lines)


def extractive_wins(results: dict, shapes) -> bool:
    """Whether the reader's answers beat the generator's F1 on every shape (the generator measured)."""
    pairs = [(results.get(f"{s}: extractive"), results.get(f"{s}: generative")) for s in shapes]
    return all(e is not None and g is not None and e["f1"] > g["f1"] for e, g in pairs)


def run_answer_evaluation(options: AnswerEvalOptions, doc: Path, log=print) -> Report:
    t0 = time.perf_counter()
    ev = AnswerEvaluation(options, log)
    results = ev.run()
    minutes = (time.perf_counter() - t0) / 60
    command = "samelang eval answer" + " --tiny" * options.tiny + " --card" * options.card
    command += " --split dev" * (options.split == "dev")
    if options.per_lang != AnswerEvalOptions.model_fields["per_lang"].default:
        command += f" --per-lang {options.per_lang}"
    runs = ev.reader_runs or {"backend": "?", "precision": "?"}
    articles = "test articles" if options.split == "test" else "dev articles (over the train articles' shapes)"
    how = (f"XQuAD {articles}, {len(ev.queries)} questions ({options.per_lang} fixed positions x "
           f"{len(ev.queries) // max(1, options.per_lang)} languages), each shape served as `samelang serve` serves it "
           f"({ev.row.name}; reader `{ev.reader_path.name}`, {runs['backend']} {runs['precision']}) and asked through "
           "HTTP `POST /answer`; F1/EM against the "
           "gold answers in the question's language (characters for zh and th); partial translations in two rows, the "
           "questions whose gold paragraph the index holds in the reader's language (only an answer in that language "
           "counts) and the others (the answer scored in its own language); p50: one request at a time on "
           f"{cpu_summary()}, {os.cpu_count()} cores. Command: `{command}` ({minutes:.0f} min).")  # fmt: skip
    table = answer_table(results)
    data = {"rows": results, "reader": str(ev.reader_path), "served": ev.row.name, "minutes": round(minutes, 1),
            "command": command}  # fmt: skip
    report = Report(table + "\n\n" + how, data)
    report.write(options.out)
    if options.card and not options.tiny:
        replace_section(doc, ANSWER_SECTION, table + "\n\n" + how + "\n")
        write_card_section(ev.reader_path, "## Evaluation (XQuAD test articles)", table + "\n\n" + how + "\n")
        if options.generator:
            serve_extractive(extractive_wins(results, options.shapes), command)
    return report


def serve_extractive(wins: bool, command: str) -> None:
    """Record ``/answer``'s measured default mode in ``models/serving.json``."""
    if not SERVED_DEFAULTS.exists():
        raise SystemExit(f"no {SERVED_DEFAULTS}: run `samelang eval pipeline --shapes --card` first")
    data = json.loads(SERVED_DEFAULTS.read_text())
    data["served"]["answer_mode"] = "extractive" if wins else "generative"
    data["answer_mode_command"] = command
    atomic_write_text(SERVED_DEFAULTS, json.dumps(data, indent=2) + "\n")
