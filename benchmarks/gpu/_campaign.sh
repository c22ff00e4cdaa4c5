# Sourced by the side-by-side scripts: campaign_alone DIR ROOT GPU CPUS PORT [PRELUDE] runs the README's MoE campaign
# alone (examples/moe_gemm.py --campaign, one process, a fresh HOME, the library of ROOT), on GPU and CPUS, under a
# timeout (CAMPAIGN_TIME, default 120 s), after CAMPAIGN_PREFIX (a command that execs the rest, e.g.
# benchmarks/gpu/no_sys_nice.py); PRELUDE is Python run first in the example's process (e.g. setting timing
# constants). Leaves DIR/campaign.txt, DIR/campaign_rank.log.gz and DIR/races.json (the raced configs' round times of
# every decision: benchmarks/race_samples.py); prints one line: exit status, campaign seconds,
# the library imported. Uses the caller's array `tiny` (--tiny under the CPU smoke).
campaign_alone() {
  local dir=$1 root=$2 gpu=$3 cpus=$4 port=$5 prelude=${6:-} home rc log
  home=$(mktemp -d)
  # python3 -P: the folder it runs in is not put first on sys.path, so PYTHONPATH decides the library
  HOME=$home PYTHONPATH=$root CUDA_VISIBLE_DEVICES=$gpu TRITON_DIST_AUTOTUNE_LOG_DIR=$home/logs RANK=0 LOCAL_RANK=0 \
    WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port ${CAMPAIGN_PREFIX:-} timeout "${CAMPAIGN_TIME:-120}" \
    taskset -c "$cpus" python3 -P - --campaign "${tiny[@]}" > "$dir/campaign.txt" 2>&1 <<PY
import runpy, sys
$prelude
sys.argv[0] = "$root/examples/moe_gemm.py"
runpy.run_path("$root/examples/moe_gemm.py", run_name="__main__")
PY
  rc=$?
  echo "campaign: exit $rc | $(grep -o '"campaign_s": [0-9.]*' "$dir/campaign.txt") | library $(cd /tmp && PYTHONPATH=$root python3 -c 'import triton_dist_tune; print(triton_dist_tune.__file__)')"
  log=$(find "$home/logs" -name '*.log' | head -n 1); [ -n "$log" ] && gzip -c "$log" > "$dir/campaign_rank.log.gz"
  python3 "$(dirname "${BASH_SOURCE[0]}")/../race_samples.py" collect "$home/.triton_dist" "$dir/races.json" 2>/dev/null
  rm -rf "$home"
}

# campaigns_alone DIR COUNT PORT: campaign_alone of this tree COUNT times, each in DIR/<k>-new on GPU 0 and its CPUs,
# while RUN_S (default 100) seconds of the caller's CALL are left (each under 110 s at most, or what is left); one
# line per run.
campaigns_alone() {
  local dir=$1 count=$2 port=$3 k left
  for k in $(seq "$count"); do
    left=$((CALL - SECONDS))
    if [ "$left" -lt "${RUN_S:-100}" ]; then echo "run $k skipped: $left s left"; continue; fi
    mkdir -p "$dir/$k-new"
    echo "run $k new $(CAMPAIGN_TIME=$((left - 5 < 110 ? left - 5 : 110)) campaign_alone "$dir/$k-new" "$PWD" 0 \
      "${cpus[0]}" $((port + k))) after $SECONDS s"
  done
}

# swapped_pairs DIR A B: the caller's `one PASS ARM GPU` for arms A and B side by side, A on GPU 0 and B on GPU 1,
# then the GPUs swapped; each one's output in DIR/<arm><pass>.txt.
swapped_pairs() {
  local dir=$1 a=$2 b=$3 pass
  for pass in 1 2; do
    one "$pass" "$a" $((pass - 1)) > "$dir/$a$pass.txt" 2>&1 &
    one "$pass" "$b" $((2 - pass)) > "$dir/$b$pass.txt" 2>&1 &
    wait
  done
}

# swapped_rounds ROUNDS: the README's MoE campaign of this tree (`new`) beside ARM_OLD (`old`), each run in
# OUT/NAME/r<round>-<pass>-<arm> (pair_run), side by side then the GPUs swapped (swapped_pairs), ROUNDS times; every
# run's line gathered in OUT/NAME.txt and printed, the runs packed into OUT/NAME.tgz. Needs pair_setup first.
swapped_rounds() {
  local round
  one() {  # pass, arm, GPU
    pair_run "round $round pass $1 $2 gpu $3" "$OUT/$NAME/r$round-$1-$2" "$2" "$3"
  }
  for round in $(seq "$1"); do
    mkdir -p "$OUT/$NAME/round$round"
    swapped_pairs "$OUT/$NAME/round$round" new old
  done
  cat "$OUT"/"$NAME"/round*/*.txt > "$OUT/$NAME.txt"
  (cd "$OUT" && tar czf "$NAME.tgz" "$NAME" && rm -rf "$NAME")
  cat "$OUT/$NAME.txt"
}

# pair_defaults: what the side-by-side scripts share: unbuffered Python, `tiny` (the example's --tiny under the CPU
# smoke) and `cpus` (each GPU's CPUs: 0-15 and 16-31; one CPU each under the CPU smoke).
pair_defaults() {
  export PYTHONUNBUFFERED=1
  tiny=(); cpus=(0-15 16-31)
  if [ -n "${CPU_SMOKE:-}" ]; then tiny=(--tiny); cpus=(0 1); fi
}

# gpu_tests FILE: the GPU tests of the captures (tests/test_graphs_cuda.py) with this tree, their last lines in FILE
# and on the screen; nothing under the CPU smoke.
gpu_tests() {
  [ -n "${CPU_SMOKE:-}" ] && return 0
  (PYTHONPATH=$PWD python3 -m pytest -q -p no:cacheprovider tests/test_graphs_cuda.py 2>&1 \
    || PYTHONPATH=$PWD python3 tests/test_graphs_cuda.py 2>&1) | tail -n 5 > "$1"
  cat "$1"
}

# pair_setup NAME OLD: OUT (required), NAME (default NAME) with OUT/NAME made, and `old` (ARM_OLD, default OLD);
# then pair_defaults and the GPU tests (OUT/NAME/gpu_tests.txt).
pair_setup() {
  OUT=${OUT:?set OUT}; NAME=${NAME:-$1}; mkdir -p "$OUT/$NAME"
  old=$(cd "${ARM_OLD:-$2}" && pwd)
  pair_defaults
  gpu_tests "$OUT/$NAME/gpu_tests.txt"
}

# pair_run LABEL DIR ARM GPU [PRELUDE]: campaign_alone of ARM (new: this tree; old: the caller's `old`) in DIR on GPU
# and its CPUs, printed after LABEL with the count of keys that fell back to eager timing.
pair_run() {
  local root=$PWD
  [ "$3" = old ] && root=$old
  mkdir -p "$2"
  echo "$1 $(CAMPAIGN_TIME=110 campaign_alone "$2" "$root" "$4" "${cpus[$4]}" $((29850 + $4)) "${5:-}") | eager fallbacks $(zcat "$2/campaign_rank.log.gz" 2>/dev/null | grep -c 'cannot be captured')"
}

# placement_arms DIR GPU CPUS PORT ARM...: the README's MoE campaign once per ARM, in turn (`one`: one output
# placement, lockstep.PLACEMENTS = 1; `new`: this tree as it is), each in DIR/<k>-<arm> by campaign_alone; each run's
# line and the count of races that ranked a leader by its mean over placements (or a slower level) appended to
# DIR.txt and printed, then the runs' parts (campaign_parts.py); DIR is then packed into DIR.tgz and removed.
placement_arms() {
  local dir=$1 gpu=$2 cpus=$3 port=$4 k=0 arm prelude
  shift 4
  for arm in "$@"; do
    k=$((k + 1)); prelude=""
    [ "$arm" = one ] && prelude="import triton_dist_tune.measure.lockstep as _l; _l.PLACEMENTS = 1"
    mkdir -p "$dir/$k-$arm"
    echo "$k $arm $(CAMPAIGN_TIME=100 campaign_alone "$dir/$k-$arm" "$PWD" "$gpu" "$cpus" "$port" "$prelude")" \
      | tee -a "$dir.txt"
    zcat "$dir/$k-$arm/campaign_rank.log.gz" 2>/dev/null | grep -c "or placement too" \
      | sed "s/^/  races where a leader was ranked by its mean: /" | tee -a "$dir.txt"
  done
  python3 benchmarks/campaign_parts.py "$dir"/*-* | tee -a "$dir.txt"
  (cd "$(dirname "$dir")" && tar czf "$(basename "$dir").tgz" "$(basename "$dir")" && rm -rf "$(basename "$dir")")
}

# bench_py LABEL TXT LIMIT CPUS SCRIPT ARG...: a benchmark script run with this tree's library, under `timeout
# LIMIT`, pinned to CPUS, with a fresh HOME (BENCH_HOME if set: a Triton cache shared by the runs of one call); its
# output in TXT, then the line "LABEL: exit STATUS".
bench_py() {
  local label=$1 txt=$2 limit=$3 cpus=$4 rc
  shift 4
  HOME=${BENCH_HOME:-$(mktemp -d)} PYTHONPATH=$PWD timeout "$limit" taskset -c "$cpus" python3 "$@" > "$txt" 2>&1
  rc=$?
  echo "$label: exit $rc" >> "$txt"
}
