#!/usr/bin/env bash
# Issue 41, sixteenth session, one call on nvidia-h200-x2: the GPU tests of the captures (tests/test_graphs_cuda.py),
# then the README's MoE campaign alone, this tree (`new`) beside ARM_OLD (`old`, default arms/s15f = `git archive
# c7316a0 triton_dist_tune examples`; carry it), side by side then the GPUs swapped (GPU 0 on CPUs 0-15, GPU 1 on
# CPUs 16-31); the first pass sampled by benchmarks/stack_sampler.py (every 5 ms: stacks.txt), the second not. Each
# line says how many keys fell back to eager timing. Leaves NAME.tgz and NAME.txt (NAME default camp16b).
# Usage: OUT=DIR [NAME=camp16c] bash benchmarks/gpu/session16_call2.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session16_call2.sh
set -u
source "$(dirname "$0")/_campaign.sh"
pair_setup camp16b arms/s15f
one() {  # pass, arm (new: this tree; old: ARM_OLD), GPU
  local dir="$OUT/$NAME/$1-$2" prelude=""
  [ "$1" = 1 ] && prelude="import sys; sys.path.insert(0, '$PWD/benchmarks')
import stack_sampler; stack_sampler.start('$dir/stacks.txt', 0.005)"
  pair_run "$1 $2 gpu $3" "$dir" "$2" "$3" "$prelude"
}
swapped_pairs "$OUT/$NAME" new old
cat "$OUT"/$NAME/*.txt > "$OUT/$NAME.txt"
(cd "$OUT" && tar czf $NAME.tgz $NAME && rm -rf $NAME)
cat "$OUT/$NAME.txt"
