"""Plumbing tests of the streamed IVF-PQ harness (section "scale-10m"): chunks can be made again
identically, the streamed exact top-k is a Flat search's, its vectors are unit vectors, and a
small run gives consistent rows. Synthetic seeds and 6,000 vectors: the harness, not the numbers."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from samelang.bench import scale as S
from samelang.bench import scale_pq as P
from tests.bench.conftest import clustered_seeds

D = 64


pytestmark = pytest.mark.usefixtures("one_faiss_thread")


@pytest.fixture(scope="module")
def seeds() -> np.ndarray:
    return clustered_seeds(D, 20, 300, 3)


@pytest.mark.parametrize("model", P.MODELS)
def test_chunks_are_unit_vectors_made_again_identically(seeds, model):
    info = S._seed_neighbourhood(seeds)
    a = list(P.chunks(info, model, 1000, seed=5, chunk=300))
    b = list(P.chunks(info, model, 1000, seed=5, chunk=300))
    assert [s for s, _ in a] == [0, 300, 600, 900] and sum(len(x) for _, x in a) == 1000
    for (_, x), (_, y) in zip(a, b):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    other = np.vstack([x for _, x in P.chunks(info, model, 1000, seed=6, chunk=300)])
    assert not np.allclose(other, np.vstack([x for _, x in a]))


def test_streamed_exact_top_k_is_a_flat_search(seeds):
    info = S._seed_neighbourhood(seeds)
    x = np.vstack([c for _, c in P.chunks(info, "isotropic", 2000, seed=1, chunk=256)])
    q = P.make_chunk(info, "isotropic", 30, np.random.default_rng(9))
    flat = faiss.IndexFlatIP(D)
    flat.add(x)
    want = flat.search(q, 10)[1]
    got = P.exact_top_k(q, P.chunks(info, "isotropic", 2000, seed=1, chunk=256), 10)
    assert S.recall_at_k(got, want) == 1.0


def test_unknown_data_model_is_refused(seeds):
    with pytest.raises(ValueError, match="data model"):
        P.make_chunk(S._seed_neighbourhood(seeds), "gaussian", 5, np.random.default_rng(0))


def test_small_run_gives_consistent_rows(seeds):
    rows = P.run_scale_pq(seeds, n=6000, factory="IVF16,PQ16x4fs,Refine(Flat)", n_queries=20, train_size=3000,
                          progress=False)  # fmt: skip
    assert [r["model"] for r in rows] == list(P.MODELS)
    for r in rows:
        assert 0.0 <= r["recall_at_10"] <= 1.0 and r["target_met"] == (r["recall_at_10"] >= 0.95)
        assert r["bytes_per_vector"] > 4 * D and 0 < r["p50_ms"] <= r["p95_ms"]  # Refine(Flat) keeps the floats
        assert r["params"].startswith("nprobe=")
    # an exact refine over every list finds the exact top 10
    assert rows[0]["recall_at_10"] >= 0.95
    lines = P.format_pq_table(rows).splitlines()
    assert len([ln for ln in lines if ln.startswith("| 6,000")]) == len(P.MODELS)
