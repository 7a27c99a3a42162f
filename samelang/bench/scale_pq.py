"""Section "scale-10m" (only when named): a compressed IVF-PQ index at 10M vectors, streamed.

10M x 384 float32 is 15.4 GB, more than the index may hold (2 GB), so nothing here keeps the corpus: each chunk of
vectors comes from its own random stream (one child of one seed per chunk) and is made twice, once for the queries'
exact top-k (a running top-k over the chunks: a streamed Flat search), once to add it to the index. The index is
FAISS's own: an inverted file of 4-bit product-quantisation codes scanned with SIMD ("fast scan"), then a refine
stage that re-scores the best ``k_factor x k`` candidates with finer codes (``Refine(...)``), all in RAM.

The data model is the scale table's (:func:`samelang.bench.scale.make_vectors`: a real paragraph embedding moved
towards a neighbour, plus Gaussian noise), whose near-ties no code that fits 2 GB at 10M resolves; the row is
measured and reported as it is (recall per code at 1M: ``docs/performance.md``, ``docs/design.md``).
"""

from __future__ import annotations

import time

import faiss
import numpy as np
from tqdm.auto import tqdm

from samelang.bench.scale import CHUNK, _latencies_ms, _seed_neighbourhood, perturb_into, recall_at_k, serialized_bytes

MODELS = ("isotropic",)
# 4096 lists of 4-bit PQ (48 sub-quantisers: 24 bytes a vector) scanned with SIMD, refined with 8-bit PQ
# over 128 sub-quantisers (128 bytes): 24 + 128 + 8 (id) = 160 bytes a vector, 1.6 GB at 10M
FACTORY = "IVF4096,PQ48x4fs,Refine(PQ128)"
NPROBE_SWEEP = (4, 8, 16, 32, 64, 128)
K_FACTOR_SWEEP = (2, 4, 8, 16, 32, 64)


def make_chunk(seeds_info, model: str, c: int, rng: np.random.Generator) -> np.ndarray:
    """``c`` unit vectors of data model ``model``: :func:`samelang.bench.scale.make_vectors`' recipe
    (:func:`samelang.bench.scale.perturb_into`), from ``_seed_neighbourhood``'s result."""
    if model not in MODELS:
        raise ValueError(f"data model must be one of {MODELS}, got {model!r}")
    x = np.empty((c, seeds_info[0].shape[1]), dtype=np.float32)
    perturb_into(x, seeds_info, rng)
    return x


def chunks(seeds_info, model: str, n: int, seed: int, chunk: int = CHUNK):
    """(start, vectors) over ``n`` vectors; chunk ``b`` is the same whenever it is made again."""
    n_chunks = -(-n // chunk)
    for b, ss in enumerate(np.random.SeedSequence([seed, 10_000_019]).spawn(n_chunks)):
        start = b * chunk
        yield start, make_chunk(seeds_info, model, min(chunk, n - start), np.random.default_rng(ss))


def exact_top_k(q: np.ndarray, stream, k: int) -> np.ndarray:
    """Ids of each query's ``k`` largest inner products over the streamed chunks (a Flat search, chunk by
    chunk: the best ``k`` so far merged with the chunk's own best ``k``)."""
    best_s = np.full((len(q), k), -np.inf, np.float32)
    best_i = np.full((len(q), k), -1, np.int64)
    for start, x in stream:
        sims = q @ x.T
        kk = min(k, sims.shape[1])
        part = np.argpartition(-sims, kk - 1, axis=1)[:, :kk]
        s = np.concatenate([best_s, np.take_along_axis(sims, part, axis=1)], axis=1)
        i = np.concatenate([best_i, part + start], axis=1)
        top = np.argsort(-s, axis=1, kind="stable")[:, :k]
        best_s, best_i = np.take_along_axis(s, top, axis=1), np.take_along_axis(i, top, axis=1)
    return best_i


def _params(nprobe: int, k_factor: int):
    return faiss.IndexRefineSearchParameters(
        k_factor=float(k_factor), base_index_params=faiss.SearchParametersIVF(nprobe=nprobe)
    )


def _search(index, q: np.ndarray, k: int, nprobe: int, k_factor: int):
    return index.search(q, k, params=_params(nprobe, k_factor))[1]


def run_scale_pq(
    seeds: np.ndarray,
    n: int = 10_000_000,
    models=MODELS,
    factory: str = FACTORY,
    n_queries: int = 200,
    k: int = 10,
    recall_target: float = 0.95,
    train_size: int = 262_144,
    seed: int = 0,
    progress: bool = True,
) -> list[dict]:
    """One row per data model (one today): build s, bytes per vector (the index as written, which is what
    it holds in RAM: codes and ids), the first (nprobe, k_factor) whose recall@k meets the target, going up in nprobe
    and, for each, in k_factor (not necessarily the cheapest pair; the last tried when none does) and
    one-query p50/p95 latency there."""
    info = _seed_neighbourhood(seeds)
    rows = []
    for m_i, model in enumerate(models):
        q = make_chunk(info, model, n_queries, np.random.default_rng([seed, 7, m_i]))  # a stream no chunk uses
        data_seed = seed * 1000 + m_i
        stream = chunks(info, model, n, data_seed)
        total = -(-n // CHUNK)
        truth = exact_top_k(q, tqdm(stream, total=total, desc=f"exact top-{k} ({model})", disable=not progress), k)
        index = faiss.index_factory(seeds.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
        train = make_chunk(info, model, min(train_size, n), np.random.default_rng([seed, 11, m_i]))
        t0 = time.perf_counter()
        index.train(train)
        build_s = time.perf_counter() - t0  # FAISS's time only: making the vectors is not the index's cost
        del train
        for _, x in tqdm(chunks(info, model, n, data_seed), total=total, desc=f"add ({model})", disable=not progress):
            t0 = time.perf_counter()
            index.add(x)
            build_s += time.perf_counter() - t0
        best = None
        for nprobe in NPROBE_SWEEP:
            for kf in K_FACTOR_SWEEP:
                recall = recall_at_k(_search(index, q, k, nprobe, kf), truth)
                best = (nprobe, kf, recall)
                if recall >= recall_target:
                    break
            if best[2] >= recall_target:
                break
        nprobe, kf, recall = best
        lat = _latencies_ms(index, q, k, _params(nprobe, kf))  # one query per call, as /search does
        size = serialized_bytes(index)
        rows.append({
            "n": n, "model": model, "factory": factory, "params": f"nprobe={nprobe} k_factor={kf}",
            "build_s": build_s, "bytes_per_vector": size / n, "index_gb": size / 1e9, "recall_at_10": recall,
            "p50_ms": float(np.percentile(lat, 50)), "p95_ms": float(np.percentile(lat, 95)),
            "target_met": recall >= recall_target,
        })  # fmt: skip
        del index
    return rows


def format_pq_table(rows: list[dict]) -> str:
    lines = [
        "| vectors | data model | index | params | build s | bytes/vector | index GB | recall@10 | p50 ms | p95 ms |",
        "|---:|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        mark = "" if r["target_met"] else "*"
        lines.append(
            f"| {r['n']:,} | {r['model']} | {r['factory']} | {r['params']} | {r['build_s']:.0f} "
            f"| {r['bytes_per_vector']:,.0f} | {r['index_gb']:.2f} | {r['recall_at_10']:.3f}{mark} "
            f"| {r['p50_ms']:.3f} | {r['p95_ms']:.3f} |"
        )
    return "\n".join(lines) + "\n\n`*`: recall target 0.95 not reached at the largest nprobe x k_factor swept."
