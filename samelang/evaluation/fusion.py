"""Tuning the hybrid retriever's BM25 weight on *train* articles (``samelang eval fusion``).

The hybrid score is :func:`samelang.retrieval.candidates.fuse`: ``cos + w * bm25 / max bm25``. ``w`` is the one
number of the hybrid retriever, so it is chosen here, never on the test articles that
``samelang eval pipeline`` judges with: questions of the XQuAD train articles (for a model trained
on them, only its held-out dev articles, which it never saw), in all 12 languages, over the pool
``eval pipeline`` uses (all 2,880 paragraphs: 240 x 12 languages), and the metric that chooses the
served row, reader-gold nDCG@1 (the first paragraph is the gold one in the question's language).
Every document is scored (BM25 and cosine of the whole pool), so the numbers are exact; the
pipeline fuses the union of the dense and BM25 top lists, the same ranking at its head. The chosen
weight per retriever goes to ``models/fusion.json`` (``--card``), which ``eval pipeline`` reads to add hybrid rows.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
from pydantic import Field

from samelang.core.catalogue import BASE, REPO_MODELS
from samelang.core.model_folder import read_training_args
from samelang.core.models.base_model import ensure_base_model
from samelang.core.models.encoder import Encoder
from samelang.core.options import StrList
from samelang.corpora import XQUAD_LANGS, dev_articles, load_split, load_xquad
from samelang.evaluation.biencoder import embed_xquad
from samelang.evaluation.common import EvalOptions, Report
from samelang.indexes.lexical import LexicalIndex
from samelang.primitives.atomic import atomic_write_text, cached_array
from samelang.retrieval.candidates import fuse

WEIGHTS = (0.0, 0.02, 0.04, 0.06, 0.08, 0.1, 0.12, 0.15, 0.2, 0.3)


def fusion_file() -> Path:
    return REPO_MODELS / "fusion.json"


def tuned_weights(path: Path | None = None) -> dict[str, float]:
    """Retriever name -> its tuned BM25 weight (``models/fusion.json``; empty without it)."""
    path = path or fusion_file()
    if not path.exists():
        return {}
    return {name: float(v["lexical_weight"]) for name, v in json.loads(path.read_text())["retrievers"].items()}


def tuning_articles(model_dir: Path) -> tuple[tuple[int, ...], str]:
    """The articles whose questions tune ``w`` for this model, and why: its dev articles when it
    was trained on XQuAD (``training_args.json``), else every train article."""

    args = read_training_args(model_dir) or {}
    if "dev_n_articles" in args:
        n = int(args["dev_n_articles"])
        if n == 0:
            raise ValueError(f"{model_dir} was trained on every train article: no unseen article to tune on")
        return dev_articles(n), f"its {n} dev articles (train split, held out of its training)"
    return tuple(sorted(load_split()["train_articles"])), "every train article (the model never trained on XQuAD)"


class FusionEvalOptions(EvalOptions):
    """Options of ``samelang eval fusion``."""

    retriever: StrList = Field(
        default_factory=lambda: ["base"],
        description="Bi-encoder NAME=DIR (or 'base'); repeat. Each gets its own weight.",
    )
    card: bool = Field(False, description="Write the chosen weights to models/fusion.json.")
    out: Path = Field(Path("runs/eval-fusion"), description="Folder for results.json and results.md.")


class FusionTuning:
    """The weight grid of one or more retrievers on their tuning questions; owns the table."""

    def __init__(self, options: FusionEvalOptions, log=print):
        self.options, self.log = options, log

    def _questions(self, articles):
        return {x: [q for q in load_xquad([x], split="train").questions if q.article in articles] for x in XQUAD_LANGS}

    def _query_vectors(self, encoder, qs: dict, cache: Path) -> dict[str, np.ndarray]:
        texts = [q.text for x in XQUAD_LANGS for q in qs[x]]
        ident = f"{encoder.fingerprint}:{encoder.cache_tag}:v1\0" + "\0".join(texts)
        key = hashlib.sha256(ident.encode()).hexdigest()[:20]
        flat = cached_array(
            cache / f"xquad-train-queries-{key}.npy", lambda: encoder.encode_queries(texts, progress=True)
        )
        out, i = {}, 0
        for x in XQUAD_LANGS:
            out[x], i = flat[i : i + len(qs[x])], i + len(qs[x])
        return out

    def tune(self, name: str, path: Path, home: Path) -> dict:
        """Reader-gold nDCG@1 per language for every weight of :data:`WEIGHTS`; the best average
        wins (ties: the smaller weight, the simpler retriever)."""

        enc = Encoder(path, home=home)
        articles, why = tuning_articles(path)
        qs = self._questions(articles)
        pool = [(x, p.group, p.text) for x in XQUAD_LANGS for p in load_xquad([x]).paragraphs]
        col = {(x, g): i for i, (x, g, _) in enumerate(pool)}
        emb = embed_xquad(enc, home / "cache")
        P = np.concatenate([emb.passages[x] for x in XQUAD_LANGS])
        lex = LexicalIndex.build([t for _, _, t in pool], enc.analyzer[1], enc.analyzer[0])
        qv = self._query_vectors(enc, qs, home / "cache")
        grid: dict[str, dict[str, float]] = {f"{w:g}": {} for w in WEIGHTS}
        for x in XQUAD_LANGS:
            dense = qv[x] @ P.T
            bm25 = np.stack([lex.scores(enc.analyzer[1](q.text)) for q in qs[x]])
            gold = np.array([col[(x, q.group)] for q in qs[x]])
            for w in WEIGHTS:
                grid[f"{w:g}"][x] = 100 * float((fuse(dense, bm25, w).argmax(axis=1) == gold).mean())
        avg = {w: float(np.mean(list(v.values()))) for w, v in grid.items()}
        best = max(avg, key=lambda w: (round(avg[w], 2), -float(w)))
        n = sum(len(v) for v in qs.values())
        self.log(f"{name}: w = {best} (reader-gold nDCG@1 {avg[best]:.2f} vs {avg['0']:.2f} dense, {n} questions)")
        return {"lexical_weight": float(best), "ndcg_at_1": avg, "per_lang": grid, "questions": n,
                "articles": list(articles), "tuned_on": why, "model_fingerprint": enc.fingerprint}  # fmt: skip

    def run(self) -> Report:
        home = self.options.home
        results = {}
        for item in self.options.retriever:
            name, _, path = item.partition("=")
            where = ensure_base_model(home) if (path or name) == BASE else Path(path or name)
            results[name] = self.tune(name, where, home)
        lines = ["| retriever | tuned on | questions | " + " | ".join(f"w={w:g}" for w in WEIGHTS) + " | chosen |",
                 "|---|---|---|" + "---|" * len(WEIGHTS) + "---|"]  # fmt: skip
        for name, r in results.items():
            cells = " | ".join(f"{r['ndcg_at_1'][f'{w:g}']:.2f}" for w in WEIGHTS)
            lines.append(f"| {name} | {r['tuned_on']} | {r['questions']} | {cells} | {r['lexical_weight']:g} |")
        table = "Reader-gold nDCG@1 on the 12-language pool (train-article questions):\n\n" + "\n".join(lines)
        data = {"retrievers": results, "command": "samelang eval fusion --card", "weights": list(WEIGHTS)}
        report = Report(table, data)
        report.write(self.options.out)
        if self.options.card:
            atomic_write_text(fusion_file(), json.dumps(data, indent=2) + "\n")
            self.log(f"weights -> {fusion_file()}")
        return report
