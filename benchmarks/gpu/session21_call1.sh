#!/usr/bin/env bash
# Issue 41, twenty-first session, the first call on a freshly started nvidia-h200 (one GPU, 16 CPUs): the README's
# MoE campaign alone, this tree, RUNS times (default 4), with what the host's CPUs did around each run
# (benchmarks/host_sampler.py, at a raised priority: CPU shares every 0.5 s, steal included, the mean MHz, a small
# fixed single-thread workload's ms, and a larger one before and after each run): is a slow run a slow host?
# Leaves NAME.tgz (rank logs, host.csv, marks.txt, probes.txt), NAME.txt (each run's line, then the host report).
# Usage: OUT=DIR [NAME=camp21a] [RUNS=4] bash benchmarks/gpu/session21_call1.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 OUT=DIR RUNS=1 bash benchmarks/gpu/session21_call1.sh
set -u
source "$(dirname "$0")/_campaign.sh"
OUT=${OUT:?set OUT}; NAME=${NAME:-camp21a}; dir=$OUT/$NAME; mkdir -p "$dir"
pair_defaults
cpus=0-15; [ -n "${CPU_SMOKE:-}" ] && cpus=0
{ nproc; lscpu 2>/dev/null | grep -E "Model name|Thread|Core|Socket|MHz|NUMA node\(s\)"; cat /proc/loadavg
  nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader 2>/dev/null; } > "$dir/host.txt"
nice -n -10 true 2>/dev/null && raise=(nice -n -10) || raise=()
"${raise[@]}" python3 benchmarks/host_sampler.py sample "$dir/host.csv" & sampler=$!
echo "start-of-call $(python3 benchmarks/host_sampler.py probe)" > "$dir/probes.txt"
for k in $(seq "${RUNS:-4}"); do
  mkdir -p "$dir/$k-new"
  echo "$k before $(python3 benchmarks/host_sampler.py probe)" >> "$dir/probes.txt"
  echo "$k start $(date +%s.%N)" >> "$dir/marks.txt"
  line=$(CAMPAIGN_TIME=100 campaign_alone "$dir/$k-new" "$PWD" 0 "$cpus" 29880)
  echo "$k end $(date +%s.%N)" >> "$dir/marks.txt"
  echo "$k after $(python3 benchmarks/host_sampler.py probe)" >> "$dir/probes.txt"
  echo "$k new $line" | tee -a "$OUT/$NAME.txt"
done
kill "$sampler"
{ cat "$dir/host.txt"; cat "$dir/probes.txt"; python3 benchmarks/host_sampler.py report "$dir/host.csv" "$dir/marks.txt"
  python3 benchmarks/campaign_parts.py "$dir"/*-new; } | tee -a "$OUT/$NAME.txt"
(cd "$OUT" && tar czf "$NAME.tgz" "$NAME" && rm -rf "$NAME")
