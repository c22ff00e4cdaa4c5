#!/usr/bin/env bash
# Issue 41, owed by the eleventh session: did the MoE's corpus validation drop (10 of 24 within 1.02 on one host,
# 16 of 24 in the ninth and seventh sessions on others) come from the library or from the host? The validation of
# one family with this tree's library and an older one (ARM_OLD: a folder holding its triton_dist_tune and
# benchmarks/*.py, made with `git archive COMMIT triton_dist_tune examples 'benchmarks/*.py'`; carry it), alternating
# (ARMS, default "new old new old"), each run a fresh HOME, judged by this tree's corpus; then one line per run:
# how many choices within 1.02, the median and worst ratio, and of the choices over 1.02 how many the host itself
# measured ahead of the corpus's best (benchmarks/corpus_vs_host.py).
# JUDGE=N: the new arm also judges its choices on this host (validate_search.py --judge-here N; an old arm may not
# have the option).
# TUNINGS=N: fresh tunings per shape in each run (default 3). SHARED_TRITON_CACHE=DIR: every run compiles into, and
# loads from, one Triton cache folder (the arms' kernels must be the same: only the first run compiles the space;
# each run's decision cache is still empty; the old arm's benchmarks/validate_search.py must read
# TDT_BENCH_SHARED_TRITON_CACHE, else it compiles into a fresh folder of its own).
# Usage: OUT=DIR ARM_OLD=arms/s9v [FAMILY=moe] [SHAPES=16,64,512] [VTIME=130] [JUDGE=8] [TUNINGS=3]
#        [SHARED_TRITON_CACHE=DIR] bash benchmarks/gpu/validate_ab.sh
#        (leaves validate_ab.tgz alone in OUT)
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 ARM_OLD=DIR FAMILY=gemm_k4096_n4096 SHAPES=16 bash benchmarks/gpu/validate_ab.sh
source "$(dirname "$0")/_setup.sh" /tmp/validate_ab
[ -n "${SHARED_TRITON_CACHE:-}" ] && export TDT_BENCH_SHARED_TRITON_CACHE=$SHARED_TRITON_CACHE  # read by validate_search.py
k=0
for arm in ${ARMS:-new old new old}; do
  k=$((k + 1)); root=$PWD; [ "$arm" = old ] && root=$(cd "${ARM_OLD:?set ARM_OLD}" && pwd)
  judge=(); [ "$arm" = new ] && [ -n "${JUDGE:-}" ] && judge=(--judge-here "$JUDGE")
  HOME=$(mktemp -d) PYTHONPATH=$root timeout "${VTIME:-130}" python3 "$root/benchmarks/validate_search.py" \
    --corpus benchmarks/results/corpus --family "${FAMILY:-moe}" --shapes "${SHAPES:-16,64,512}" --tunings "${TUNINGS:-3}" \
    --out "$OUT/run_$k-$arm.json" "${smoke[@]}" "${judge[@]}" > "$OUT/vlog_$k-$arm.txt" 2>&1
  echo "run $k $arm: exit $? $(python3 - "$OUT/vlog_$k-$arm.txt" <<'PY'
import re, statistics, sys
ratios = [float(r) for r in re.findall(r"tuning \d+: \S+ ratio ([0-9.]+)", open(sys.argv[1]).read())]
print(f"{sum(r <= 1.02 for r in ratios)} of {len(ratios)} within 1.02, median {statistics.median(ratios):.3f}, "
      f"worst {max(ratios):.3f}" if ratios else "no tuning judged")
PY
)"
  [ -s "$OUT/run_$k-$arm.json" ] && echo "  $(python3 benchmarks/corpus_vs_host.py "$OUT/run_$k-$arm.json" | tail -n 1)"
done
(cd "$OUT" && tar czf validate_ab.tgz ./*.txt ./*.json 2>/dev/null)
find "$OUT" -mindepth 1 -maxdepth 1 ! -name validate_ab.tgz -exec rm -rf {} +  # the archive alone comes back
