#!/usr/bin/env bash
# Issue 41, sixteenth session, one call on nvidia-h200-x2: where the README's MoE campaign spends its rank's wall
# time, and what captures without torch.cuda.graph's empty_cache save. This tree's campaign alone, sampled by
# benchmarks/stack_sampler.py (stacks.txt beside each run), as is (`cur`) beside the same with
# benchmarks/gpu/capture_variant.py installed (`var`), side by side then the GPUs swapped (GPU 0 on CPUs 0-15, GPU 1
# on CPUs 16-31). Each prints the allocator's peak and reserved memory at exit. Leaves camp16.tgz and camp16.txt.
# Usage: OUT=DIR bash benchmarks/gpu/session16_call1.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/session16_call1.sh
set -u
source "$(dirname "$0")/_campaign.sh"
OUT=${OUT:?set OUT}; mkdir -p "$OUT/camp16"
pair_defaults
one() {  # pass, arm (cur or var), GPU
  local dir="$OUT/camp16/$1-$2" root=$PWD install=memory_report
  [ "$2" = var ] && install=install
  [ -n "${CPU_SMOKE:-}" ] && install='__name__'  # no CUDA: the sampler alone
  mkdir -p "$dir"
  local prelude="import sys; sys.path[:0] = ['$root/benchmarks', '$root/benchmarks/gpu']
import stack_sampler; stack_sampler.start('$dir/stacks.txt')
if '$install' != '__name__':
    import capture_variant; capture_variant.$install()"
  echo "$1 $2 gpu $3 $(CAMPAIGN_TIME=110 campaign_alone "$dir" "$root" "$3" "${cpus[$3]}" $((29840 + $3)) "$prelude")"
  grep -h MEMORY "$dir/campaign.txt"
}
swapped_pairs "$OUT/camp16" cur var
cat "$OUT"/camp16/*.txt > "$OUT/camp16.txt"
(cd "$OUT" && tar czf camp16.tgz camp16 && rm -rf camp16)
cat "$OUT/camp16.txt"
