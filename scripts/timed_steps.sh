# shellcheck shell=bash
# Sourced by scripts/gpu_smoke.sh and scripts/gpu_train.sh (which set TIMINGS, a file):
#   step NAME COMMAND...   runs the command, prints and records how long it took in $TIMINGS
step() {
  local name=$1 start=$SECONDS
  shift
  echo "== $name: $*"
  "$@"
  echo "$name $((SECONDS - start)) s" | tee -a "$TIMINGS"
}
