"""``samelang adapt --index DIR``: fit the served bi-encoder to a user's own collection, with no labels.

Why: out of domain the trained models barely beat the base model (TyDi QA: the served default 79.5 found@1
against the base model's 80.6), yet every collection holds what seed 000's objective needs
(:mod:`.adapt_data`). Steps, each kept in the output folder so that a re-run resumes where one stopped:
mine the data (translations, inverse cloze queries, the served retriever's wrong hits), train
(``train biencoder --init``: ``nce_data`` and ``jsd_data`` on the collection, beside the seed's triplets
unless ``--no-general``) within ``--minutes``, measure before and after, and only then write the index's
new generation, which a running server swaps in with the model (:mod:`samelang.service.api.reload`).

The adapted model serves only if the held-out slice's cross-language found@1 improves and no XQuAD dev
shape of the judge (train articles held out of every training run) drops by more than ``GUARD_POINTS``:
adaptation must not trade general quality for the collection. Otherwise it says so and changes nothing.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from samelang.core import model_folder
from samelang.core.catalogue import model_parts, open_encoder, resolve_model, served_defaults
from samelang.core.models.fused import FusionConfig, is_fused_folder, write_calibration
from samelang.core.settings import default_home
from samelang.corpora import dev_articles
from samelang.corpora.records import Document
from samelang.evaluation.collection_shapes import ShapeJudge
from samelang.evaluation.judge import DEV_ARTICLES
from samelang.evaluation.serving_rule import PRIMARY, ShapeRow
from samelang.indexes.index import open_index
from samelang.indexes.reembed import reembed_index
from samelang.indexes.writes import build_index
from samelang.primitives.atomic import atomic_write_text
from samelang.training import adapt_data as D
from samelang.training.biencoder import BiencoderArgs, train_biencoder
from samelang.training.data import AlignPair
from samelang.training.mining import search_ids
from samelang.training.relevance_first import RankingGroup

GUARD_POINTS = 1.0  # the most an XQuAD dev shape's primary metric may drop
DATA_VERSION = "adapt-data-v1"


class AdaptOptions(BaseSettings):
    """Options of ``samelang adapt`` (``SAMELANG_ADAPT_<NAME>``)."""

    model_config = SettingsConfigDict(env_prefix="SAMELANG_ADAPT_", extra="ignore", env_ignore_empty=True,
                                      validate_by_name=True)  # fmt: skip

    index: Path = Field(description="The index to adapt to (a folder of `samelang index build`).")
    model: str = Field(
        "served", description="The bi-encoder the index was built with: served (models/serving.json's) or a folder."
    )
    lexical_weight: float | None = Field(None, ge=0, description="BM25 weight of the searches (default: the served).")
    out: Path | None = Field(None, description="The adapted model's folder (default: $SAMELANG_HOME/adapted/<index>).")
    minutes: float = Field(30.0, gt=0, description="Training time budget (mining, re-embedding and the guard on top).")
    max_steps: int = Field(300, ge=1, description="Training steps at most (the learning-rate schedule's length).")
    batch_size: int = Field(16, ge=2, description="Queries (and translation pairs) per step.")
    negatives: int = Field(3, ge=1, description="Mined wrong passages per query.")
    lr: float = Field(1e-4, gt=0, description="Peak learning rate.")
    max_length: int = Field(256, ge=16, le=512, description="Tokens per text in training (longer ones truncated).")
    general: bool = Field(
        True, description="Also the seed's XQuAD train triplets each step (keeps what the model knows in general)."
    )
    per_lang: int = Field(64, ge=1, description="With --general: XQuAD triplets per language.")
    dev_share: float = Field(0.05, gt=0, lt=0.5, description="Share of the documents held out for the dev metric.")
    guard: Literal["dev", "tiny", "off"] = Field(
        "dev", description="dev: the judge's XQuAD dev shapes before and after; tiny: a few paragraphs (tests); off."
    )
    apply: bool = Field(True, description="Write the new generation when the adapted model wins (off: measure only).")
    seed: int = Field(0, description="Seed of the held-out slice, the queries and training.")
    home: Path = Field(default_factory=default_home, validation_alias="SAMELANG_HOME",
                       description="Cache of converted models (default ~/.cache/samelang).")  # fmt: skip

    def output(self) -> Path:
        return self.out or self.home / "adapted" / Path(self.index).resolve().name

    def served_model(self) -> Path:
        return resolve_model(served_defaults().retriever if self.model == "served" else self.model, self.home)

    def weight(self) -> float:
        if self.lexical_weight is not None:
            return self.lexical_weight
        return served_defaults().lexical_weight if self.model == "served" else 0.0


class Adaptation:
    """One ``samelang adapt`` run over its output folder (``work/`` keeps the mined data and checkpoints)."""

    def __init__(self, opts: AdaptOptions, log=print):
        self.opts, self.log = opts, log
        self.out = opts.output()
        self.work = self.out / "work"
        self.model = opts.served_model()
        self.encoder = open_encoder(self.model, home=opts.home)
        self.t0 = time.perf_counter()
        self.seconds: dict[str, float] = {}

    def _timed(self, name: str, t: float) -> None:
        self.seconds[name] = round(time.perf_counter() - t, 1)

    # -- 1. data ------------------------------------------------------------------------------
    def mine(self) -> dict:
        """The collection's training data and held-out queries, mined once (``work/data.json``)."""
        index = open_index(self.opts.index, self.encoder.info)
        cache = self.work / "data.json"
        ident = [DATA_VERSION, *index.identity, self.encoder.info.fingerprint, self.opts.seed, self.opts.dev_share,
                 self.opts.negatives, self.opts.weight()]  # fmt: skip
        if cache.is_file() and (data := json.loads(cache.read_text()))["ident"] == ident:
            index.close()
            self.log(f"mined data: {cache} (kept from an earlier run)")
            return data
        t = time.perf_counter()
        try:
            docs = D.read_documents(index)
            stored = index.vectors([d.row for d in docs])
            vecs = stored if stored is not None else self.encoder.encode_passages([d.text for d in docs], True)
            cross = self.encoder.halves(vecs)[1] if self.encoder.capabilities.fused else vecs
            trans = D.translations(docs, cross)
            dev = D.held_out(docs, self.opts.dev_share, self.opts.seed)
            train_q = D.cloze_queries(docs, trans, {d.row for d in docs} - dev, self.opts.seed)
            dev_q = [q for q in D.cloze_queries(docs, trans, dev, self.opts.seed) if q.id.endswith("-cross")]
            self.log(f"{len(docs)} documents, {sum(len(v) for v in trans.values()) // 2} translation links, "
                     f"{len(train_q)} training queries, {len(dev_q)} held-out cross-language queries")  # fmt: skip
            lists = self._rows(index, search_ids(index, self.encoder, self.opts.weight(), train_q, desc="mining"))
            groups = D.ranking_groups(train_q, lists, docs, trans, self.opts.negatives)
            train_rows = {d.row for d in docs} - dev
            pairs = D.translation_pairs(docs, trans, train_rows)
            dev_ids = search_ids(index, self.encoder, self.opts.weight(), dev_q, desc="dev (before)")
            before = D.dev_metrics(dev_q, self._rows(index, dev_ids), trans)
        finally:
            index.close()
        self._timed("mining", t)
        data = {"ident": ident, "generation": index.generation, "documents": len(docs),
                "translation_links": sum(len(v) for v in trans.values()) // 2,
                "trans": {str(k): v for k, v in trans.items()}, "dev_queries": [asdict(q) for q in dev_q],
                "groups": [asdict(g) for g in groups], "pairs": [asdict(p) for p in pairs], "before": before,
                "mining_seconds": self.seconds["mining"]}  # fmt: skip
        self.work.mkdir(parents=True, exist_ok=True)
        atomic_write_text(cache, json.dumps(data, ensure_ascii=False))
        return data

    @staticmethod
    def _rows(index, id_lists: list[list[str]]) -> list[list[int]]:
        at = index.docs.rows_for_ids(sorted({i for ids in id_lists for i in ids}))
        return [[at[i] for i in ids] for ids in id_lists]

    # -- 2. training ----------------------------------------------------------------------------
    def target(self) -> tuple[Path, bool]:
        """The model trained (a fused retriever's cross-language part) and whether a fused folder wraps it."""
        if not is_fused_folder(self.model):
            return self.model, False
        return model_parts(self.model, self.opts.home)[1], True

    def train(self, data: dict) -> Path:
        target, _ = self.target()
        out = self.work / "encoder"
        if (out / model_folder.TRAINING_ARGS).exists() and not (out / "checkpoints").exists():
            self.log(f"adapted encoder: {out} (trained by an earlier run)")
            return out
        adapter = model_folder.is_adapter(target)
        args = BiencoderArgs(
            out=out, init=str(target) if adapter else None, base=None if adapter else str(target),
            per_lang=self.opts.per_lang, batch_size=self.opts.batch_size, lr=self.opts.lr, seed=self.opts.seed,
            max_steps=self.opts.max_steps, max_minutes=self.opts.minutes, save_every=10, eval_every=10**9,
            max_length=self.opts.max_length,
            lora_dropout=0.0, home=self.opts.home,
        )  # fmt: skip
        groups = [RankingGroup(**{k: tuple(v) if isinstance(v, list) else v for k, v in g.items()})
                  for g in data["groups"]]  # fmt: skip
        pairs = [AlignPair(**p) for p in data["pairs"]]
        t = time.perf_counter()
        train_biencoder(args, log=self.log, given=(groups, pairs, not self.opts.general))
        self._timed("training", t)
        return out

    def adapted_folder(self, encoder_dir: Path) -> Path:
        """The model to serve: the adapted encoder, or a fused folder (``out``) around it, calibrated."""
        _, fused = self.target()
        if not fused:
            return encoder_dir
        cfg = FusionConfig.read(self.model)
        same, cross = model_parts(self.model, self.opts.home)
        adapted = str(encoder_dir.resolve())
        parts = {"cross": adapted, "same": adapted if same == cross else str(same)}
        FusionConfig(**{**asdict(cfg), **parts}).write(self.out, {"adapted_from": str(self.model)})
        write_calibration(open_encoder(self.out, home=self.opts.home))
        return self.out

    # -- 3. after -----------------------------------------------------------------------------
    def measure_after(self, data: dict, model_dir: Path) -> tuple[np.ndarray, dict, object]:
        """The collection embedded by the adapted model (one vector a live row), and the held-out metric on a
        scratch index of it (the live index untouched)."""
        enc = open_encoder(model_dir, home=self.opts.home)
        index = open_index(self.opts.index, self.encoder.info)
        try:
            docs = D.read_documents(index)
            t = time.perf_counter()
            vecs = embed_after(self.encoder, enc, index, docs)
            self._timed("re-embedding", t)
        finally:
            index.close()
        scratch = self.work / "index"
        by_text = {}
        for d, v in zip(docs, vecs, strict=True):
            by_text.setdefault(d.text, v)
        build_index(scratch, [Document(d.id, d.text, d.lang, d.group) for d in docs],
                    lambda texts: np.stack([by_text[x] for x in texts]), enc.info, analyzer=enc.analyzer)  # fmt: skip
        trans = {int(k): v for k, v in data["trans"].items()}
        dev_q = [D.ClozeQuery(**q) for q in data["dev_queries"]]
        live_row = {d.id: d.row for d in docs}
        idx = open_index(scratch, enc.info)
        try:
            ids = search_ids(idx, enc, self.opts.weight(), dev_q, desc="dev (after)")
        finally:
            idx.close()
        after = D.dev_metrics(dev_q, [[live_row[i] for i in row] for row in ids], trans)
        return vecs, after, enc

    def guard(self, model_dir: Path) -> dict:
        """Each XQuAD dev shape's primary metric, served model and adapted, through the judge."""
        if self.opts.guard == "off":
            return {}
        tiny = {"max_paragraphs": 4, "max_questions": 3, "latency_per_lang": 1} if self.opts.guard == "tiny" else {}
        judge = ShapeJudge(self.opts.home, split="train", articles=None if tiny else dev_articles(DEV_ARTICLES),
                           log=self.log, memo=False, **tiny)  # fmt: skip
        out = {}
        for name, path in (("before", self.model), ("after", model_dir)):
            res = judge.evaluate(ShapeRow(str(path), self.opts.weight(), "groups"))
            out[name] = {s: round(res[s][PRIMARY[s]]["mean"], 2) for s in res}
        return out

    # -- the run ------------------------------------------------------------------------------
    def run(self) -> dict:
        data = self.mine()
        encoder_dir = self.train(data)
        model_dir = self.adapted_folder(encoder_dir)
        vecs, after, enc = self.measure_after(data, model_dir)
        t = time.perf_counter()
        guard = self.guard(model_dir)
        self._timed("guard", t)
        verdict = decide(data["before"], after, guard)
        report = {"index": str(Path(self.opts.index).resolve()), "model": str(self.model), "adapted": str(model_dir),
                  "documents": data["documents"], "translation_links": data["translation_links"],
                  "training_groups": len(data["groups"]), "translation_pairs": len(data["pairs"]),
                  "dev": {"before": data["before"], "after": after}, "guard": guard, "verdict": verdict,
                  "seconds": {"mining": data["mining_seconds"], **self.seconds,
                              "total": round(time.perf_counter() - self.t0, 1)}}  # fmt: skip
        if verdict["serve"] and self.opts.apply:
            note = {"model": str(model_dir.resolve()), "from": self.encoder.info.fingerprint,
                    "dev": after, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
            manifest = reembed_index(self.opts.index, vecs, enc.info, data["generation"], note, enc.analyzer)
            report["generation"] = manifest["generation"]
        atomic_write_text(self.out / "adapt.json", json.dumps(report, indent=2, ensure_ascii=False))
        atomic_write_text(self.out / "README.md", card(report, self.opts))
        shutil.rmtree(self.work / "index", ignore_errors=True)
        return report


def embed_after(served, adapted, index, docs) -> np.ndarray:
    """The collection's vectors under the ``adapted`` model. A fused retriever's reader's-language half is not
    trained (:meth:`Adaptation.target`): when both models share it and the index gives its stored vectors back,
    that half is kept and only the cross-language half is embedded again (half the time: both halves of TyDi's
    5,414 passages took 415 s on 2 cores)."""
    texts = [d.text for d in docs]
    same = getattr(served, "same", None)
    if same is None or adapted.one_model or adapted.same.fingerprint != same.fingerprint:
        return adapted.encode_passages(texts, progress=True)
    stored = index.vectors([d.row for d in docs])
    if stored is None:
        return adapted.encode_passages(texts, progress=True)
    return adapted.join(served.halves(stored)[0], adapted.cross.encode_passages(texts, progress=True))


def decide(before: dict, after: dict, guard: dict) -> dict:
    """Serve the adapted model only if the held-out found@1 improves and no dev shape drops more than
    ``GUARD_POINTS``; the reason either way."""
    gain = after.get("found_at_1", 0.0) - before.get("found_at_1", 0.0)
    drops = {s: round(guard["before"][s] - guard["after"][s], 2) for s in guard.get("before", {})}
    worst = max(drops.items(), key=lambda kv: kv[1], default=(None, 0.0))
    if after.get("queries", 0) == 0:
        return {"serve": False, "why": "no held-out cross-language query: nothing shows the adaptation helps"}
    if gain <= 0:
        return {"serve": False, "why": f"held-out found@1 did not improve ({gain:+.1f} points)"}
    if worst[1] > GUARD_POINTS:
        return {"serve": False, "why": f"the XQuAD dev shape {worst[0]} dropped {worst[1]:.1f} points"}
    return {"serve": True, "why": f"held-out found@1 {gain:+.1f} points; no dev shape dropped over {GUARD_POINTS:g}"}


def card(report: dict, opts: AdaptOptions) -> str:
    """The adapted model's card: source, counts, losses, time, before and after, the decision."""
    dev, guard, s = report["dev"], report["guard"], report["seconds"]
    lines = [f"# {Path(report['adapted']).name}: adapted to `{report['index']}`", "",
             f"`{report['model']}` fine-tuned on the collection itself, no labels (`samelang adapt`): "
             f"{report['documents']:,} documents, {report['translation_links']:,} translation links found "
             f"(margin >= {D.MARGIN}), {report['training_groups']:,} inverse-cloze queries with mined negatives "
             f"(`nce_data`), {report['translation_pairs']:,} translation pairs (`jsd_data`)"
             + (", and the seed's XQuAD train triplets" if opts.general else "") + ".", "",
             "| held-out cross-language queries | found@1 | MRR@10 | queries |", "|---|---|---|---|"]  # fmt: skip
    for name in ("before", "after"):
        d = dev[name]
        lines.append(f"| {name} | {d.get('found_at_1', 0):.1f} | {d.get('mrr_at_10', 0):.1f} | {d['queries']} |")
    if guard:
        shapes = list(guard["before"])
        lines += ["", "| XQuAD dev shapes (judge) | " + " | ".join(shapes) + " |", "|---" * (len(shapes) + 1) + "|"]
        lines += [f"| {n} | " + " | ".join(f"{guard[n][x]:.1f}" for x in shapes) + " |" for n in ("before", "after")]
    verdict = report["verdict"]
    lines += ["", f"**{'Served' if verdict['serve'] else 'Not served'}**: {verdict['why']}."
              + (f" Index generation {report['generation']}." if "generation" in report else ""), "",
              "Time (s): " + ", ".join(f"{k} {v:g}" for k, v in s.items()) + ".", "",
              f"Command: `samelang adapt --index {report['index']} --minutes {opts.minutes:g} --max-steps "
              f"{opts.max_steps}`"]  # fmt: skip
    return "\n".join(lines) + "\n"
