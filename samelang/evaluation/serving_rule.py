"""The serving rule over the collection shapes and what it writes: each row's primary metric per shape,
the chosen row (the best mean, never more than a point below the base model's dense row on any shape;
within ``TIE`` points the simpler row), the tables, and ``models/serving.json``."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from samelang.core.catalogue import REPO_MODELS
from samelang.corpora import XQUAD_LANGS
from samelang.primitives.atomic import atomic_write_text

SHAPES = ("parallel", "partial", "one", "mono")
PRIMARY = {"parallel": "ndcg_at_1", "partial": "found_at_1", "one": "found_at_1", "mono": "ndcg_at_10"}
TIE = 0.05  # serving rule: means within this many points are equal (then the simpler row)
# the product's promise: where the answer exists in the reader's language, that version comes first for at
# least this share (%) of partial-translation questions (reader@1); a row below it is not served
READER_FLOOR = 95.0
RERANK_K = 20  # the candidates a reranked row's cross-encoder scores (the served rerank_k)
# a row whose search the reader waits for longer than this (p50, ms, one request at a time on this CPU) is
# not served: a reranker must pay for its quality within it
LATENCY_CEILING_MS = 400.0
# a row slower than the best row that reranks nothing must beat its mean by this many points, else the faster
# row serves: a reranker that adds a point for 10x the latency has not earned its place
SLOWER_MARGIN = 2.0


@dataclass(frozen=True)
class ShapeRow:
    """One served configuration: a retriever (a model folder's name), BM25's weight, candidates, and
    the cross-encoder that reranks the first ``rerank_k`` of them (``none``: no reranking)."""

    retriever: str
    lexical: float = 0.0
    candidates: str = "groups"
    reranker: str = "none"
    rerank_k: int = RERANK_K
    fusion: float = 0.0  # the retriever's weight beside the reranker's (the served rerank_fusion)

    @property
    def name(self) -> str:
        hybrid = f" + BM25 (w={self.lexical:g})" if self.lexical else ""
        fused = f", fused w={self.fusion:g}" if self.fusion else ""
        reranked = f" -> {self.reranker} (top {self.rerank_k}{fused})" if self.reranked else ""
        return f"{self.retriever}{hybrid} -> {self.candidates}{reranked}"

    @property
    def reranked(self) -> bool:
        return self.reranker != "none"

    @property
    def unreranked(self) -> ShapeRow:
        """The retriever row this row reranks (itself when it reranks nothing)."""
        return replace(self, reranker="none", rerank_k=RERANK_K, fusion=0.0)

    @property
    def served(self) -> dict:
        return {"retriever": self.retriever, "reranker": self.reranker, "candidates": self.candidates,
                "rerank_k": self.rerank_k, "lexical_weight": self.lexical,
                "rerank_fusion": self.fusion}  # fmt: skip


def primary(result: dict, shapes=SHAPES) -> dict[str, float]:
    return {s: result[s][PRIMARY[s]]["mean"] for s in shapes}


def serving_rule(
    results: dict, baseline: ShapeRow, shapes=SHAPES, latency: dict | None = None
) -> tuple[ShapeRow, dict]:
    """The row to serve: the best mean of the shapes' primary metrics among the rows that no shape
    puts more than 1 point below ``baseline`` (the base model, dense), that keep partial
    translations' reader@1 at :data:`READER_FLOOR` or above (a row may find more answers by showing
    readers another language's version first: it is not what the product promises) and whose p50
    (``latency``: row -> ms, where measured) is within :data:`LATENCY_CEILING_MS`; means within
    :data:`TIE` points are equal, and then the simpler row wins (dense before hybrid, then fewer
    models: a fused retriever runs two, a reranker one more). A row slower than the best row that
    reranks nothing (both measured) must beat that row's mean by :data:`SLOWER_MARGIN` points, else
    it is out. Returns the row and, per row, its mean and what disqualifies it."""
    base = primary(results[baseline], shapes)
    latency = latency or {}
    verdict = {}
    for row, res in results.items():
        p = primary(res, shapes)
        below = [s for s in shapes if p[s] < base[s] - 1.0]
        reader = res.get("partial", {}).get("reader_at_1", {}).get("mean")
        floor = reader is not None and reader < READER_FLOOR
        slow = latency.get(row, 0.0) > LATENCY_CEILING_MS
        verdict[row] = {"mean": float(np.mean(list(p.values()))), "below_base": below, "reader_below_floor": floor,
                        "too_slow": slow, "slower_not_better": False}  # fmt: skip
    ok = [r for r, v in verdict.items() if not (v["below_base"] or v["reader_below_floor"] or v["too_slow"])]
    ok = ok or [baseline]
    plain = [r for r in ok if not r.reranked]
    best_plain = _best(plain, verdict) if plain else None
    if best_plain is not None and best_plain in latency:
        for r in ok:
            slower = r in latency and latency[r] > latency[best_plain]
            if slower and verdict[r]["mean"] < verdict[best_plain]["mean"] + SLOWER_MARGIN:
                verdict[r]["slower_not_better"] = True
        ok = [r for r in ok if not verdict[r]["slower_not_better"]]
    return _best(ok, verdict), verdict


def _best(rows: list[ShapeRow], verdict: dict) -> ShapeRow:
    """The best mean of ``rows``; within :data:`TIE` points the simpler row."""
    top = max(verdict[r]["mean"] for r in rows)
    tied = [r for r in rows if verdict[r]["mean"] >= top - TIE]
    return min(tied, key=lambda r: (r.lexical > 0, _models(r), -verdict[r]["mean"]))


def _models(row: ShapeRow) -> int:
    """How many models a row runs (a fused retriever's folder names two bi-encoders; a reranker is one more)."""

    return (2 if (REPO_MODELS / row.retriever / "fused.json").exists() else 1) + row.reranked


def markdown(
    results: dict,
    chosen: ShapeRow | None,
    split: str,
    http: dict | None = None,
    latency: dict | None = None,
    verdict: dict | None = None,
) -> str:
    """One table per shape (every metric with its interval), then the primary metrics side by
    side (:func:`primary_table`), then per-language tables of each shape's primary metric."""
    lines = []
    shapes = list(next(iter(results.values())))
    for shape in shapes:
        metrics = [m for m in next(iter(results.values()))[shape] if m != "seconds"]
        lines += [f"**{shape}** ({split} articles)", "", "| row | " + " | ".join(f"{m} [95% CI] (n)" for m in metrics)
                  + " |", "|---|" + "---|" * len(metrics)]  # fmt: skip
        for row, res in results.items():
            cells = [f"{res[shape][m]['mean']:.1f} [{res[shape][m]['ci95'][0]:.1f}, {res[shape][m]['ci95'][1]:.1f}]"
                     f" ({res[shape][m]['n']})" for m in metrics]  # fmt: skip
            mark = " **served**" if row == chosen else ""
            lines.append(f"| {row.name}{mark} | " + " | ".join(cells) + " |")
        if http and shape in http:
            h = http[shape]
            lines.append("| served, through HTTP `POST /search` | " + " | ".join(
                f"{h[m]['mean']:.1f} [{h[m]['ci95'][0]:.1f}, {h[m]['ci95'][1]:.1f}] ({h[m]['n']})" for m in metrics)
                + " |")  # fmt: skip
        lines.append("")
    lines += primary_table(results, chosen, latency, verdict) + [""]
    for shape in shapes:
        m = PRIMARY[shape]
        extra = ["cross_at_1"] if shape == "partial" else []
        for metric in [m, *extra]:
            lines += ["", f"{shape} {metric} per query language:", "",
                      "| row | " + " | ".join(XQUAD_LANGS) + " |", "|---|" + "---|" * len(XQUAD_LANGS)]  # fmt: skip
            for row, res in results.items():
                per = res[shape][metric]["per_lang"]
                lines.append(f"| {row.name} | " + " | ".join("-" if per[x] is None else f"{per[x]:.1f}"
                                                              for x in XQUAD_LANGS) + " |")  # fmt: skip
    return "\n".join(lines)


def primary_table(
    results: dict, chosen: ShapeRow | None, latency: dict | None = None, verdict: dict | None = None
) -> list[str]:
    """The shapes' primary metrics side by side, their mean, each row's p50 (``latency``, where
    measured) and what disqualifies it (shapes more than 1 point below the first row, the base
    model dense; reader@1 under the floor; too slow): what the serving rule reads (``verdict``:
    the rule's own, when it compared some rows on other questions; default: computed here)."""
    rows = list(results)
    shapes = list(results[rows[0]])
    latency = latency or {}
    verdict = verdict or serving_rule(results, rows[0], tuple(shapes), latency)[1]
    lines = [f"Primary metrics (the serving rule: best mean, no shape > 1 point below the base model dense, partial "
             f"reader@1 >= {READER_FLOOR:g}, p50 <= {LATENCY_CEILING_MS:g} ms, a row slower than the best unreranked "
             f"row at least {SLOWER_MARGIN:g} points above it):", "",
             "| row | " + " | ".join(f"{s} {PRIMARY[s]}" for s in shapes) + " | mean | p50 ms | not served for |",
             "|---|" + "---|" * (len(shapes) + 3)]  # fmt: skip
    for row in rows:
        p, v = primary(results[row], shapes), verdict[row]
        mark = " **served**" if row == chosen else ""
        cells = " | ".join(f"{p[s]:.1f}" for s in shapes)
        why = v["below_base"] + (["reader@1 < floor"] if v["reader_below_floor"] else [])
        why += ["p50 > ceiling"] if v["too_slow"] else []
        why += [f"slower, < {SLOWER_MARGIN:g} points better"] if v.get("slower_not_better") else []
        ms = f"{latency[row]:.0f}" if row in latency else "-"
        lines.append(f"| {row.name}{mark} | {cells} | {v['mean']:.2f} | {ms} | {', '.join(why) or '-'} |")
    return lines


def reader_table(results: dict, chosen: ShapeRow | None, mine: str | None = None) -> list[str]:
    """What a reader gets, per row, in the numbers the product promises: parallel reader-gold
    nDCG@1, partial translations' found@1 / reader@1 (the answer in the reader's language when it
    exists) / cross@1 (found when it exists only in another language) / same_language_first (then a
    wrong passage in the reader's language first; lower is better), one language each found@1 and
    same_language_first, Mono-Same nDCG@10; ``mine``: the rows of that retriever are marked (a model card's own)."""
    cols = [("parallel", "ndcg_at_1"), ("partial", "found_at_1"), ("partial", "reader_at_1"),
            ("partial", "cross_at_1"), ("partial", "same_language_first"), ("one", "found_at_1"),
            ("one", "same_language_first"), ("mono", "ndcg_at_10")]  # fmt: skip
    first = next(iter(results.values()))
    cols = [c for c in cols if c[0] in first and c[1] in first[c[0]]]  # results written before a metric existed
    lines = ["| row | " + " | ".join(f"{s} {m}" for s, m in cols) + " |", "|---|" + "---|" * len(cols)]
    for row, res in results.items():
        own = mine and mine in (row.retriever, row.reranker)
        mark = (" **served**" if row == chosen else "") + (" (this model)" if own else "")
        lines.append(f"| {row.name}{mark} | " + " | ".join(f"{res[s][m]['mean']:.1f}" for s, m in cols) + " |")
    return lines


def to_json(results: dict) -> list[dict]:
    return [{"row": r.name, **r.served, "shapes": res} for r, res in results.items()]


def strengths(results: dict, chosen: ShapeRow) -> dict[str, list[str]]:
    """What the chosen row is good and bad at, from a split's tables: each shape's primary metric
    against the best row's (within 1 point: good), and partial translations' reader@1 / cross@1."""
    mine = primary(results[chosen])
    good, bad = [], []
    for shape, value in mine.items():
        best_row = max(results, key=lambda r: primary(results[r])[shape])
        best = primary(results[best_row])[shape]
        text = f"{shape} {PRIMARY[shape]} {value:.1f}"
        if value >= best - 1.0:
            good.append(text + (f" (best of the rows: {best:.1f})" if best_row != chosen else " (best of the rows)"))
        else:
            bad.append(text + f" ({best_row.name} gets {best:.1f})")
    if "partial" in results[chosen]:
        p = results[chosen]["partial"]
        note = (f"partial translations: the reader's own version first {p['reader_at_1']['mean']:.1f}%, the answer "
                f"found first when it exists only in other languages {p['cross_at_1']['mean']:.1f}%")  # fmt: skip
        (good if p["cross_at_1"]["mean"] >= 50 else bad).append(note)
    return {"good_at": good, "bad_at": bad}


def served_entry(chosen: ShapeRow, verdict: dict) -> dict:
    """``serving.json``'s ``served``: the chosen row; when it reranks nothing, the best reranked row
    over the same retriever (by its dev mean) still names the cross-encoder, its ``rerank_k`` and
    weight, with ``"rerank": false``: ``/search`` stays fast and ``/rerank`` (or a request that asks to
    rerank) gets the measured cross-encoder, not the bi-encoder's cosine."""
    over = [r for r in verdict if r.reranked and r.unreranked == chosen]
    if chosen.reranked or not over:
        return chosen.served
    best = max(over, key=lambda r: verdict[r]["mean"])
    return {**best.served, "rerank": False}


def write_serving(
    path: Path, chosen: ShapeRow, train: dict, test: dict, verdict: dict, command: str, ood: dict | None = None
) -> None:
    """``models/serving.json``: the served row (:func:`served_entry`), the rule, and the tables behind
    it (``train``: what chose, the dev articles' questions of the train-article shapes; test: the
    report; ``ood``: the out-of-domain shape's means per row, when it ran)."""

    def table(results):
        return {r.name: {s: round(v, 2) for s, v in primary(res).items()} for r, res in results.items()}

    before = json.loads(path.read_text()) if path.exists() else {}
    kept = {k: v for k, v in before.get("served", {}).items() if k == "answer_mode"}  # samelang eval answer's
    data = {
        "served": {**served_entry(chosen, verdict), **kept},
        "rule": "best mean of the shapes' primary metrics (parallel reader-gold nDCG@1, partial found@1, one found@1, "
        "Mono-Same nDCG@10) on the train-article shapes' questions from the dev articles (held out of every "
        "training run), among rows no shape puts more than 1 point below the base "
        f"model dense and whose partial-translation reader@1 is at least {READER_FLOOR:g}; a row slower than the best "
        f"unreranked row must beat its mean by {SLOWER_MARGIN:g} points; means within {TIE} points tie to the simpler "
        "row",
        "chosen": chosen.name,
        "train": table(train),
        "train_verdict": {r.name: v for r, v in verdict.items()},
        "test": table(test),
        **strengths(test, chosen),
        **({"ood": ood} if ood else {}),
        **{k: before[k] for k in ("answer_mode_command",) if k in before},
        "command": command,
    }
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")
