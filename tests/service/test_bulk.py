"""``samelang index build --engine ray``: Ray Data actors embed the corpus with the project's own
encoder; on a local Ray (2 CPUs) the vectors equal a single-process build's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from samelang.corpora import load_xquad
from samelang.indexes.index import open_index

pytest.importorskip("ray", reason="the Ray engine is the extra 'ray': pip install -e '.[ray]'")
REPO = Path(__file__).resolve().parents[2]


def test_ray_embedding_equals_the_single_process_one(base_model_path, samelang_home):
    import ray

    from samelang.core.models.encoder import Encoder
    from samelang.service.bulk import embed_with_ray

    texts = [d.text for d in load_xquad(["en", "zh"], split="test").documents()[::6]]  # 27 paragraphs
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        got = embed_with_ray(texts, base_model_path, 384, samelang_home, "fp32", actors=2, batch_size=8)
    finally:
        ray.shutdown()
    want = Encoder(base_model_path, home=samelang_home).encode_passages(texts)  # fp32, one process
    assert got.shape == want.shape and np.abs(got - want).max() <= 1e-5


def test_index_build_with_the_ray_engine(tmp_path, base_model_path, samelang_home):
    """The CLI end to end on a local Ray, into Milvus (milvus-lite): the vectors of a single-process
    build. (Into FAISS the writer is the one every local build uses; the Ray embedding is the same.)"""
    from samelang.core.models.encoder import Encoder

    env = {**os.environ, "SAMELANG_HOME": str(samelang_home), "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "samelang", "index", "build", "--out", str(tmp_path / "ray"), "--engine", "ray",
           "--corpus", "xquad", "--langs", "en", "--split", "test", "--model", str(base_model_path),
           "--precision", "fp32", "--no-lexical", "--store", "milvus", "--uri", str(tmp_path / "ray.db")]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["n_docs"] == 80 and out["store"]["kind"] == "milvus"
    idx = open_index(tmp_path / "ray")
    try:
        got, texts = idx.vectors(list(range(80))), [d.text for d in idx.docs.get_rows(list(range(80)))]
    finally:
        idx.close()
    want = Encoder(base_model_path, home=samelang_home).encode_passages(texts)  # fp32, one process
    assert np.abs(got - want).max() <= 1e-5
