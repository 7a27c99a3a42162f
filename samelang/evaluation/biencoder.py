"""Bilingual multi-reference evaluation of a bi-encoder (seed 000), on XQuAD.

Queries: the 374 questions of the held-out **test** articles per language.
Pools: all 240 paragraphs per language (every article, as the seed's protocol).

* Multi (per target t, query language en or t): pool = en + t paragraphs (480),
  relevant = both versions of the gold paragraph; Comp@10, Max@R, Max@R_norm.
  The En/target gap of a pair is |Max@R_norm(en queries) - Max@R_norm(t queries)|.
* Mono-Same: pool = the query's own language (240), relevant = its gold paragraph; nDCG@10.
* Mono-Cross: English queries over each target pool and target queries over the
  English pool (240), relevant = the gold paragraph in the pool's language; nDCG@10.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field
from tqdm.auto import tqdm

from samelang.core import metrics as M
from samelang.core.model_folder import EVAL_RESULTS, write_card_section
from samelang.core.models.base_model import ensure_base_model
from samelang.core.models.encoder import Encoder
from samelang.core.models.model_card import DATA_AND_LICENCES, EVAL_HEADING
from samelang.core.options import PathList
from samelang.core.runtime.precision import EngineOptions
from samelang.core.settings import settings
from samelang.corpora import XQUAD_LANGS, load_xquad
from samelang.evaluation.common import EvalOptions, Report
from samelang.primitives.atomic import atomic_write_bytes, atomic_write_text

TARGETS = tuple(x for x in XQUAD_LANGS if x != "en")


@dataclass
class Embeddings:
    passages: dict[str, np.ndarray]  # lang -> (240, d), file order
    queries: dict[str, np.ndarray]  # lang -> (374, d), test questions
    gold: np.ndarray  # (374,) paragraph index of each test question (same in every language)


def embed_xquad(encoder, cache_dir: Path | None = None, langs=XQUAD_LANGS, split: str = "test") -> Embeddings:
    """Embed every paragraph and every question of ``split``'s articles (cached by the model's
    fingerprint and, past fp32, its precision and quantisation recipe). ``split="train"`` is for
    choices (precision, fusion weights): the test articles judge, they never select."""
    precision = encoder.cache_tag
    tag = ("" if precision == "fp32" else f":{precision}") + ("" if split == "test" else f":{split}")
    key = hashlib.sha256(f"{encoder.fingerprint}:{','.join(langs)}:v1{tag}".encode()).hexdigest()[:20]
    cache = Path(cache_dir) / f"xquad-emb-{key}.npz" if cache_dir else None
    index_of = {p.group: i for i, p in enumerate(load_xquad(["en"]).paragraphs)}
    gold = np.array([index_of[q.group] for q in load_xquad(["en"], split=split).questions])
    if cache and cache.exists():
        z = np.load(cache)
        return Embeddings({x: z[f"p_{x}"] for x in langs}, {x: z[f"q_{x}"] for x in langs}, gold)

    P, Q = {}, {}
    for lang in tqdm(langs, desc="embedding XQuAD", unit="lang"):
        full = load_xquad([lang])
        P[lang] = encoder.encode_passages([p.text for p in full.paragraphs])
        Q[lang] = encoder.encode_queries([q.text for q in load_xquad([lang], split=split).questions])
    if cache:
        buf = io.BytesIO()
        np.savez(buf, **{f"p_{x}": v for x, v in P.items()}, **{f"q_{x}": v for x, v in Q.items()})
        atomic_write_bytes(cache, buf.getvalue())
    return Embeddings(P, Q, gold)


def _multi(emb: Embeddings, tgt: str, qlang: str) -> dict:
    pool = np.concatenate([emb.passages["en"], emb.passages[tgt]])
    n = len(emb.passages["en"])
    S = emb.queries[qlang] @ pool.T
    R = np.zeros_like(S)
    rows = np.arange(len(S))
    R[rows, emb.gold] = 1
    R[rows, n + emb.gold] = 1
    max_r = M.max_at_r(S, R)
    return {
        "comp_at_10": 100 * float(M.comp_at_k(S, R, 10).mean()),
        "max_r": float(max_r.mean()),
        "max_r_norm": float(M.max_at_r_norm(max_r, pool.shape[0], 2).mean()),
    }


def _ndcg(qv: np.ndarray, pool: np.ndarray, gold: np.ndarray) -> float:
    S = qv @ pool.T
    R = np.zeros_like(S)
    R[np.arange(len(S)), gold] = 1
    return 100 * float(M.ndcg_at_k(S, R, 10).mean())


def evaluate(emb: Embeddings) -> dict:
    multi = {}
    for t in TARGETS:
        if t not in emb.passages:
            continue
        for ql in ("en", t):
            multi[f"en+{t}|{ql}"] = _multi(emb, t, ql)
    gaps = {
        t: M.language_gap(multi[f"en+{t}|en"]["max_r_norm"], multi[f"en+{t}|{t}"]["max_r_norm"])
        for t in TARGETS
        if f"en+{t}|en" in multi
    }
    mono_same = {x: _ndcg(emb.queries[x], emb.passages[x], emb.gold) for x in emb.passages}
    mono_cross = {}
    for t in TARGETS:
        if t in emb.passages:
            mono_cross[f"en->{t}"] = _ndcg(emb.queries["en"], emb.passages[t], emb.gold)
            mono_cross[f"{t}->en"] = _ndcg(emb.queries[t], emb.passages["en"], emb.gold)
    avg = {m: float(np.mean([v[m] for v in multi.values()])) for m in ("comp_at_10", "max_r", "max_r_norm")}
    worst = min(multi, key=lambda k: multi[k]["max_r_norm"])
    return {
        "multi": multi,
        "multi_average": avg,
        "worst_setting": {"setting": worst, **multi[worst]},
        "en_target_gap_max_r_norm": gaps,
        "largest_gap": {"pair": max(gaps, key=gaps.get), "gap": max(gaps.values())} if gaps else None,
        "mono_same_ndcg10": mono_same,
        "mono_same_ndcg10_avg": float(np.mean(list(mono_same.values()))),
        "mono_cross_ndcg10": mono_cross,
        "mono_cross_ndcg10_avg": float(np.mean(list(mono_cross.values()))) if mono_cross else None,
    }


def markdown(results: dict[str, dict]) -> str:
    """Side-by-side tables for several models (name -> ``evaluate`` output)."""
    names = list(results)
    lines = [
        "| setting (pool \\| query lang) | " + " | ".join(f"{n} Comp@10 / Max@R / Max@R_norm" for n in names) + " |"
    ]
    lines.append("|---|" + "---|" * len(names))
    for key in next(iter(results.values()))["multi"]:
        cells = []
        for r in results.values():
            m = r["multi"][key]
            cells.append(f"{m['comp_at_10']:.2f} / {m['max_r']:.2f} / {m['max_r_norm']:.2f}")
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    avg = [
        f"**{r['multi_average']['comp_at_10']:.2f} / {r['multi_average']['max_r']:.2f} / "
        f"{r['multi_average']['max_r_norm']:.2f}**"
        for r in results.values()
    ]
    lines.append("| **average (22 settings)** | " + " | ".join(avg) + " |")
    lines += ["", "| summary | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    rows = [
        (
            "worst setting Max@R_norm",
            lambda r: f"{r['worst_setting']['max_r_norm']:.2f} ({r['worst_setting']['setting']})",
        ),
        ("largest En/target gap (Max@R_norm)", lambda r: f"{r['largest_gap']['gap']:.2f} ({r['largest_gap']['pair']})"),
        ("Mono-Same nDCG@10 (avg 12 langs)", lambda r: f"{r['mono_same_ndcg10_avg']:.2f}"),
        ("Mono-Cross nDCG@10 (avg en<->t)", lambda r: f"{r['mono_cross_ndcg10_avg']:.2f}"),
    ]
    for label, fn in rows:
        lines.append(f"| {label} | " + " | ".join(fn(r) for r in results.values()) + " |")
    return "\n".join(lines)


ABLATION_LABELS = {
    "jsd+nce": "L_JSD + L_NCE (ours)",
    "nce": "w/o L_JSD (L_NCE only)",
    "jsd": "w/o L_NCE (L_JSD only)",
    "nce-psg": "L_NCEpsg (p_en <-> p_tgt)",
}


def markdown_ablation(results: dict[str, dict], runs: dict[str, dict] | None = None) -> str:
    """One row per loss setting (name -> ``evaluate`` output); ``runs`` adds each run's budget."""
    runs = runs or {}
    lines = [
        "| loss setting | Comp@10 | Max@R | Max@R_norm | worst Max@R_norm | largest gap | Mono-Same nDCG@10 "
        "| Mono-Cross nDCG@10 | steps x batch | train min |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        a, info = r["multi_average"], runs.get(name, {})
        budget = f"{info['steps']} x {info['batch_size']}" if info else "-"
        minutes = f"{info['train_seconds'] / 60:.1f}" if info else "-"
        lines.append(
            f"| {ABLATION_LABELS.get(name, name)} | {a['comp_at_10']:.2f} | {a['max_r']:.2f} | {a['max_r_norm']:.2f} "
            f"| {r['worst_setting']['max_r_norm']:.2f} | {r['largest_gap']['gap']:.2f} "
            f"| {r['mono_same_ndcg10_avg']:.2f} | {r['mono_cross_ndcg10_avg']:.2f} | {budget} | {minutes} |"
        )
    return "\n".join(lines)


def save(results: dict, path: Path) -> None:
    atomic_write_bytes(path, json.dumps(results, indent=2).encode())


# ----------------------------------------------------------------------------- the command's object


class BiencoderEvalOptions(EvalOptions):
    """Options of ``samelang eval biencoder``."""

    model: PathList = Field(default_factory=list, description="Model folder(s); repeat to compare.")
    base: bool = Field(True, description="Include the base model as the reference column.")
    out: Path = Field(Path("runs/eval-biencoder"), description="Folder for results.json and results.md.")
    card: bool = Field(False, description="Write the table and eval_results.json into each model's folder.")
    precision: Literal["fp32", "int8", "bf16"] = Field("fp32", description="Encoder precision (fp32: reference).")


class BiencoderEvaluation:
    """Multi (Comp@10, Max@R, Max@R_norm), Mono-Same and Mono-Cross of the base model and each
    model folder; owns the table, the results folder and the model cards' section."""

    def __init__(self, options: BiencoderEvalOptions):
        self.options = options
        self.cfg = settings(home=options.home)

    def evaluate(self, models: list[Path], names: list[str] | None = None) -> dict[str, dict]:
        """:func:`evaluate` for the base model (when ``options.base``) and each folder, in order."""

        paths = ([ensure_base_model(self.cfg.home)] if self.options.base else []) + list(models)
        names = (["base"] if self.options.base else []) + (names or [Path(m).name for m in models])
        results = {}
        for name, path in zip(names, paths, strict=True):
            enc = Encoder(
                path, device=self.cfg.torch_device(), home=self.cfg.home,
                options=EngineOptions(precision=self.options.precision),
            )  # fmt: skip
            results[name] = evaluate(embed_xquad(enc, self.cfg.home / "cache"))
            del enc
        return results

    def run(self) -> Report:
        results = self.evaluate(self.options.model)
        report = Report(markdown(results), results)
        report.write(self.options.out)
        if self.options.card:
            self.write_cards(results)
        return report

    def write_cards(self, results: dict[str, dict]) -> None:
        """The table into each model's card and its numbers into ``eval_results.json`` (what the
        score regressions in ``tests/regressions`` pin)."""
        table = markdown(results)
        for path in self.options.model:
            write_card_section(Path(path), EVAL_HEADING, f"{table}\n\n{DATA_AND_LICENCES}\n")
            name = Path(path).name
            scores = {k: results[k] for k in ("base", name) if k in results}
            atomic_write_text(Path(path) / EVAL_RESULTS, json.dumps(scores, indent=2) + "\n")
