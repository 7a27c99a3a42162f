"""``samelang serve`` over a Milvus-stored index (milvus-lite) answers the README's requests as the
FAISS default does: the same index exported into Milvus (``samelang index export --to milvus``)."""

from __future__ import annotations

import httpx
import pytest

from tests.service.conftest import make_app, running

pytest.importorskip("pymilvus", reason="the Milvus store is the extra 'milvus': pip install -e '.[milvus]'")

REQUESTS = [
    ("/search", {"query": "维多利亚和阿尔伯特博物馆的第一任馆长是谁？", "k": 3}),
    ("/search", {"query": "Who was the first director?", "k": 10, "langs": ["zh"]}),
    ("/search", {"query": "Where is the museum?", "k": 5, "group_candidates": False, "lexical_weight": 0.0}),
    ("/rerank", {"query": "维多利亚和阿尔伯特博物馆在哪里？",
                 "documents": ["The V&A is in London.", "维多利亚和阿尔伯特博物馆位于伦敦。", "Paris est en France."]}),
    ("/answer", {"query": "谁是V＆A的第一任馆长？"}),
    ("/diagnose", {"dataset": "xquad", "split": "test", "pair": "en-zh", "k": 20}),
]  # fmt: skip


def rounded(x):
    """Scores to 5 decimals: the two stores compute the same cosines in other orders."""
    if isinstance(x, dict):
        return {k: rounded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [rounded(v) for v in x]
    return round(x, 5) if isinstance(x, float) else x


@pytest.fixture(scope="module")
def milvus_index(tmp_path_factory, xquad_test_index):
    from indexes.index import export_index
    from indexes.stores import StoreSpec

    out = tmp_path_factory.mktemp("milvus")
    export_index(xquad_test_index, out / "index", StoreSpec("milvus", str(out / "index.db")))
    return out / "index"


def test_milvus_serves_the_same_answers_as_faiss(service_settings, pipeline, milvus_index, server):
    from indexes.index import open_index

    index = open_index(milvus_index, pipeline.encoder.info)
    cfg = service_settings.model_copy(update={"index": milvus_index})
    with running(make_app(cfg, pipeline, index=index)) as url:
        info = httpx.get(f"{url}/info").json()["index"]
        assert info["store"] == "milvus" and httpx.get(f"{server}/info").json()["index"]["store"] == "faiss"
        for path, body in REQUESTS:
            a = httpx.post(f"{url}{path}", json=body, timeout=300)
            b = httpx.post(f"{server}{path}", json=body, timeout=300)
            assert a.status_code == b.status_code == 200, (path, a.text[:300])
            assert rounded(a.json()) == rounded(b.json()), path
