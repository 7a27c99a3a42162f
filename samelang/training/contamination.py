"""``samelang data filter``: keep XQuAD out of the training corpora, by the aligned model's cosine.

Every corpus passage and every XQuAD paragraph (all 48 articles, 12 languages) is embedded with the
aligned model; a passage whose cosine to any XQuAD paragraph reaches the threshold is dropped. The
threshold is calibrated on XQuAD itself (:func:`calibrate`): each paragraph's translations must all be
caught. A document the cosine matches to one XQuAD article goes whole (:func:`whole_articles`). The
result, ``contamination.json`` in the store, is what the views read.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections import Counter

import numpy as np
from pydantic import Field
from tqdm import tqdm

from samelang.core.catalogue import resolve_model
from samelang.core.models.encoder import Encoder
from samelang.core.runtime.engine import EngineOptions
from samelang.core.settings import settings
from samelang.corpora.views import CONTAMINATION_FILE, Views, load_views
from samelang.corpora.xquad import XQUAD_LANGS, load_xquad
from samelang.evaluation.biencoder import embed_xquad
from samelang.primitives.atomic import atomic_write_text, cached_array
from samelang.training.corpus import DataOptions

START_THRESHOLD = 0.85
ARTICLE_MIN, ARTICLE_SHARE = 2, 1 / 3  # whole_articles: a document that is an XQuAD article


class DataFilterOptions(DataOptions):
    """Options of ``samelang data filter``."""

    model: str = Field("e5-small-aligned-v3", description="the aligned bi-encoder whose cosine finds XQuAD's copies")
    start_threshold: float = Field(
        START_THRESHOLD, gt=0, le=1, description="the threshold to start from; lowered until XQuAD's own translations "
        "are all caught",
    )  # fmt: skip


def calibrate(X: np.ndarray, groups: np.ndarray, langs: np.ndarray, start: float = START_THRESHOLD) -> dict:
    """The threshold that catches every translation of an XQuAD paragraph, and what it costs.

    With unit vectors ``x_{g,l}`` (paragraph ``g`` in language ``l``), a version is *caught* by the other
    languages when ``c_{g,l} = max_{l' != l} cos(x_{g,l}, x_{g,l'})`` reaches the threshold: exactly the
    test a corpus passage that translates ``g`` into a language faces. So
    ``tau = min(start, min_{g,l} c_{g,l})`` (rounded down to 0.001). Its cost on XQuAD itself: the share of
    versions whose best cosine to *another* paragraph, ``u_{g,l} = max_{g' != g, l'} cos(x_{g,l}, x_{g',l'})``,
    also reaches ``tau`` (an unrelated passage as close as that would be dropped).
    """
    S = X @ X.T
    same = groups[:, None] == groups[None, :]
    same_lang = langs[:, None] == langs[None, :]
    caught = np.where(same & ~same_lang, S, -np.inf).max(axis=1)
    unrelated = np.where(~same, S, -np.inf).max(axis=1)
    all_pairs = np.where(same & ~same_lang, S, np.inf).min(axis=1)
    tau = min(start, math.floor(float(caught.min()) * 1000) / 1000)
    return {
        "threshold": tau,
        "start": start,
        "versions": int(len(X)),
        "caught_at_start_pct": round(100 * float((caught >= start).mean()), 2),
        "min_best_translation_cosine": round(float(caught.min()), 4),
        "min_any_translation_pair_cosine": round(float(all_pairs.min()), 4),
        "unrelated_over_threshold_pct": round(100 * float((unrelated >= tau).mean()), 2),
        "caught_pct": round(100 * float((caught >= tau).mean()), 2),
    }


def _corpus_texts(views: Views) -> tuple[list[str], list[str]]:
    """(passage key, text) of every passage: QA passages once, parallel passages in every language."""
    keys, texts = [], []
    for p in views.passages.values():
        keys.append(p.id)
        texts.append(p.text)
    for p in views.parallel:
        for lang in XQUAD_LANGS:
            keys.append(p.id)
            texts.append(p.text(lang))
    return keys, texts


def run_filter(options: DataFilterOptions) -> dict:
    store = options.store()
    views = load_views(store, require_filter=False)
    path = resolve_model(options.model, options.home)
    enc = Encoder(
        path,
        device=settings(home=options.home).torch_device(),
        home=options.home,
        options=EngineOptions(precision="fp32"),
    )
    P = embed_xquad(enc, options.home / "cache").passages
    X = np.concatenate([P[lang] for lang in XQUAD_LANGS])
    paragraphs = load_xquad(["en"]).paragraphs
    groups = np.array([p.group for _ in XQUAD_LANGS for p in paragraphs])
    langs = np.array([lang for lang in XQUAD_LANGS for _ in paragraphs])
    ids = [f"{lang}:{p.group}" for lang in XQUAD_LANGS for p in paragraphs]
    cal = calibrate(X, groups, langs, options.start_threshold)
    keys, texts = _corpus_texts(views)
    start = time.perf_counter()
    tag = hashlib.sha256("\x1f".join([enc.fingerprint, *texts]).encode()).hexdigest()[:20]
    nearest = cached_array(options.home / "cache" / f"corpus-nearest-{tag}.npy", lambda: _nearest(enc, texts, X))
    dropped: dict[str, dict] = {}
    for k, cos, j in zip(keys, nearest[0], nearest[1].astype(int), strict=True):
        if cos >= cal["threshold"] and cos > dropped.get(k, {}).get("cos", -1):
            dropped[k] = {"cos": round(float(cos), 4), "xquad": ids[j], "reason": "cosine"}
    dropped |= whole_articles(dropped, views)
    result = {
        "model": path.name,
        "fingerprint": enc.fingerprint,
        "calibration": cal,
        "passages": len(set(keys)),
        "texts": len(texts),
        "seconds": round(time.perf_counter() - start, 1),
        "sources": views.digests,
        "dropped": dropped,
    }
    atomic_write_text(store.root / CONTAMINATION_FILE, json.dumps(result, ensure_ascii=False, indent=1))
    return result


def _nearest(enc: Encoder, texts: list[str], X: np.ndarray) -> np.ndarray:
    """``[best cosine, index of that XQuAD version]`` of every text (shape 2 x n)."""
    best, where = np.full(len(texts), -1.0), np.zeros(len(texts))
    step = 512
    for i in tqdm(range(0, len(texts), step), desc="embedding corpus passages", unit="batch"):
        S = enc.encode_passages(texts[i : i + step]) @ X.T
        best[i : i + step], where[i : i + step] = S.max(axis=1), S.argmax(axis=1)
    return np.stack([best, where])


def whole_articles(dropped: dict[str, dict], views: Views) -> dict[str, dict]:
    """The rest of every document the cosine matched to one XQuAD article.

    The sources carry no language links, so an XQuAD article in another language (DRCD's 元代 is
    XQuAD's Yuan_dynasty) shows itself as a document with several passages over the threshold that
    point at one article: at least ``ARTICLE_MIN`` of them, at least ``ARTICLE_SHARE`` of the
    document's passages, and a majority naming the same article. Its remaining passages go too."""
    docs: dict[tuple[str, str], list[str]] = {}
    for p in views.passages.values():
        docs.setdefault((p.source, p.doc), []).append(p.id)
    out = {}
    for ids in docs.values():
        hits = [dropped[i]["xquad"].split(":")[1].rsplit("-", 1)[0] for i in ids if i in dropped]
        if len(hits) < ARTICLE_MIN or len(hits) < ARTICLE_SHARE * len(ids):
            continue
        article, n = Counter(hits).most_common(1)[0]
        if 2 * n > len(hits):
            out |= {i: {"cos": None, "xquad": article, "reason": "article"} for i in ids if i not in dropped}
    return out
