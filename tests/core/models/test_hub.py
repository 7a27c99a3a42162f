"""A model named as a folder or as a Hugging Face hub id (``samelang.core.models.hub``): the id is
found in the hub cache's own layout with ``HF_HUB_OFFLINE=1``, a missing one is refused naming
where it was looked for, and a checkpoint with its own code is refused without --trust-remote-code."""

from __future__ import annotations

import json
import os
import shutil

import httpx
import pytest

from samelang.core.models import hub
from tests.service.conftest import free_port
from tests.test_main_job import serving
from tests.tiny_models import into_hub_cache


@pytest.fixture()
def offline_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def test_a_folder_is_itself(tiny_models):
    assert hub.locate(tiny_models["xlmr-mean"], "bi-encoder", "fix") == tiny_models["xlmr-mean"]


def test_hub_ids_are_told_from_paths(tmp_path):
    assert hub.is_hub_id("BAAI/bge-m3") and hub.is_hub_id("org/tiny@v1.0")
    assert not hub.is_hub_id("./models/x") and not hub.is_hub_id("/abs/path") and not hub.is_hub_id("plain")
    (tmp_path / "org").mkdir()
    assert not hub.is_hub_id(tmp_path / "org")  # an existing path is a path
    assert hub.split_revision("org/tiny@v2", "main") == ("org/tiny", "v2")
    assert hub.split_revision("org/tiny", "main") == ("org/tiny", "main")


def test_an_id_in_the_cache_is_found_offline(tiny_models, offline_cache):
    snap = into_hub_cache(tiny_models["xlmr-cls"], offline_cache, "org/tiny")
    assert hub.locate("org/tiny", "bi-encoder", "fix") == snap
    with pytest.raises(hub.ModelNotFound, match="at revision v9"):
        hub.locate("org/tiny@v9", "bi-encoder", "fix")


def test_a_missing_id_names_the_cache_and_the_fix(offline_cache):
    with pytest.raises(hub.ModelNotFound) as e:
        hub.locate("org/absent", "cross-encoder", "train one with `samelang train reranker`")
    msg = str(e.value)
    assert str(offline_cache) in msg and "HF_HUB_OFFLINE" in msg and "hf download org/absent" in msg
    assert "samelang train reranker" in msg


def test_a_path_that_holds_no_model_says_so(tmp_path):
    with pytest.raises(hub.ModelNotFound, match="no config.json"):
        hub.locate(tmp_path, "bi-encoder", "run `samelang models prepare`")


def test_custom_code_needs_trust(tiny_models, tmp_path, samelang_home):
    from samelang.core.models.encoder import Encoder

    folder = tmp_path / "custom"
    shutil.copytree(tiny_models["xlmr-mean"], folder)
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoModel": "modeling_custom.CustomModel"}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="--trust-remote-code"):
        Encoder(folder, home=samelang_home)
    assert hub.custom_code(folder) == ["modeling_custom.CustomModel"]
    hub.check_remote_code(folder, trust_remote_code=True)  # trusted: let through


def test_serve_finds_a_hub_id_in_the_cache_offline(tiny_models, tmp_path, samelang_home):
    """The acceptance: ``samelang serve --model org/tiny`` with ``HF_HUB_OFFLINE=1`` serves ``/search``."""
    cache = tmp_path / "hf-cache"
    into_hub_cache(tiny_models["xlmr-mean"], cache, "org/tiny")
    port = free_port()
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "SAMELANG_HOME": str(samelang_home)}
    args = ["serve", "--model", "org/tiny", "--reranker", "cosine", "--generator", "none", "--reader", "none",
            "--port", str(port)]  # fmt: skip
    with serving(args, env, port=port):
        r = httpx.post(f"http://127.0.0.1:{port}/search", json={"query": "Where is the river?", "k": 3}, timeout=60)
        assert r.status_code == 200, r.text
        assert len(r.json()["hits"]) == 3
        info = httpx.get(f"http://127.0.0.1:{port}/info", timeout=10).json()
        assert "models--org--tiny" in json.dumps(info)
