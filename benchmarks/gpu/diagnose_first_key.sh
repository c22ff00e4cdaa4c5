#!/usr/bin/env bash
# Issue 41, ninth session: where the first key's compile seconds go, and what settling costs at M = 8192 (one GPU).
# 1. the host's import times (a compile worker's start: the interpreter, Triton, the kernel's module);
# 2. benchmarks/diagnose_compile.py: the compile timeline of a first key (GEMM and MoE at M = 256, fresh caches);
# 3. the GEMM validation at M = 8192 (3 fresh tunings per arm, kernels compiled first) with the default settling,
#    without a round's extra settling (--round-settle-ms 0), and with 2 ms screening settles as well.
# Usage: OUT=DIR bash benchmarks/gpu/diagnose_first_key.sh   (CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1)
source "$(dirname "$0")/_setup.sh" /tmp/diagnose_first_key
nproc
for what in "import triton" "import torch" "import examples.gemm_kernels" "import examples.moe_kernels"; do
  s=$(date +%s.%N); python3 -c "$what" 2>/dev/null; e=$(date +%s.%N)
  echo "$what: $(python3 -c "print(round($e - $s, 2))") s"
done | tee "$OUT/imports.txt"
for family in gemm_k4096_n4096 moe; do
  echo "== compile timeline: $family"
  timeout 200 python3 benchmarks/diagnose_compile.py --family "$family" --shape "${SHAPE:-256}" "${smoke[@]}" \
    --out "$OUT/compile_$family.json" > "$OUT/compile_$family.log" 2>&1
  echo "exit $?"; grep -v '"t"' "$OUT/compile_$family.log" | tail -n 40
done
shapes=${SHAPES:-8192}
for arm in "default:" "round0:--round-settle-ms 0" "s2r0:--screen-settle-ms 2 --round-settle-ms 0"; do
  name=${arm%%:*}; extra=${arm#*:}
  echo "== validate $name ($extra)"
  # shellcheck disable=SC2086
  timeout 150 python3 benchmarks/validate_search.py --corpus benchmarks/results/corpus --tunings 3 \
    --family gemm_k4096_n4096 --shapes "$shapes" "${smoke[@]}" $extra --out "$OUT/settle_$name.json" \
    > "$OUT/settle_$name.log" 2>&1
  echo "exit $?"; grep "tuning [0-9]:" "$OUT/settle_$name.log" | cut -c1-400
done
(cd "$OUT" && tar czf diagnose_first_key.tgz ./*.json ./*.log ./*.txt)
