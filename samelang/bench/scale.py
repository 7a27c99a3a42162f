"""Section "scale": `/search` latency and memory per vector for Flat, HNSW and IVF at growing sizes.

The vectors are synthetic but shaped like the product's data: every one is a perturbation of a real model
embedding (a "seed"), so the corpus has the clusters real embeddings have and a query's 10 nearest neighbours
are a real search problem. iid Gaussian vectors would not do: in 384 dimensions all their pairwise cosines are
about 0, every point is about equally far from every other, and HNSW recall on them says nothing about the
service. The indexes are built with the product's own code (`samelang.indexes.vectors`), searched one query at a time
as `/search` does, and the approximate ones are tuned to a recall target against exact (Flat) search.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Iterable, Sequence

import faiss
import numpy as np
from tqdm.auto import tqdm

from samelang.indexes import vectors as V

HNSW_M = 32
# efConstruction 80, not the product's 200: on a 2-core host a 1M-vector HNSW build at 200 takes about 2.5x
# as long, and most of the recall it buys is bought back at search time by a larger efSearch, which the sweep
# below measures anyway.
HNSW_EF_CONSTRUCTION = 80
EF_SEARCH_SWEEP = (16, 32, 64, 128, 256, 512)
NPROBE_SWEEP = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CHUNK = 65_536  # rows made or added at a time: 96 MiB of float32 at d=384, whatever n is
GT_BATCH = 1_024  # queries per exact search when computing ground truth


def _seed_neighbourhood(seeds: np.ndarray, n_neighbours: int = 10) -> tuple[np.ndarray, np.ndarray, float]:
    """Normalised seeds, each seed's nearest other seeds, and the median nearest-neighbour distance."""
    s = V.normalise(seeds)
    if len(s) == 0:
        raise ValueError("make_vectors needs at least one seed vector")
    if len(s) == 1:
        return s, np.zeros((1, 1), dtype=np.int64), 0.1
    exact = faiss.IndexFlatIP(s.shape[1])
    exact.add(s)
    kk = min(n_neighbours + 1, len(s))
    sims, nbrs = exact.search(s, kk)
    # column 0 is the seed itself (barring exact duplicates, where either copy is an equally good neighbour)
    nn_dist = np.sqrt(np.maximum(2.0 - 2.0 * sims[:, 1], 0.0))
    scale = float(np.median(nn_dist))
    return s, nbrs[:, 1:], scale if scale > 0 else 0.1


def make_vectors(
    seeds: np.ndarray, n: int, rng: np.random.Generator, mix: float = 0.5, noise: float = 0.5
) -> np.ndarray:
    """(n, d) float32 unit vectors clustered like `seeds` (real embeddings, one per row).

    Each vector is a random seed moved towards one of its 10 nearest seeds by a random fraction in [0, mix),
    plus Gaussian noise whose norm is about `noise` times the median nearest-neighbour distance among the
    seeds, then renormalised. Made `CHUNK` rows at a time into one preallocated array, so 1M x 384 costs its
    1.5 GB and not several copies of it.
    """
    info = _seed_neighbourhood(seeds)
    out = np.empty((n, info[0].shape[1]), dtype=np.float32)
    for start in range(0, n, CHUNK):
        perturb_into(out[start : start + CHUNK], info, rng, mix, noise)
    return out


def perturb_into(x: np.ndarray, seeds_info, rng: np.random.Generator, mix: float = 0.5, noise: float = 0.5) -> None:
    """Fill ``x`` (c, d) with :func:`make_vectors`' perturbations, from ``_seed_neighbourhood``'s
    (normalised seeds, nearest seeds, median nearest-neighbour distance); the one place the recipe lives."""
    s, nbrs, scale = seeds_info
    c, d = x.shape
    i = rng.integers(0, len(s), c)
    j = nbrs[i, rng.integers(0, nbrs.shape[1], c)]
    a = rng.uniform(0.0, mix, (c, 1)).astype(np.float32)
    np.multiply(s[i], 1.0 - a, out=x)
    x += a * s[j]
    x += np.float32(noise * scale / math.sqrt(d)) * rng.standard_normal((c, d), dtype=np.float32)
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def make_queries(seeds: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
    """Queries made like the corpus; pass an rng stream the corpus did not use, so none is an indexed copy."""
    return make_vectors(seeds, m, rng)


def ivf_nlist(n: int) -> int:
    """About 4 * sqrt(n), rounded to a power of two, with at least 39 vectors per list (FAISS warns below)."""
    target = 2 ** round(math.log2(max(1.0, 4.0 * math.sqrt(n))))
    cap = 2 ** int(math.log2(max(1, n // 39)))
    return max(1, min(target, cap))


def serialized_bytes(index: faiss.Index) -> int:
    """Size of the index as `write_index` stores it, counted as it streams: at 1M no second copy is made."""
    total = 0

    def count(buf: bytes) -> int:
        nonlocal total
        total += len(buf)
        return len(buf)

    writer = faiss.PyCallbackIOWriter(count)
    faiss.write_index(index, writer)
    del writer  # flushes the last buffered block through `count`
    return total


def recall_at_k(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean fraction of each query's true top-k ids among its returned top-k."""
    k = truth.shape[1]
    hits = sum(len(set(f[:k].tolist()) & set(t.tolist())) for f, t in zip(found, truth))
    return hits / (len(truth) * k)


def _build(kind: str, x: np.ndarray, nlist: int, rng: np.random.Generator, progress: bool) -> faiss.Index:
    spec = V.IndexSpec(kind=kind, hnsw_m=HNSW_M, hnsw_ef_construction=HNSW_EF_CONSTRUCTION, ivf_nlist=nlist)
    train = None
    if kind == "ivf":
        m = min(len(x), max(40 * nlist, 50_000))
        train = x[np.sort(rng.choice(len(x), m, replace=False))] if m < len(x) else x
    index = V.new_index(spec, x.shape[1], train)
    del train
    starts = range(0, len(x), CHUNK)
    for start in tqdm(starts, desc=f"add {kind} n={len(x):,}", leave=False, disable=not progress):
        stop = min(start + CHUNK, len(x))
        V.add_vectors(index, x[start:stop], np.arange(start, stop))
    return index


def _exact_top_k(index: faiss.Index, q: np.ndarray, k: int) -> np.ndarray:
    return np.vstack([index.search(q[i : i + GT_BATCH], k)[1] for i in range(0, len(q), GT_BATCH)])


def _tune(
    index: faiss.Index, kind: str, q: np.ndarray, truth: np.ndarray, k: int, target: float, nlist: int
) -> tuple[int, float, bool]:
    """Smallest efSearch / nprobe whose recall meets `target`; the largest tried when none does."""

    def recall_with(value: int) -> float:
        if kind == "hnsw":
            V.set_search_params(index, ef_search=max(value, k))
        else:
            V.set_search_params(index, nprobe=value)
        return recall_at_k(_exact_top_k(index, q, k), truth)

    return smallest_meeting(EF_SEARCH_SWEEP if kind == "hnsw" else nprobe_sweep(nlist), recall_with, target)


def nprobe_sweep(nlist: int) -> list[int]:
    return [p for p in NPROBE_SWEEP if p <= nlist] or [nlist]


def smallest_meeting(values: Sequence[int], recall_with, target: float) -> tuple[int, float, bool]:
    """(value, its recall, met): the first of ``values`` whose ``recall_with(value)`` meets ``target``,
    else the last one tried."""
    value, recall = values[-1], 0.0
    for value in values:
        recall = recall_with(value)
        if recall >= target:
            return value, recall, True
    return value, recall, False


def _latencies_ms(index: faiss.Index, q: np.ndarray, k: int, params=None) -> np.ndarray:
    """Per-query latency as `/search` pays it: one query per call, after one untimed pass (``params``:
    FAISS search parameters, e.g. an IVF-PQ refine's)."""
    return latencies_ms(lambda one: index.search(one, k, params=params), q)


def latencies_ms(search, q: np.ndarray, warm: int | None = None) -> np.ndarray:
    """``search(one query)``'s latency per query, one query per call, after ``warm`` untimed queries
    (default: one pass over all)."""
    for i in range(len(q) if warm is None else min(warm, len(q))):
        search(q[i : i + 1])
    out = np.empty(len(q))
    for i in range(len(q)):
        t0 = time.perf_counter()
        search(q[i : i + 1])
        out[i] = (time.perf_counter() - t0) * 1e3
    return out


def run_scale(
    seeds: np.ndarray,
    sizes: Iterable[int] = (10_000, 100_000, 1_000_000),
    kinds: Sequence[str] = ("flat", "hnsw", "ivf"),
    n_queries: int = 200,
    k: int = 10,
    recall_target: float = 0.95,
    threads: int | None = None,
    seed: int = 0,
    progress: bool = True,
) -> list[dict]:
    """One row per (size, kind): build time, bytes per vector, tuned recall@k and one-query p50/p95 latency.

    Ground truth is exact Flat search; when "flat" is not among `kinds` a Flat index is still built for it
    but not reported. Each index is freed before the next is built, and each size's vectors before the next
    size is made, so peak memory is about two copies of the largest corpus.
    """
    for kind in kinds:
        if kind not in V.KINDS:
            raise ValueError(f"index kind must be one of {V.KINDS}, got {kind!r}")
    if threads is not None:
        faiss.omp_set_num_threads(threads)
    corpus_ss, query_ss, build_ss = np.random.SeedSequence(seed).spawn(3)
    q = make_queries(seeds, n_queries, np.random.default_rng(query_ss))
    size_list = list(sizes)
    corpus_rngs = [np.random.default_rng(s) for s in corpus_ss.spawn(len(size_list))]
    build_rng = np.random.default_rng(build_ss)
    order = ["flat"] + [kd for kd in kinds if kd != "flat"]  # exact first: its results are the ground truth
    rows: list[dict] = []
    bar = tqdm(total=len(size_list) * len(order), desc="scale", disable=not progress)
    for n, corpus_rng in zip(size_list, corpus_rngs):
        x = make_vectors(seeds, n, corpus_rng)
        truth = None
        for kind in order:
            bar.set_postfix_str(f"n={n:,} {kind}")
            row, truth = _measure(kind, x, q, truth, k, recall_target, build_rng, progress, timed=kind in kinds)
            if kind in kinds:
                rows.append({"n": n, **row})
            gc.collect()
            bar.update()
        del x
        gc.collect()
    bar.close()
    return rows


def _measure(kind, x, q, truth, k, recall_target, build_rng, progress, timed=True) -> tuple[dict, np.ndarray]:
    """Build one index over ``x``, tune it against ``truth`` (Flat: it *is* the truth) and time it;
    returns the row (latency only when ``timed``: a Flat built just for the truth is not timed) and
    the ground truth. The index is freed on return."""
    nlist = ivf_nlist(len(x))
    t0 = time.perf_counter()
    index = _build(kind, x, nlist, build_rng, progress)
    build_s = time.perf_counter() - t0
    if kind == "flat":
        truth = _exact_top_k(index, q, k)
        recall, met, params, note = 1.0, None, "exact", ""
    else:
        value, recall, met = _tune(index, kind, q, truth, k, recall_target, nlist)
        params = (
            f"M={HNSW_M} efC={HNSW_EF_CONSTRUCTION} efSearch={value}"
            if kind == "hnsw"
            else f"nlist={nlist} nprobe={value}"
        )
        note = "" if met else f"recall target {recall_target} not met; largest swept value kept"
    lat = _latencies_ms(index, q, k) if timed else np.zeros(1)
    row = {
        "kind": kind, "params": params, "build_s": build_s, "bytes_per_vector": serialized_bytes(index) / len(x),
        "recall_at_10": recall, "p50_ms": float(np.percentile(lat, 50)), "p95_ms": float(np.percentile(lat, 95)),
        "target_met": met, "note": note,
    }  # fmt: skip
    return row, truth


def format_scale_table(rows: list[dict]) -> str:
    """Markdown table of `run_scale` rows; a recall below its target is marked with '*'."""
    lines = [
        "| vectors | index | params | build s | bytes/vector | recall@10 | p50 ms | p95 ms |",
        "|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        mark = "*" if r["target_met"] is False else ""
        lines.append(
            f"| {r['n']:,} | {r['kind']} | {r['params']} | {r['build_s']:.2f} | {r['bytes_per_vector']:,.0f} "
            f"| {r['recall_at_10']:.3f}{mark} | {r['p50_ms']:.3f} | {r['p95_ms']:.3f} |"
        )
    return "\n".join(lines)
