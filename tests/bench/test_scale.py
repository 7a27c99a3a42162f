"""Plumbing tests of the scale harness: it runs end to end, its rows are consistent, and its data is clustered.

The seeds here are a synthetic mixture (30 centres plus noise), not model embeddings, and 5,000 vectors say
nothing about 1M: these tests check the harness, not the numbers it reports.
"""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from samelang.bench import scale as S
from samelang.indexes import vectors as V
from tests.bench.conftest import clustered_seeds

D = 384


pytestmark = pytest.mark.usefixtures("one_faiss_thread")


@pytest.fixture(scope="module")
def seeds() -> np.ndarray:
    return clustered_seeds(D, 30, 600, 7)


@pytest.fixture(scope="module")
def rows(seeds) -> list[dict]:
    return S.run_scale(seeds, sizes=(5000,), n_queries=50, threads=1, progress=False)


def _mean_nn_cosine(x: np.ndarray) -> float:
    sim = x @ x.T
    np.fill_diagonal(sim, -np.inf)
    return float(sim.max(axis=1).mean())


def test_make_vectors_is_normalised_and_clustered(seeds):
    x = S.make_vectors(seeds, 2000, np.random.default_rng(0))
    assert x.shape == (2000, D) and x.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    iid = V.normalise(np.random.default_rng(1).standard_normal((2000, D)))
    assert _mean_nn_cosine(x) > _mean_nn_cosine(iid) + 0.4


def test_make_vectors_crosses_chunks(seeds, monkeypatch):
    monkeypatch.setattr(S, "CHUNK", 128)
    x = S.make_vectors(seeds, 300, np.random.default_rng(0))
    assert x.shape == (300, D)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)


def test_queries_are_not_copies_of_the_corpus(seeds):
    corpus = S.make_vectors(seeds, 2000, np.random.default_rng(0))
    queries = S.make_queries(seeds, 50, np.random.default_rng(1))
    assert (queries @ corpus.T).max() < 0.9999


def test_helpers():
    assert [S.ivf_nlist(n) for n in (5_000, 10_000, 100_000, 1_000_000)] == [128, 256, 1024, 4096]
    truth = np.array([[1, 2, 3], [4, 5, 6]])
    assert S.recall_at_k(np.array([[3, 2, 9], [4, 5, 6]]), truth) == pytest.approx(5 / 6)
    index = V.new_index(V.IndexSpec(kind="hnsw"), 16)
    V.add_vectors(index, np.random.default_rng(0).standard_normal((100, 16)), np.arange(100))
    assert S.serialized_bytes(index) == len(faiss.serialize_index(index))


def test_run_scale_rows(rows):
    assert [(r["n"], r["kind"]) for r in rows] == [(5000, "flat"), (5000, "hnsw"), (5000, "ivf")]
    flat, hnsw, ivf = rows
    assert flat["recall_at_10"] == 1.0 and flat["target_met"] is None
    assert flat["bytes_per_vector"] >= 4 * D
    assert "efSearch=" in hnsw["params"] and "nprobe=" in ivf["params"]
    for r in (hnsw, ivf):
        assert 0.0 <= r["recall_at_10"] <= 1.0
        assert r["target_met"] == (r["recall_at_10"] >= 0.95)
    for r in rows:
        assert r["build_s"] >= 0 and 0 < r["p50_ms"] <= r["p95_ms"]


def test_run_scale_without_flat_still_has_ground_truth(seeds):
    (row,) = S.run_scale(seeds, sizes=(2000,), kinds=("ivf",), n_queries=20, threads=1, progress=False)
    assert row["kind"] == "ivf" and 0.0 < row["recall_at_10"] <= 1.0


def test_table_has_a_line_per_row(rows):
    lines = S.format_scale_table(rows).splitlines()
    assert len(lines) == len(rows) + 2  # header and its separator
    assert all(line.startswith("|") for line in lines)
