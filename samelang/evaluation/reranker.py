"""Evaluation of a (language-aware) reranker on the XQuAD test articles (seed 002), with the test questions (374
per language, or the first ``max_questions`` for a quick CPU run) in each of the 12 languages:

1. Oracle language coherence (section 2, table 3): candidates = the gold paragraph in all 12 languages; relevant =
   the one in the query's language. nDCG@1, nDCG@10, MRR@10 overall and per query language, the mean rank of the
   same-language paragraph, and the top-1 document-language matrix.
2. Retrieved candidates (table 6): the top-20 of the pool of all 240 x 12 paragraphs by the retriever's cosine,
   reranked; relevant = the gold paragraph in the query's language. R@20 (the retriever's), nDCG@1, nDCG@10, MRR@10.
3. Relevance kept (Mono-Same): the top-20 of the query's own-language pool (240), reranked; nDCG@10.

Every (query, paragraph) pair the three tasks need is scored once. A scorer is ``score(pairs) -> scores`` over
``Pair`` keys; the reference "no reranker" scorer is the retriever's own cosine.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np
from pydantic import Field

from samelang.core import metrics as M
from samelang.core import model_folder
from samelang.core.catalogue import default_cross_encoder, default_weights
from samelang.core.model_folder import EVAL_RESULTS, write_card_section
from samelang.core.models.base_model import ensure_base_model
from samelang.core.models.cross_encoder import CrossEncoderReranker
from samelang.core.models.encoder import Encoder
from samelang.core.models.model_card import EVAL_HEADING
from samelang.core.options import PathList, StrList
from samelang.core.runtime.precision import EngineOptions
from samelang.core.settings import settings
from samelang.corpora import XQUAD_LANGS, load_xquad
from samelang.evaluation.biencoder import Embeddings, embed_xquad
from samelang.evaluation.common import EvalOptions, Report
from samelang.primitives.atomic import atomic_write_text, cached_array

TOP_K = 20


class Pair(NamedTuple):
    q_lang: str
    q: int  # index into the test questions
    d_lang: str
    p: int  # index into the 240 paragraphs (file order)


Scorer = Callable[[list[Pair]], np.ndarray]


@dataclass
class Texts:
    paragraphs: dict[str, list[str]]  # lang -> 240 paragraphs, file order
    questions: dict[str, list[str]]  # lang -> test questions


def load_texts(langs=XQUAD_LANGS, split: str = "test") -> Texts:
    """Every paragraph of the pool and the questions of ``split``'s articles (as :func:`embed_xquad`)."""
    return Texts(
        {x: [p.text for p in load_xquad([x]).paragraphs] for x in langs},
        {x: [q.text for q in load_xquad([x], split=split).questions] for x in langs},
    )


def cosine_scorer(emb: Embeddings) -> Scorer:
    """The retriever's cosine as the score: the reference with no reranker."""

    def score(pairs: list[Pair]) -> np.ndarray:
        return np.array([float(emb.queries[a][q] @ emb.passages[b][p]) for a, q, b, p in pairs], dtype=np.float64)

    return score


def cross_encoder_scorer(reranker, texts: Texts) -> Scorer:
    """A ``CrossEncoderReranker``: the service's inference engine at the reranker's precision."""

    def score(pairs: list[Pair]) -> np.ndarray:
        inputs = [(texts.questions[a][q], texts.paragraphs[b][p]) for a, q, b, p in pairs]
        return np.asarray(reranker.score_pairs(inputs, progress=True), dtype=np.float64).reshape(-1)

    return score


def cached_scorer(scorer: Scorer, cache_dir, identity: str) -> Scorer:
    """``scorer`` with its scores kept on disk, keyed by ``identity`` (model fingerprint and
    settings) and the exact pairs: re-running an evaluation, adding rows or re-writing cards
    does not re-score ~5k-150k pairs through a cross-encoder."""

    def score(pairs: list[Pair]) -> np.ndarray:
        h = hashlib.sha256(identity.encode())
        for p in pairs:
            h.update(f"{p.q_lang},{p.q},{p.d_lang},{p.p};".encode())
        path = Path(cache_dir) / f"rerank-scores-{h.hexdigest()[:20]}.npy"
        return cached_array(path, lambda: np.asarray(scorer(pairs), dtype=np.float64))

    return score


def _candidates(emb: Embeddings, langs, n_q: int) -> dict:
    """Retrieval candidates by cosine: top-20 of the 12-language pool and of the own-language pool."""
    pool = np.concatenate([emb.passages[x] for x in langs])
    owner = [(x, i) for x in langs for i in range(len(emb.passages[x]))]
    out = {}
    for ql in langs:
        Q = emb.queries[ql][:n_q]
        top_all = np.argsort(-(Q @ pool.T), axis=1, kind="stable")[:, :TOP_K]
        top_own = np.argsort(-(Q @ emb.passages[ql].T), axis=1, kind="stable")[:, :TOP_K]
        out[ql] = (
            [[owner[j] for j in row] for row in top_all],
            [[(ql, int(j)) for j in row] for row in top_own],
        )
    return out


def evaluate_reranker(scorer: Scorer, emb: Embeddings, max_questions: int | None = None, langs=XQUAD_LANGS) -> dict:
    """All three tasks for one scorer; ``emb`` is the retriever's embeddings (candidates)."""
    langs = list(langs)
    n_q = min(len(emb.gold), max_questions or len(emb.gold))
    gold = emb.gold[:n_q]
    cands = _candidates(emb, langs, n_q)
    needed: set[Pair] = set()
    for ql in langs:
        for i in range(n_q):
            needed.update(Pair(ql, i, dl, int(gold[i])) for dl in langs)
            for lst in cands[ql]:
                needed.update(Pair(ql, i, dl, p) for dl, p in lst[i])
    keys = sorted(needed)
    S = dict(zip(keys, scorer(keys), strict=True))

    oracle_rows, retrieved, mono, all_scores, all_ql = {}, {}, {}, [], []
    for ql in langs:
        so = np.array([[S[Pair(ql, i, dl, int(gold[i]))] for dl in langs] for i in range(n_q)])
        oracle_rows[ql] = _oracle_metrics(so, langs.index(ql))
        all_scores.append(so)
        all_ql += [ql] * n_q
        retrieved[ql] = _list_metrics(S, ql, cands[ql][0], gold)
        mono[ql] = {"ndcg_at_10": _list_metrics(S, ql, cands[ql][1], gold)["ndcg_at_10"]}
    matrix, rows, cols = M.top1_language_matrix(np.concatenate(all_scores), all_ql, langs, langs)

    def avg(d: dict, metric: str) -> float:
        return float(np.mean([v[metric] for v in d.values()]))

    return {
        "n_questions_per_lang": n_q,
        "n_pairs_scored": len(keys),
        "oracle": {
            "per_lang": oracle_rows,
            **{m: avg(oracle_rows, m) for m in ("ndcg_at_1", "ndcg_at_10", "mrr_at_10", "mean_rank_same_lang")},
            "top1_matrix": {"rows": rows, "cols": cols, "percent": matrix.round(2).tolist()},
        },
        "retrieved": {
            "per_lang": retrieved,
            **{m: avg(retrieved, m) for m in ("recall_at_20", "ndcg_at_1", "ndcg_at_10", "mrr_at_10")},
        },
        "mono_same": {"per_lang": mono, "ndcg_at_10": avg(mono, "ndcg_at_10")},
    }


def _oracle_metrics(so: np.ndarray, same: int) -> dict:
    """Oracle task: the gold paragraph in every language; relevant = column ``same`` (the query's)."""
    ro = np.zeros_like(so)
    ro[:, same] = 1
    return {
        "ndcg_at_1": 100 * float(M.ndcg_at_k(so, ro, 1).mean()),
        "ndcg_at_10": 100 * float(M.ndcg_at_k(so, ro, 10).mean()),
        "mrr_at_10": 100 * float(M.mrr_at_k(so, ro, 10).mean()),
        "mean_rank_same_lang": float(M.rank_of(so, np.full(len(so), same)).mean()),
    }


def _list_metrics(S: dict, ql: str, lists: list, gold: np.ndarray) -> dict:
    """Retrieved-candidates task: each query's top-20 reranked; relevant = the gold paragraph in
    the query's language. When the retriever missed it, it sits below every candidate (rank 21)."""
    n_q = len(gold)
    sr = np.array([[S[Pair(ql, i, dl, p)] for dl, p in lists[i]] for i in range(n_q)])
    rr = np.array([[float(dl == ql and p == gold[i]) for dl, p in lists[i]] for i in range(n_q)])
    found = rr.sum(1) > 0
    sr = np.concatenate([sr, np.full((n_q, 1), -np.inf)], axis=1)
    rr = np.concatenate([rr, (~found)[:, None].astype(float)], axis=1)
    return {
        "recall_at_20": 100 * float(found.mean()),
        "ndcg_at_1": 100 * float(M.ndcg_at_k(sr, rr, 1).mean()),
        "ndcg_at_10": 100 * float(M.ndcg_at_k(sr, rr, 10).mean()),
        "mrr_at_10": 100 * float(M.mrr_at_k(sr, rr, 10).mean()),
    }


def markdown(results: dict[str, dict]) -> str:
    """One row per scorer (name -> ``evaluate_reranker`` output), then oracle per language."""
    lines = [
        "| reranker | oracle nDCG@1 | oracle nDCG@10 | oracle MRR@10 | mean rank same-lang | retrieved R@20 "
        "| retrieved nDCG@1 | retrieved nDCG@10 | retrieved MRR@10 | Mono-Same nDCG@10 | questions/lang |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        o, t = r["oracle"], r["retrieved"]
        lines.append(
            f"| {name} | {o['ndcg_at_1']:.2f} | {o['ndcg_at_10']:.2f} | {o['mrr_at_10']:.2f} "
            f"| {o['mean_rank_same_lang']:.2f} | {t['recall_at_20']:.2f} | {t['ndcg_at_1']:.2f} "
            f"| {t['ndcg_at_10']:.2f} | {t['mrr_at_10']:.2f} | {r['mono_same']['ndcg_at_10']:.2f} "
            f"| {r['n_questions_per_lang']} |"
        )
    langs = list(next(iter(results.values()))["oracle"]["per_lang"])
    lines += ["", "Oracle nDCG@1 per query language:", ""]
    lines.append("| reranker | " + " | ".join(langs) + " |")
    lines.append("|---|" + "---|" * len(langs))
    for name, r in results.items():
        per = r["oracle"]["per_lang"]
        lines.append(f"| {name} | " + " | ".join(f"{per[x]['ndcg_at_1']:.1f}" for x in langs) + " |")
    return "\n".join(lines)


def training_summary(model_dir) -> dict:
    """What an ablation row needs from a trained model's ``training_args.json`` / ``history.json``."""

    a = model_folder.read_training_args(model_dir)
    if a is None:
        return {}
    history = model_folder.read_history(model_dir)
    steps = len(history) if history is not None else None
    out = {k: a.get(k) for k in ("stage", "objective", "lambda_lc", "teacher", "batch_size", "lr", "max_length")}
    return {**out, "steps": steps, "instances": a.get("n_instances"), "train_seconds": a.get("train_seconds")}


def markdown_ablation(results: dict[str, dict], runs: dict[str, dict]) -> str:
    """The ablation table: per model, what it was trained with and its headline scores."""
    lines = [
        "| model | training | oracle nDCG@1 | oracle nDCG@1 worst lang | retrieved nDCG@1 | retrieved nDCG@10 "
        "| Mono-Same nDCG@10 | steps x batch | train min |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        run = runs.get(name, {})
        if not run:
            how, budget, minutes = "-", "-", "-"
        elif run["stage"] == 1:
            how, budget = f"stage 1 (teacher `{run['teacher']}`)", f"{run['steps']} x {run['batch_size']}"
            minutes = f"{run['train_seconds'] / 60:.1f}"
        else:
            obj = {
                "full": "L_rank + {l} L_LC",
                "no-lc": "L_rank only (w/o L_LC)",
                "no-rank": "{l} L_LC only (w/o L_rank)",
            }
            how = "stage 1 + 2: " + obj[run["objective"]].format(l=run["lambda_lc"])
            budget, minutes = f"{run['steps']} x {run['batch_size']} groups", f"{run['train_seconds'] / 60:.1f}"
        per = r["oracle"]["per_lang"]
        worst = min(per, key=lambda x: per[x]["ndcg_at_1"])
        scores = [r["oracle"]["ndcg_at_1"], r["retrieved"]["ndcg_at_1"], r["retrieved"]["ndcg_at_10"]]
        scores.append(r["mono_same"]["ndcg_at_10"])
        cells = [name, how, f"{scores[0]:.2f}", f"{per[worst]['ndcg_at_1']:.2f} ({worst})"]
        lines.append("| " + " | ".join(cells + [f"{s:.2f}" for s in scores[1:]] + [budget, minutes]) + " |")
    return "\n".join(lines)


def heatmap_png(result: dict, title: str) -> bytes:
    """The top-1 document-language matrix (rows: query language, columns: document language) as PNG."""

    import matplotlib  # deferred: keeps matplotlib out of start-up

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred: keeps matplotlib out of start-up

    m = result["oracle"]["top1_matrix"]
    data = np.array(m["percent"])
    fig, ax = plt.subplots(figsize=(7, 6), dpi=110)
    im = ax.imshow(data, cmap="Blues", vmin=0, vmax=100)
    ax.set_xticks(range(len(m["cols"])), m["cols"])
    ax.set_yticks(range(len(m["rows"])), m["rows"])
    ax.set_xlabel("language of the top-1 document")
    ax.set_ylabel("query language")
    ax.set_title(title)
    for i in range(data.shape[0]):
        for j in range(data.shape[1]):
            if data[i, j] >= 0.5:
                ax.text(j, i, f"{data[i, j]:.0f}", ha="center", va="center", fontsize=7,
                        color="white" if data[i, j] > 60 else "black")  # fmt: skip
    fig.colorbar(im, ax=ax, label="% of queries")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


# ----------------------------------------------------------------------------- the command's object
def score_identity(reranker, max_length: int = 256) -> str:
    """The cache key of a cross-encoder's scores: its weights' fingerprint, the truncation
    length and (past fp32) its precision. One definition for every evaluation that caches
    scores, so that a stale score is never reused and an equal one always is."""
    identity = f"{reranker.fingerprint}|max_length={max_length}"
    tag = reranker.cache_tag  # int8: with its quantisation recipe
    return identity if tag == "fp32" else f"{identity}|{tag}"


class RerankerEvalOptions(EvalOptions):
    """Options of ``samelang eval reranker``."""

    model: PathList = Field(
        default_factory=list,
        description="Cross-encoder folder(s); repeat to compare (e.g. the ablations). Default: the served one, "
        "else LAMAR.",
    )
    retriever: Path | None = Field(
        None, description="Bi-encoder giving the top-20 candidates (default: the served one)."
    )
    reference: bool = Field(True, description="Add the no-reranker row (the retriever's cosine as the score).")
    cosine: StrList = Field(
        default_factory=list,
        description="Also score by this bi-encoder's cosine (a folder, or 'base': the converted base model, the "
        "default stage-1 teacher); repeatable.",
    )
    max_questions: int | None = Field(None, ge=1, description="First N test questions per language; all: 374.")
    max_length: int = Field(256, ge=16, le=512, description="Cross-encoder truncation (tokens per pair).")
    precision: Literal["fp32", "int8", "bf16", "fp16"] = Field("fp32", description="Cross-encoder precision.")
    cache: bool = Field(True, description="Reuse cross-encoder scores kept in $SAMELANG_HOME/cache.")
    out: Path = Field(Path("runs/eval-reranker"), description="Folder for results.json, results.md and PNGs.")
    card: bool = Field(False, description="Write the table and eval_results.json into each model's folder.")


class RerankerEvaluation:
    """Oracle language coherence, reranking of retrieved top-20 and Mono-Same for each
    cross-encoder folder (and the reference cosine rows); with several folders, also the ablation
    table (each model's training settings beside its scores)."""

    def __init__(self, options: RerankerEvalOptions):
        self.options, self.cfg = options, settings(home=options.home)
        self.models = list(options.model) or [m for m in [default_cross_encoder()] if m is not None]
        if not self.models:
            raise ValueError("no reranker in models/: train one (`samelang train reranker`) or pass --model")
        self.retriever = Path(options.retriever or default_weights(self.cfg.home))

    def _embeddings(self, path: Path) -> Embeddings:
        return embed_xquad(Encoder(path, device=self.cfg.torch_device(), home=self.cfg.home), self.cfg.home / "cache")

    def scorer(self, reranker, texts: Texts) -> Scorer:
        """The cross-encoder's scorer, cached on disk under :func:`score_identity` unless ``--no-cache``."""
        scorer = cross_encoder_scorer(reranker, texts)
        if not self.options.cache:
            return scorer
        return cached_scorer(scorer, self.cfg.home / "cache", score_identity(reranker, self.options.max_length))

    def evaluate(self) -> tuple[dict, dict]:
        o, emb, results, runs = self.options, self._embeddings(self.retriever), {}, {}
        if o.reference:
            name = f"no reranker ({self.retriever.name} cosine)"
            results[name] = evaluate_reranker(cosine_scorer(emb), emb, o.max_questions)
        for other in o.cosine:
            path = ensure_base_model(self.cfg.home) if other == "base" else Path(other)
            results[f"{path.name} cosine"] = evaluate_reranker(
                cosine_scorer(self._embeddings(path)), emb, o.max_questions
            )
        texts = load_texts()
        for path in self.models:
            reranker = CrossEncoderReranker(
                path, device=self.cfg.torch_device(), max_length=o.max_length, home=self.cfg.home,
                options=EngineOptions(precision=o.precision),
            )  # fmt: skip
            results[Path(path).name] = evaluate_reranker(self.scorer(reranker, texts), emb, o.max_questions)
            runs[Path(path).name] = training_summary(Path(path))
            del reranker
        return results, runs

    def run(self) -> Report:
        results, runs = self.evaluate()
        table = markdown(results)
        if len(self.models) > 1:
            table = markdown_ablation(results, runs) + "\n\n" + table
        data = {
            "retriever": str(self.retriever),
            "max_length": self.options.max_length,
            "runs": runs,
            "results": results,
        }
        figures = {f"top1-languages-{_slug(name)}.png": heatmap_png(r, name) for name, r in results.items()}
        report = Report(table, data, figures)
        report.write(self.options.out)
        if self.options.card:
            self.write_cards(results, table)
        return report

    def write_cards(self, results: dict, table: str) -> None:
        """The table into each model's card and its numbers (with the reference row) into
        ``eval_results.json`` (what the score regressions pin)."""
        for path in self.models:
            write_card_section(Path(path), EVAL_HEADING, f"Retriever: `{self.retriever.name}`.\n\n{table}\n")
            name = Path(path).name
            scores = {k: v for k, v in results.items() if k == name or k.startswith("no reranker")}
            atomic_write_text(Path(path) / EVAL_RESULTS, json.dumps(scores, indent=2) + "\n")


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
