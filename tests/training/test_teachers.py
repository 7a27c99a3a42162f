"""Stage-1 teachers of the LAMAR cross-encoder: the fused teacher scores an English pair as the
served fused retriever scores a document in the reader's language (checked against the pipeline
over a real FAISS index of the same documents), then standardises over the training pairs."""

from __future__ import annotations

import numpy as np
import pytest

from samelang.corpora import load_xquad
from samelang.corpora.records import Document


@pytest.fixture(scope="module")
def english(samelang_home, base_model_path):
    en = load_xquad(["en"], split="train")
    docs = [p for p in en.paragraphs if p.article == en.paragraphs[0].article][:12]
    groups = {p.group for p in docs}
    qs = [q for q in en.questions if q.group in groups][:4]
    return docs, qs


def test_fused_teacher_is_the_served_same_language_score(english, samelang_home, tmp_path):
    from samelang.core.catalogue import REPO_MODELS, served_defaults
    from samelang.core.models.cross_encoder import CosineReranker
    from samelang.core.models.generation import NoGenerator
    from samelang.indexes.index import open_index
    from samelang.indexes.writes import build_index
    from samelang.primitives.langid import get_identifier
    from samelang.retrieval.limits import Limits
    from samelang.retrieval.options import Defaults, SearchOptions
    from samelang.retrieval.pipeline import Pipeline
    from samelang.training.teachers import FusedTeacher, fused_teacher_path, teacher_name

    docs, qs = english
    served = served_defaults().retriever  # a fused pair whose graphs other tests export anyway
    path = fused_teacher_path(served)
    assert path == REPO_MODELS / served and fused_teacher_path("cosine") is None
    teacher = FusedTeacher(path, samelang_home)
    enc = teacher.encoder
    build_index(tmp_path / "idx", [Document(p.id, p.text, "en", None) for p in docs], enc.encode_passages, enc.info,
                source="test", analyzer=enc.analyzer)  # fmt: skip
    index = open_index(tmp_path / "idx", enc.info)
    pipe = Pipeline(enc, index, CosineReranker(enc), NoGenerator(), get_identifier(), Limits(),
                    defaults=Defaults(group_candidates=False, lexical_weight=enc.fusion.lexical_weight))  # fmt: skip
    for q in qs:
        hits = pipe.search(q.text, SearchOptions(k=len(docs), langs=("en",))).hits
        raw = teacher.raw([q.text] * len(hits), [h.doc.text for h in hits])
        np.testing.assert_allclose(raw, [h.score for h in hits], rtol=1e-4, atol=1e-4)
    t = teacher([q.text for q in qs for _ in docs], [p.text for _ in qs for p in docs])
    assert abs(float(t.mean())) < 1e-5 and float(t.std()) == pytest.approx(1.0, abs=1e-4)
    assert teacher_name(served, samelang_home).startswith("fused:")
