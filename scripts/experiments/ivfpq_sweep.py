"""How far a compressed IVF index gets on the scale benchmark's vectors (a screen for the 10M row).

Makes ``--n`` vectors exactly as ``samelang bench --section scale-10m`` does (``samelang/bench/scale_pq.py``:
perturbations of the real paragraph embeddings of a built XQuAD index), holds them in memory (1M: 1.5 GB)
for an exact Flat ground truth, prints how close a query's exact neighbours are (the cosine of the 1st,
10th, 11th and 100th, medians over the queries, and the 10th-11th gap), then for each FAISS factory
string the recall@10 and one-query p50 over nprobe x k_factor, and the bytes per vector as written.

    python scripts/experiments/ivfpq_sweep.py --index DIR [--n 1000000] FACTORY ...

e.g. ``"IVF1024,PQ48x4fs,Refine(PQ96)" "IVF1024,PQ48x4fs,Refine(SQ8)" "IVF1024,PQ48x4fs,Refine(SQfp16)"``;
``--index`` is a built index folder (``samelang index build``; the 12-language XQuAD one was used).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import faiss
import numpy as np

from samelang.bench import scale_pq as P
from samelang.bench.scale import _latencies_ms, _seed_neighbourhood, recall_at_k
from samelang.indexes.generations import current_generation


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", type=Path, required=True, help="a built index folder whose vectors are the seeds")
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("factories", nargs="+")
    args = ap.parse_args()
    flat_index = faiss.read_index(str(current_generation(args.index) / "vectors.faiss"))
    seeds = faiss.downcast_index(flat_index.index).reconstruct_n(0, flat_index.ntotal)
    info = _seed_neighbourhood(seeds)
    model = P.MODELS[0]
    q = P.make_chunk(info, model, 200, np.random.default_rng([0, 7, 0]))
    x = np.vstack([c for _, c in P.chunks(info, model, args.n, 0)])
    flat = faiss.IndexFlatIP(x.shape[1])
    flat.add(x)
    sims, truth = flat.search(q, 100)
    truth = truth[:, :10]
    del flat
    print(f"{args.n:,} vectors ({model}); exact neighbours' cosine, median over {len(q)} queries:")
    print("  " + ", ".join(f"#{r + 1} {np.median(sims[:, r]):.5f}" for r in (0, 9, 10, 99)),
          f"; #10 - #11: {np.median(sims[:, 9] - sims[:, 10]):.6f}")  # fmt: skip
    for spec in args.factories:
        t0 = time.perf_counter()
        index = faiss.index_factory(x.shape[1], spec, faiss.METRIC_INNER_PRODUCT)
        index.train(P.make_chunk(info, model, 262_144, np.random.default_rng([0, 11, 0])))
        for s in range(0, len(x), 65_536):
            index.add(x[s : s + 65_536])
        print(f"{spec}: build {time.perf_counter() - t0:.0f} s, {P.serialized_bytes(index) / len(x):.0f} bytes/vector")
        for nprobe in (16, 32, 64):
            cells = []
            for kf in (4, 16, 64):
                recall = recall_at_k(P._search(index, q, 10, nprobe, kf), truth)
                lat = _latencies_ms(index, q[:50], 10, P._params(nprobe, kf))
                cells.append(f"k_factor {kf}: recall@10 {recall:.3f}, p50 {np.median(lat):.2f} ms")
            print(f"  nprobe {nprobe}: " + "; ".join(cells), flush=True)


if __name__ == "__main__":
    main()
