# Sourced by the session scripts that end with the one-GPU acceptance: acceptance_left LEFT runs
# benchmarks/gpu/acceptance.py (fresh HOME, CPUs 0-15) into $OUT/acc under LEFT seconds (less 10 for its budget),
# when LEFT exceeds MIN (default 110); prints its exit status and table, and leaves $OUT/acc.tgz and
# $OUT/acc_table.md. ACC_ARGS: more arguments for the script. Where the tree carries arms/fla_site
# (benchmarks/gpu/fla_site.sh), it goes on PYTHONPATH so that the fla steps run instead of printing `skipped`.
# Also: unbuffered Python, CALL (the call's seconds: CALL_S, default 575) and gpu_state (the GPU's clock, power and
# temperature, one line each).
set -u
export PYTHONUNBUFFERED=1
CALL=${CALL_S:-575}
gpu_state() {
  nvidia-smi --query-gpu=index,name,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv 2>&1
}

acceptance_left() {
  local left=$1
  if [ "$left" -le "${MIN:-110}" ]; then
    echo "acceptance skipped: $left s left"
    return 0
  fi
  local path=${PYTHONPATH:-}
  [ -d arms/fla_site ] && path=$PWD/arms/fla_site${path:+:$path}
  HOME=$(mktemp -d) PYTHONPATH=$path timeout "$left" taskset -c 0-15 python3 benchmarks/gpu/acceptance.py \
    --out "$OUT/acc" --budget $((left - 10)) ${ACC_ARGS:-} > "$OUT/acc_stdout.txt" 2>&1
  echo "acceptance: exit $? after $SECONDS s"; grep '^|' "$OUT/acc/acceptance.md" | cut -c1-300
  cp "$OUT/acc/acceptance.md" "$OUT/acc_table.md"
  (cd "$OUT" && tar czf acc.tgz acc acc_stdout.txt && rm -rf acc acc_stdout.txt)
}
