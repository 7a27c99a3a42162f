"""What the scale harness tests share: FAISS on one thread, and clustered synthetic seed vectors."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from samelang.indexes import vectors as V


@pytest.fixture(scope="module")
def one_faiss_thread():
    """FAISS on one OpenMP thread for the module (restored after): timings and results stay put."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


def clustered_seeds(d: int, centres: int, n: int, seed: int) -> np.ndarray:
    """``n`` unit vectors around ``centres`` random centres: seeds shaped like clustered embeddings."""
    rng = np.random.default_rng(seed)
    c = V.normalise(rng.standard_normal((centres, d)))
    return V.normalise(c[rng.integers(0, centres, n)] + 0.5 / np.sqrt(d) * rng.standard_normal((n, d)))
