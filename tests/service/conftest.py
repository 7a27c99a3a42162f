"""Service fixtures: the real base model, a real FAISS index of XQuAD en+zh test
articles, and real uvicorn servers on free localhost ports."""

from __future__ import annotations

import socket

import httpx
import pytest

from samelang.corpora import load_xquad
from samelang.indexes.index import open_index
from samelang.indexes.writes import build_index
from samelang.primitives.langid import get_identifier


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def running(app):
    """Serve ``app`` with uvicorn in a thread; yield its base URL."""
    from samelang.service.api.server import serve_in_thread

    return serve_in_thread(app)


@pytest.fixture(scope="session")
def xquad_test_index(tmp_path_factory, encoder):
    """en+zh paragraphs of the 16 held-out test articles (160 documents)."""
    out = tmp_path_factory.mktemp("idx") / "xquad-en-zh-test"
    docs = load_xquad(["en", "zh"], split="test").documents()
    build_index(out, docs, encoder.encode_passages, encoder.info, source="xquad:en,zh:test")
    return out


@pytest.fixture(scope="session")
def pipeline(encoder, xquad_test_index):
    from samelang.core.models.cross_encoder import CosineReranker
    from samelang.core.models.generation import NoGenerator
    from samelang.retrieval.limits import Limits
    from samelang.retrieval.pipeline import Pipeline

    index = open_index(xquad_test_index, encoder.info)
    return Pipeline(
        encoder,
        index,
        CosineReranker(encoder),
        NoGenerator(),
        get_identifier(),
        Limits(max_rerank_documents=20, max_document_chars=5000),
    )


@pytest.fixture(scope="session")
def service_settings(samelang_home, xquad_test_index, base_model_path):
    from samelang.service.config import ServiceSettings

    return ServiceSettings(
        home=samelang_home, model=base_model_path, index=xquad_test_index, generator="none", max_body_bytes=100_000,
        max_rerank_documents=20, max_document_chars=5000,
    )  # fmt: skip


def make_app(settings, pipeline, **pipeline_changes):
    from samelang.service.api.app import create_app
    from samelang.service.components import Components

    return create_app(settings, Components(pipeline.replace(**pipeline_changes)))


@pytest.fixture(scope="session")
def server(service_settings, pipeline):
    with running(make_app(service_settings, pipeline)) as url:
        yield url


@pytest.fixture()
def client(server):
    with httpx.Client(base_url=server, timeout=120) as c:
        yield c


@pytest.fixture(scope="session")
def gemma(samelang_home):
    """The embedded generator (Gemma 3 270M GGUF on llama.cpp), loaded once for the session."""
    from samelang.core.models.gemma_checkpoint import prepare_generator
    from samelang.core.models.generation import LlamaCppGenerator

    return LlamaCppGenerator(prepare_generator(samelang_home))
