#!/usr/bin/env bash
# Issue 41, seventy-sixth session, one GPU, the final library: session59_call2.sh (the NaN fill on CUDA, every GPU
# test, the one-GPU acceptance, one first key with compiles per space), then the README's MoE campaign alone
# CAMPAIGNS times (campaigns_only.sh). Keeps the 8 files the device tool brings back: the rest go into all.tgz.
# Usage: OUT=DIR CAMPAIGNS=2 bash benchmarks/gpu/session76_call1.sh   (carry arms/fla_site)
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT/c"
OUT=$OUT/c REPEATS=1 bash benchmarks/gpu/session59_call2.sh > "$OUT/c/log1.txt" 2>&1
echo "session59_call2.sh: exit $? after $SECONDS s"
OUT=$OUT/c CALL_S=${CALL_S:-400} CAMPAIGNS=${CAMPAIGNS:-2} RUN_S=${RUN_S:-90} bash benchmarks/gpu/campaigns_only.sh \
  > "$OUT/c/log2.txt" 2>&1
echo "campaigns_only.sh: exit $? after $SECONDS s"
cd "$OUT/c" && tar czf logs.tgz log1.txt log2.txt && tail -n 30 log1.txt && tail -n 30 camp.txt
keep="acceptance.log all.tgz camp.tgz camp.txt first_keys.txt gpu_tests.txt logs.tgz machine.txt"
for f in *; do case " $keep " in *" $f "*) mv "$f" "$OUT/";; *) ;; esac; done
cd "$OUT" && rm -rf c && ls -la "$OUT"
