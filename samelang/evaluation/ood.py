"""The judge's out-of-domain shape: a whole QA source of the training corpus that every training run holds out
(:data:`OOD_SOURCE`, TyDi QA GoldP in Arabic, English and Russian: ``--hold-out tydiqa_goldp`` in ``samelang
train``), its passages indexed with no labels, its questions asked in their own language.

Why: the XQuAD shapes are Wikipedia paragraphs of 48 articles whose train half every model here has seen, so a
reranker could win there by having learnt XQuAD's style; a source no run trained on, with its own writers and
questions, says whether it learnt relevance. Collection: every passage of the source that survived the
contamination filter (one language each, no ``group``); questions: :data:`OOD_PER_LANG` per language, a fixed
seeded sample. Metrics, in %: ``found_at_1`` (the first hit's text is the gold passage's), ``reader_at_1`` (that,
and in the reader's language: equal unless another language's copy ranks first; kept to read like the XQuAD
shapes), ``found_at_10``. Nothing is tuned here: it is reported beside the XQuAD shapes, and the served default must
beat the base model's dense row on it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from samelang.corpora.records import Document
from samelang.corpora.store import CorpusStore
from samelang.corpora.views import load_views
from samelang.evaluation.cached_models import CachedReranker
from samelang.evaluation.collection_shapes import ShapeJudge, summarise
from samelang.evaluation.serving_rule import ShapeRow
from samelang.retrieval.options import SearchOptions

OOD_SOURCE = "tydiqa_goldp"  # held out of every training run here (the trainers' --hold-out)
OOD_PER_LANG = 96  # questions per language (288 for TyDi's ar, en, ru)
OOD_METRICS = ("found_at_1", "reader_at_1", "found_at_10")
OOD_VERSION = "ood-v1"  # the construction's identity (part of its index folder's name)


@dataclass(frozen=True)
class OODQuery:
    query: str
    lang: str
    gold: str  # the gold passage's text


def _rank_key(*parts) -> bytes:
    return hashlib.sha256("|".join(parts).encode()).digest()


class OutOfDomain:
    """The held-out source as a collection and questions; rows run through ``judge``'s pipelines
    (the same encoders, cross-encoders and defaults as the XQuAD shapes)."""

    shape = "ood"

    def __init__(self, judge: ShapeJudge, store: CorpusStore, source: str = OOD_SOURCE, per_lang: int = OOD_PER_LANG):
        self.judge, self.source = judge, source
        views = load_views(store, sources=(source,))
        passages = sorted((p for p in views.passages.values() if p.source == source), key=lambda p: p.id)
        self.documents = [Document(p.id, p.text, p.lang, None, {"doc": p.doc}) for p in passages]
        by_lang: dict[str, list] = {}
        for r in sorted(views.qa, key=lambda r: _rank_key(source, r.id)):
            if r.source == source and len(by_lang.setdefault(r.lang, [])) < per_lang:
                by_lang[r.lang].append(OODQuery(r.query, r.lang, r.positive))
        self.queries = [q for x in sorted(by_lang) for q in by_lang[x]]
        self.qlang = np.array([q.lang for q in self.queries])
        self.latency: dict = {}

    def index(self, enc) -> Path:
        """The collection's index for ``enc`` (built once, kept in the cache under the documents' and
        the model's identity)."""
        held = "\n".join(d.id for d in self.documents)
        return self.judge.cached_index(f"{OOD_VERSION}:{self.source}:{held}", self.documents, enc, f"ood:{self.source}")

    def evaluate(self, row: ShapeRow) -> dict:
        """``row``'s metrics on every question (summarised as the XQuAD shapes', per language)."""
        pipe = self.judge.pipeline(row, self.shape, index=self.index(self.judge.encoder(row.retriever)))
        lists = []
        for q in tqdm(self.queries, desc=f"{row.name}: {self.shape}", unit="q", leave=False):
            hits = pipe.search(q.query, SearchOptions(k=10)).hits
            lists.append([(h.doc.text, h.doc.lang) for h in hits])
        if isinstance(pipe.reranker, CachedReranker):
            pipe.reranker.save()
        pipe.index.close()
        return summarise(score_ood(lists, self.queries), self.qlang)


def score_ood(lists: list[list[tuple[str, str]]], queries: list[OODQuery]) -> dict[str, np.ndarray]:
    """Per-query metrics of the (text, language) lists the searches returned."""
    first = [hits[0] if hits else ("", "") for hits in lists]
    found1 = np.array([t == q.gold for (t, _), q in zip(first, queries)], float)
    reader1 = np.array([t == q.gold and x == q.lang for (t, x), q in zip(first, queries)], float)
    found10 = np.array([any(t == q.gold for t, _ in hits[:10]) for hits, q in zip(lists, queries)], float)
    return {"found_at_1": found1, "reader_at_1": reader1, "found_at_10": found10}


def ood_table(results: dict[ShapeRow, dict], chosen: ShapeRow | None, base: ShapeRow, source: str) -> str:
    """Every row's metrics on the held-out source with their intervals, and whether the chosen row
    beats the base model's dense row there (found@1 and reader@1: the acceptance of issue 43)."""
    lines = [f"**out of domain** ({source}: held out of every training run; its passages with no labels)", "",
             "| row | " + " | ".join(f"{m} [95% CI] (n)" for m in OOD_METRICS) + " |",
             "|---|" + "---|" * len(OOD_METRICS)]  # fmt: skip
    for row, res in results.items():
        cells = [f"{res[m]['mean']:.1f} [{res[m]['ci95'][0]:.1f}, {res[m]['ci95'][1]:.1f}] ({res[m]['n']})"
                 for m in OOD_METRICS]  # fmt: skip
        lines.append(f"| {row.name}{' **served**' if row == chosen else ''} | " + " | ".join(cells) + " |")
    if chosen in results and base in results and chosen != base:
        wins = {m: results[chosen][m]["mean"] - results[base][m]["mean"] for m in ("found_at_1", "reader_at_1")}
        verdict = "beats" if all(v > 0 for v in wins.values()) else "does not beat"
        gaps = ", ".join(f"{m} {v:+.1f}" for m, v in wins.items())
        lines += ["", f"The served row {verdict} the base model's dense row out of domain ({gaps} points)."]
    return "\n".join(lines)


def ood_summary(data: dict | None) -> dict | None:
    """What ``models/serving.json`` keeps of the shape's JSON: each row's means (the report keeps the
    intervals and languages); ``None`` when the shape did not run."""
    if not data or "skipped" in data:
        return None
    return {
        "source": data["source"],
        "rows": {name: {m: round(v[m]["mean"], 2) for m in OOD_METRICS} for name, v in data["rows"].items()},
    }
