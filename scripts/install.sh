#!/usr/bin/env bash
# Install samelang into the active virtual environment, with the portable build flags.
#   bash scripts/install.sh        the service: extras cpu + generator (then: samelang serve)
#   bash scripts/install.sh test   the test suite: extras cpu + test, Debian's chromium for the audit
#                                  page's browser test, and the models prepared (then: python -m pytest)
# The README's two commands and CI (.ci/run) both run this script, so that what they say stays true.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-serve}"
case "$mode" in serve | test) ;; *) echo "usage: bash scripts/install.sh [test]" >&2; exit 2 ;; esac
if ! python -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)'; then
  echo "no virtual environment is active: python3 -m venv .venv && . .venv/bin/activate, then run this again" >&2
  exit 2
fi
# llama-cpp-python (the embedded generator) ships as source: build it for any x86-64 with AVX2. Its
# default native build can die with SIGILL on VMs that advertise AMX. A CMAKE_ARGS already set wins.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON}"
python -m pip install -q --upgrade pip
start=$SECONDS
if [ "$mode" = serve ]; then
  # pip, not uv: torch==2.13.0 (pinned) is then the local CPU build on this kind of machine
  python -m pip install -q -e '.[cpu,generator]'
  echo "pip install: $((SECONDS - start)) s (llama.cpp compiles: ~6 min on 2 cores)"
  start=$SECONDS
  samelang models prepare --served  # the base model converted, the served models' graphs exported (~2 min)
  echo "models prepare: $((SECONDS - start)) s"
  exit 0
fi
python -m pip install -q -e '.[cpu,test]'
echo "pip install: $((SECONDS - start)) s"
start=$SECONDS
bash scripts/install_chromium.sh  # the audit page's browser test (Debian's chromium, no download)
echo "chromium: $((SECONDS - start)) s"
start=$SECONDS
samelang models prepare --generator --served  # as above, and the generator's GGUF assembled
echo "models prepare: $((SECONDS - start)) s"
