"""``samelang serve`` as shipped: the real command in a subprocess, with the defaults of
``models/serving.json`` and nothing else configured, checked over HTTP.

Only ``--langs en`` (the one-language demo index, 240 paragraphs, built once into the shared
``SAMELANG_HOME``) and ``--generator none`` keep it fast; every other setting is the shipped
default, so a change of ``serving.json`` that the server does not load (a renamed model folder,
a key the registry misreads) fails here and not in production."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import httpx
import pytest

from samelang.bench.http_load import ServerProcess, free_port
from samelang.core.catalogue import default_reader
from samelang.corpora import load_xquad

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def served(samelang_home, tmp_path_factory):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # the child sees no SAMELANG_* setting but the model cache: the shipped defaults, nothing else
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAMELANG_")}
    env["SAMELANG_HOME"] = str(samelang_home)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "samelang", "serve", "--port", str(port), "--langs", "en", "--generator", "none"]
    log = tmp_path_factory.mktemp("serve") / "server.log"
    with ServerProcess(cmd, url, log, env=env, cwd=REPO, ready_timeout=900):  # the first run builds the index
        with httpx.Client(base_url=url, timeout=120) as client:
            yield client


def test_serve_runs_the_shipped_defaults(served, base_model_path):
    from samelang.core.models.cross_encoder import BI_ENCODER_COSINE

    card = json.loads((REPO / "models" / "serving.json").read_text())["served"]
    retriever = base_model_path.name if card["retriever"] == "base" else card["retriever"]
    reranks = card["reranker"] != "none" and card.get("rerank", True)  # "rerank": false: /rerank's model only

    ready = served.get("/ready")
    assert ready.status_code == 200, ready.text
    assert ready.json()["documents"] == len(load_xquad(["en"], split="all").documents()) == 240

    info = served.get("/info").json()
    measured, fusion = info["defaults"].pop("measured"), info["defaults"].pop("fusion", None)
    assert measured["chosen"] == json.loads((REPO / "models" / "serving.json").read_text())["chosen"]
    if (REPO / "models" / card["retriever"] / "fused.json").exists():  # a fused retriever names both models
        assert fusion["same_language_model"] and fusion["cross_language_model"] and fusion["cross_offset"] is not None
    else:
        assert fusion is None
    assert info["defaults"] == {
        "retriever": retriever,
        "lexical_weight": card.get("lexical_weight") or None,  # the demo index has its BM25 half
        "reranker": card["reranker"] if reranks else None,
        "rerank_k": card["rerank_k"] if reranks else None,
        "rerank_fusion": card.get("rerank_fusion", 0.0) if reranks else None,
        "candidates": card["candidates"],
        "reader": default_reader(None).name if default_reader(None) else None,  # the shipped reader, when trained
        "reranks_by_default": reranks,
        "not_measured_on": {},  # the shipped models are the ones models/serving.json was measured on
    }
    assert info["encoder"]["name"] == retriever and info["index"]["source"] == "xquad:en:all"
    if card["reranker"] in ("none", "cosine"):
        assert info["reranker"]["kind"] == BI_ENCODER_COSINE
    else:
        assert info["reranker"]["name"] == card["reranker"]
    assert info["generator"]["name"] == "none" and info["micro_batching"]["enabled"]

    questions = load_xquad(["en"], split="test").questions[:5]
    found = 0
    for q in questions:
        r = served.post("/search", json={"query": q.text, "k": 10})
        assert r.status_code == 200, r.text
        body = r.json()
        assert len(body["hits"]) == 10 and body["query_lang"] == "en"
        assert body["components"]["retriever"] == retriever
        found += q.group in {h["group"] for h in body["hits"]}
    assert found >= 4, found  # the gold paragraph is retrieved: the index and the model belong together


def test_the_server_answers_from_onnx_without_torch_and_reports_its_memory(served):
    """Served from finished ONNX exports (weights memory-mapped, tokenizer saved beside them) and
    without the embedded generator, the server never imports torch, the extractive reader included
    (exported before the server loads): one copy of each model is resident, ONNX Runtime's. /info
    reports the load-time growth per component."""
    assert served.post("/search", json={"query": "Who founded the Normans?", "k": 3}).status_code == 200
    info = served.get("/info").json()
    memory = info["memory"]
    assert memory["torch_imported"] is False, memory
    assert info["reader"]["backend"] == "onnx", info["reader"]
    assert set(memory["load_rss_mb"]) == {"encoder", "index", "reranker", "reader", "generator", "language_id"}
    assert memory["process_rss_mb"] > 0 and memory["process_peak_rss_mb"] >= memory["before_load_rss_mb"] > 0
    assert all(isinstance(v, (int, float)) for v in memory["load_rss_mb"].values()), memory


def test_the_front_process_reports_both_processes_metrics(served):
    """``samelang serve`` is a front process and the server process behind it (samelang/service/front.py):
    the front's /metrics holds the server's counters too (prometheus_client's multi-process mode)."""
    assert served.post("/search", json={"query": "Who founded the Normans?", "k": 3}).status_code == 200
    metrics = served.get("/metrics")
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    searches = [ln for ln in metrics.text.splitlines() if ln.startswith("samelang_requests_total{") and
                'route="/search"' in ln and 'status="200"' in ln]  # fmt: skip
    assert searches and float(searches[0].rsplit(" ", 1)[1]) >= 1, metrics.text[:2000]
    assert "samelang_queue_depth" in metrics.text and "samelang_request_seconds_bucket" in metrics.text


def test_the_service_commands_do_not_import_training_or_torch():
    """``samelang serve`` / ``index`` / ``models`` are joined without ``training`` (which imports
    torch: ~0.4 GB and ~2 s a server from ONNX never uses), and their help starts without faiss,
    numpy, the bench or the pipeline; the full help still lists every command."""
    import subprocess

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "samelang", "serve", "--help"],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0 and "--generator" in proc.stdout, proc.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time")}
    heavy = {"torch", "faiss", "numpy", "samelang.training", "samelang.bench", "samelang.retrieval.pipeline"}
    assert "samelang.service.serve" in imported and not imported & heavy, sorted(imported)[:50]
    full = subprocess.run([sys.executable, "-m", "samelang", "--help"], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert full.returncode == 0 and all(c in full.stdout for c in ("serve", "index", "train", "eval", "bench"))


def test_the_switch_interval_comes_from_its_flag_or_env_twin_and_is_bounded(monkeypatch):
    """``--switch-interval-ms`` / ``SAMELANG_SWITCH_INTERVAL_MS`` sets the interpreter's switch interval
    for the whole server process; 0 (a thread never yields) is refused naming the field."""
    from pydantic import ValidationError

    from samelang.service.api.server import apply_switch_interval
    from samelang.service.config import ServiceSettings

    monkeypatch.setenv("SAMELANG_SWITCH_INTERVAL_MS", "1")
    cfg = ServiceSettings()
    assert cfg.switch_interval_ms == 1.0
    before = apply_switch_interval(cfg)
    try:
        assert sys.getswitchinterval() == pytest.approx(0.001)
    finally:
        sys.setswitchinterval(before)
    with pytest.raises(ValidationError, match="switch_interval_ms"):
        ServiceSettings(switch_interval_ms=0)
