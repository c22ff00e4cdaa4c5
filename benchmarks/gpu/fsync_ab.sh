#!/usr/bin/env bash
# Issue 41, owed by the fourteenth session: how much of the README's MoE campaign is the journal's fsyncs? A tuning
# fsyncs one journal record before every warm-up, capture and sample of a config and one per outcome (about ten
# thousand in the campaign), while 16 compile workers write Triton's cache on the same disk; guarding each capture
# (one record more per config) grew the campaign's capture part by 1.7-2.8 s where an idle fsync costs 0.08 ms
# (results/session_h200_14, calls 6 and 7). The campaign alone with the journal as it is (`sync`) and with its
# fsyncs skipped in the example's process only (`nosync`: os.fsync replaced before the tuner starts; a measurement,
# not a mode), side by side on the two GPUs of an x2 host (GPU 0 on CPUs 0-15, GPU 1 on CPUs 16-31), then swapped.
# Leaves fsync.tgz and fsync.txt. Usage: OUT=DIR bash benchmarks/gpu/fsync_ab.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR bash benchmarks/gpu/fsync_ab.sh
set -u
source "$(dirname "$0")/_campaign.sh"
OUT=${OUT:?set OUT}; mkdir -p "$OUT/fsync"
pair_defaults
nosync='import os
fsynced = [0]
def _counted(fd): fsynced[0] += 1
os.fsync = _counted
import atexit
atexit.register(lambda: print(f"fsyncs skipped: {fsynced[0]}"))'
one() {  # pass, arm, GPU
  local prelude=""; [ "$2" = nosync ] && prelude=$nosync
  mkdir -p "$OUT/fsync/$1-$2"
  echo "$1 $2 gpu $3 $(CAMPAIGN_TIME=110 campaign_alone "$OUT/fsync/$1-$2" "$PWD" "$3" "${cpus[$3]}" $((29840 + $3)) \
    "$prelude")"
}
swapped_pairs "$OUT/fsync" sync nosync
cat "$OUT"/fsync/*.txt > "$OUT/fsync.txt"
grep -h "fsyncs skipped" "$OUT"/fsync/*/campaign.txt >> "$OUT/fsync.txt"
(cd "$OUT" && tar czf fsync.tgz fsync && rm -rf fsync)
cat "$OUT/fsync.txt"
