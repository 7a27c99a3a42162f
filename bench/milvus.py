"""Section "milvus": the same vectors in FAISS (in process) and in Milvus (milvus-lite, through the
product's :class:`indexes.stores.MilvusStore`), built and searched side by side.

The vectors are the "scale" section's (perturbations of real paragraph embeddings, see
``bench/scale.py``), the queries too. Per store and index kind: the time to build (FAISS: add; Milvus:
create the collection, upsert every row in the product's batches, flush, build and load the index), the
bytes on disk per vector, recall@10 against exact search, and the one-query latency that ``/search`` pays
(p50, p95 after ten warm-up queries). Milvus's searches carry the product's filter (the generation's rows, no
deleted row), as serving does. IVF on both: nlist as the scale section's, nprobe the smallest that meets
the recall target. milvus-lite is Milvus for one machine (one process per file): a Milvus server adds a
network hop per search and scales out; these rows say what the same client code costs on one host.

What milvus-lite is (3.x): a Python engine over FAISS indexes with Milvus's API (``milvus_lite/index``);
a filtered search builds a selector over the valid rows per query, so its latency grows with the
collection whatever the index. It is for development and tests; a Milvus server is for scale.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from indexes import vectors as V

from .scale import CHUNK, NPROBE_SWEEP, _build, _exact_top_k, ivf_nlist, make_queries, make_vectors, recall_at_k


def _latencies(search, q: np.ndarray, warm: int = 10) -> np.ndarray:
    for i in range(min(warm, len(q))):  # the warm pass: pages, caches, a lazy load
        search(q[i : i + 1])
    out = np.empty(len(q))
    for i in range(len(q)):
        t0 = time.perf_counter()
        search(q[i : i + 1])
        out[i] = (time.perf_counter() - t0) * 1e3
    return out


def _row(store: str, kind: str, params: str, build_s: float, nbytes: float, recall: float, lat, met=None) -> dict:
    return {"store": store, "kind": kind, "params": params, "build_s": build_s, "bytes_per_vector": nbytes,
            "recall_at_10": recall, "p50_ms": float(np.percentile(lat, 50)), "p95_ms": float(np.percentile(lat, 95)),
            "target_met": met}  # fmt: skip


def _faiss_rows(x, q, k, target, rng) -> tuple[list[dict], np.ndarray]:
    flat, truth = _faiss_row("flat", x, q, k, target, rng, None)
    ivf, _ = _faiss_row("ivf", x, q, k, target, rng, truth)
    return [flat, ivf], truth


def _faiss_row(kind, x, q, k, target, rng, truth) -> tuple[dict, np.ndarray]:
    """One FAISS kind's row (the index is freed on return); flat's results are the ground truth."""
    from .scale import serialized_bytes

    nlist = ivf_nlist(len(x))
    t0 = time.perf_counter()
    index = _build(kind, x, nlist, rng, progress=False)
    build_s = time.perf_counter() - t0
    if kind == "flat":
        truth, value, recall, met = _exact_top_k(index, q, k), None, 1.0, None
    else:
        value, recall, met = _sweep(lambda p: _exact_top_k(_with_nprobe(index, p), q, k), truth, nlist, target)
        V.set_search_params(index, nprobe=value)
    lat = _latencies(lambda one: index.search(one, k), q)
    params = "exact" if kind == "flat" else f"nlist={nlist} nprobe={value}"
    return _row("faiss", kind, params, build_s, serialized_bytes(index) / len(x), recall, lat, met), truth


def _with_nprobe(index, nprobe: int):
    V.set_search_params(index, nprobe=nprobe)
    return index


def _sweep(found_at, truth: np.ndarray, nlist: int, target: float) -> tuple[int, float, bool]:
    """The smallest nprobe whose recall meets ``target`` (the largest tried when none does)."""
    value, recall = nlist, 0.0
    for value in [p for p in NPROBE_SWEEP if p <= nlist] or [nlist]:
        recall = recall_at_k(found_at(value), truth)
        if recall >= target:
            return value, recall, True
    return value, recall, False


def _milvus_row(x, q, truth, k, target, kind: str, folder: Path, progress: bool) -> dict:
    from indexes.stores import MilvusStore

    folder = folder / kind
    folder.mkdir()
    uri, coll, nlist = str(folder / "bench.db"), f"bench_{kind}", ivf_nlist(len(x))
    spec = V.IndexSpec(kind=kind, ivf_nlist=nlist)
    t0 = time.perf_counter()
    MilvusStore.create(uri, coll, x.shape[1], spec)
    empty = [""] * CHUNK
    for start in tqdm(range(0, len(x), CHUNK), desc=f"milvus {kind} upsert", leave=False, disable=not progress):
        stop = min(start + CHUNK, len(x))
        MilvusStore.upsert(uri, coll, x[start:stop], np.arange(start, stop), empty, empty)
    store = MilvusStore(uri, coll, len(x), x.shape[1])  # loads the collection: its index is built by then
    build_s = time.perf_counter() - t0
    try:
        if kind == "flat":
            value, recall, met = None, recall_at_k(store.search(q, k)[1], truth), None
        else:
            value, recall, met = _sweep(lambda p: store.search(q, k, nprobe=p)[1], truth, nlist, target)
        lat = _latencies(lambda one: store.search(one, k, nprobe=value), q)
        described = store.client.describe_index(coll, "vector").get("index_type", "?")
    finally:
        store.close()
    nbytes = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    params = f"{described}" + (f" nlist={nlist} nprobe={value}" if kind == "ivf" else "")
    return _row("milvus-lite", kind, params, build_s, nbytes / len(x), recall, lat, met)


def run_milvus(seeds: np.ndarray, n: int, n_queries: int = 200, k: int = 10, target: float = 0.95, seed: int = 0,
               progress: bool = True) -> list[dict]:  # fmt: skip
    """Rows for FAISS flat and IVF, then milvus-lite FLAT and IVF_FLAT, over the same ``n`` vectors."""
    corpus_ss, query_ss, build_ss = np.random.SeedSequence(seed).spawn(3)
    x = make_vectors(seeds, n, np.random.default_rng(corpus_ss))
    q = make_queries(seeds, n_queries, np.random.default_rng(query_ss))
    rows, truth = _faiss_rows(x, q, k, target, np.random.default_rng(build_ss))
    folder = Path(tempfile.mkdtemp(prefix="samelang-bench-milvus-"))
    try:
        for kind in ("flat", "ivf"):
            rows.append(_milvus_row(x, q, truth, k, target, kind, folder, progress))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    for r in rows:
        r["n"] = n
    return rows


def format_milvus_table(rows: list[dict]) -> str:
    lines = ["| vectors | store | index | params | build s | disk bytes/vector | recall@10 | p50 ms | p95 ms |",
             "|---:|---|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in rows:
        mark = "*" if r["target_met"] is False else ""
        lines.append(f"| {r['n']:,} | {r['store']} | {r['kind']} | {r['params']} | {r['build_s']:.1f} "
                     f"| {r['bytes_per_vector']:,.0f} | {r['recall_at_10']:.3f}{mark} | {r['p50_ms']:.2f} "
                     f"| {r['p95_ms']:.2f} |")  # fmt: skip
    return "\n".join(lines)
