"""``samelang adapt`` and a running server: killed mid-training, the server still answers from the old
generation and a re-run resumes; a generation embedded again with a model adapted from the served one
brings that model into the running server, and one of an unrelated model is refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from samelang.indexes.generations import current_generation
from tests.service.conftest import make_app, running


@pytest.mark.slow  # a subprocess run of samelang adapt, killed, then run again (~3 min on 2 cores)
def test_a_killed_adapt_leaves_the_old_generation_serving_and_resumes(
    small_index,
    base_model_path,
    samelang_home,
    tmp_path,
    encoder,
    service_settings,
    pipeline,  # noqa: F811
):
    from samelang.indexes.index import open_index

    out = tmp_path / "adapted"
    env = {**os.environ, "SAMELANG_HOME": str(samelang_home), "PYTHONPATH": str(Path(__file__).parents[2])}
    cmd = [sys.executable, "-m", "samelang", "adapt", "--index", str(small_index), "--model", str(base_model_path),
           "--out", str(out), "--max-steps", "16", "--batch-size", "4", "--max-length", "48", "--no-general",
           "--guard", "off", "--dev-share", "0.25"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # fmt: skip
    checkpoints = out / "work" / "encoder" / "checkpoints"
    deadline = time.monotonic() + 900
    while not any(checkpoints.glob("step-*")):
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert current_generation(small_index).name == "gen-000001"  # nothing written half-way
    cfg = service_settings.model_copy(update={"index": small_index, "index_reload_s": 0.2})
    with running(make_app(cfg, pipeline, index=open_index(small_index, encoder.info))) as url:
        with httpx.Client(base_url=url, timeout=60) as c:
            hits = c.post("/search", json={"query": "Who won the game?", "k": 3}).json()["hits"]
            assert len(hits) == 3 and c.get("/info").json()["index"]["generation"] == "gen-000001"
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "kept from an earlier run" in again.stdout and "resumed from" in again.stdout + again.stderr
    assert json.loads((out / "adapt.json").read_text())["verdict"]["why"]


def test_a_generation_embedded_again_by_an_adapted_model_brings_it_into_the_server(
    tmp_path, encoder, service_settings, pipeline, base_model_path, samelang_home
):
    """``reembed_index`` (what ``samelang adapt`` commits): the running server swaps encoder and index together
    when the new generation's model was adapted from the served one; a generation whose note names another
    origin is refused, and the old generation keeps serving."""
    from samelang.core.models.encoder import Encoder
    from samelang.corpora import load_xquad
    from samelang.indexes.index import open_index
    from samelang.indexes.reembed import reembed_index
    from samelang.indexes.writes import build_index
    from samelang.training.biencoder import BiencoderArgs, train_biencoder

    adapted = tmp_path / "adapted"
    train_biencoder(BiencoderArgs(out=adapted, base=str(base_model_path), langs="de", per_lang=2, batch_size=2,
                                  max_steps=1, max_length=32, dev_n_articles=0, device="cpu", lr=1e-2),
                    log=lambda *a: None)  # fmt: skip
    new = Encoder(adapted, home=samelang_home)
    docs = load_xquad(["en"], split="test").documents()[:12]
    out = tmp_path / "live"
    build_index(out, docs, encoder.encode_passages, encoder.info, analyzer=encoder.analyzer)
    cfg = service_settings.model_copy(update={"index": out, "index_reload_s": 0.2})
    app = make_app(cfg, pipeline, index=open_index(out, encoder.info))
    vecs = new.encode_passages([d.text for d in docs])
    with running(app) as url, httpx.Client(base_url=url, timeout=60) as c:
        stranger = {"model": str(adapted), "from": "not-the-served-model"}
        reembed_index(out, vecs, new.info, "gen-000001", stranger, new.analyzer)
        time.sleep(1.5)  # several polls: each refuses it (another model, not adapted from the served one)
        assert c.get("/info").json()["index"]["generation"] == "gen-000001"
        assert len(c.post("/search", json={"query": "Who won?", "k": 2}).json()["hits"]) == 2
        note = {"model": str(adapted), "from": encoder.info.fingerprint}
        reembed_index(out, vecs, new.info, "gen-000002", note, new.analyzer)
        deadline = time.monotonic() + 60
        while c.get("/info").json()["index"]["generation"] != "gen-000003":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert app.state.handlers.pipeline.encoder.info.fingerprint == new.info.fingerprint
        hits = c.post("/search", json={"query": docs[3].text[:200], "k": 1}).json()["hits"]
        assert hits[0]["id"] == docs[3].id
    from samelang.core.catalogue import adapted_model

    assert adapted_model(out, base_model_path, samelang_home) == adapted  # a restarted server serves it too
    assert adapted_model(out, adapted, samelang_home) == adapted
