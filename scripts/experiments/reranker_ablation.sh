#!/usr/bin/env bash
# The ablation of lamar-e5-small-v3's recipe (issue 43): the same commands as its card with one part
# taken out, then each model judged side by side on the dev articles' questions (every trainer holds
# them out), alone and fused with the retriever (scripts/experiments/rerank_fusion.py --compare).
#   no-lc:         stage 2 from the same stage-1 model, ADR-MSE only (--objective no-lc)
#   no-relevance:  stages 1 + 2 without the relevance stage: stage 1 starts from the base model and
#                  distils the fused retriever (there is no relevance model to be the teacher)
#   relevance:     the relevance stage alone (models/lamar-e5-small-v3-relevance)
# Models land in runs/ablation/ (not shipped); a finished one is kept, a stopped one resumes.
# About 70 min of training and 25 min of scoring on 2 cores; usage:
#   bash scripts/experiments/reranker_ablation.sh [--card]   (--card: the table into the v3 card)
set -euo pipefail
out=runs/ablation
langs=en,ar,de,el,es,hi,ro,ru,th,tr,vi,zh
common=(--hold-out '' --epochs 1.0 --batch-size 16 --lr 0.0002 --warmup 0.1 --weight-decay 0.0 --no-full
        --lora-r 16 --lora-alpha 32 --lora-dropout 0.05 --max-length 256 --precision auto --seed 0
        --dev-n-articles 3 --langs "$langs" --n-sampled 3 --lambda-lc 2.0 --negatives-per-query 4
        --dev-questions 6 --negatives e5-small-fused-v3)
train() {  # OUT ARGS...: skipped when OUT holds a finished model
    local dest=$1; shift
    [[ -f $dest/adapter_model.safetensors ]] && { echo "kept: $dest"; return; }
    samelang train reranker --out "$dest" "${common[@]}" "$@"
}
train $out/no-lc --stage 2 --init models/lamar-e5-small-v3-stage1 --teacher cosine --rounds 1 --repeats 2 \
    --objective no-lc --ict-groups 800
train $out/no-relevance-stage1 --stage 1 --teacher e5-small-fused-v3 --rounds 2 --repeats 1 --objective full \
    --ict-groups 0
train $out/no-relevance --stage 2 --init $out/no-relevance-stage1 --teacher cosine --rounds 1 --repeats 2 \
    --objective full --ict-groups 800
card=()
[[ ${1:-} == --card ]] && card=(--card models/lamar-e5-small-v3)
python scripts/experiments/rerank_fusion.py --per-lang 24 "${card[@]}" \
    --compare "v3 (full recipe)=lamar-e5-small-v3,without L_LC=$out/no-lc,without the relevance stage=$out/no-relevance,relevance stage only=lamar-e5-small-v3-relevance"
