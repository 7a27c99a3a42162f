"""``samelang serve`` over a Milvus-stored index (milvus-lite) answers the README's requests as the
FAISS default does: the same index exported into Milvus (``samelang index export --to milvus``)."""

from __future__ import annotations

import httpx
import pytest

from tests.service.conftest import make_app, running

pytest.importorskip("pymilvus", reason="the Milvus store is the extra 'milvus': pip install -e '.[milvus]'")

README = [  # the README's curls, as they are written there (checked below)
    ("/search", {"query": "维多利亚和阿尔伯特博物馆的第一任馆长是谁？", "k": 3}),
    ("/rerank", {"query": "维多利亚和阿尔伯特博物馆在哪里？",
                 "documents": ["The V&A is in London.", "维多利亚和阿尔伯特博物馆位于伦敦。",
                               {"id": "x", "text": "Paris est en France."}]}),
    ("/answer", {"query": "谁是V＆A的第一任馆长？"}),
    # the whole pool, every query; the retriever's audit (reranking every query would pass the pair limit)
    ("/diagnose", {"dataset": "xquad", "split": "test", "pair": "en-zh", "rerank": False}),
]  # fmt: skip
REQUESTS = README + [
    ("/search", {"query": "Who was the first director?", "k": 10, "langs": ["zh"]}),
    ("/search", {"query": "Where is the museum?", "k": 5, "group_candidates": False, "lexical_weight": 0.0}),
    ("/diagnose", {"dataset": "xquad", "split": "test", "pair": "en-zh", "k": 5, "rerank": True, "rerank_k": 2}),
]  # fmt: skip


def test_the_requests_are_the_readmes():
    import json
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    curls = [(m[0], json.loads(m[1])) for m in re.findall(r"curl -s localhost:8000(/\w+) -H 'content-type: "
                                                          r"application/json' \\\n  -d '(.+?)'\n", readme)]  # fmt: skip
    assert all(c in curls for c in README) and len(README) == 4


def rounded(x):
    """Scores to 5 decimals: the two stores compute the same cosines in other orders."""
    if isinstance(x, dict):
        return {k: rounded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [rounded(v) for v in x]
    return round(x, 5) if isinstance(x, float) else x


@pytest.fixture(scope="module")
def milvus_index(tmp_path_factory, xquad_test_index):
    from samelang.indexes.stores import StoreSpec
    from samelang.indexes.writes import export_index

    out = tmp_path_factory.mktemp("milvus")
    export_index(xquad_test_index, out / "index", StoreSpec("milvus", str(out / "index.db")))
    return out / "index"


def test_milvus_serves_the_same_answers_as_faiss(service_settings, pipeline, milvus_index, server):
    from samelang.indexes.index import open_index

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
