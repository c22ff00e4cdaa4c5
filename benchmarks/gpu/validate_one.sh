#!/usr/bin/env bash
# Issue 39's single-GPU check that the noise-aware search did not make the one-GPU choices worse: the corpus
# validation of benchmarks/gpu/validate.sh (3 fresh tunings per shape, each choice judged by the H200 corpus), run
# on ONE GPU, one family after another (never two at once: they would share the GPU and its clock), each under a
# time limit (VTIME seconds, default 250). Writes $OUT/validate_one.tgz and $OUT/vlog_<family>.txt.
# Usage: OUT=DIR [FIRST_KEY=256] bash benchmarks/gpu/validate_one.sh [FAMILY ...]   (default: gemm_k4096_n4096 moe)
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 bash benchmarks/gpu/validate_one.sh gemm_k4096_n4096
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/validate_one}; mkdir -p "$OUT/validate_one"
families=("$@"); [ ${#families[@]} -eq 0 ] && families=(gemm_k4096_n4096 moe)
smoke=(); [ -n "${CPU_SMOKE:-}" ] && smoke=(--cpu-smoke)
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
first=(); [ -n "${FIRST_KEY:-}" ] && first=(--first-key "$FIRST_KEY")  # the first family also times a first key
for family in "${families[@]}"; do
  echo "== $family (limit ${VTIME:-250} s)"
  timeout "${VTIME:-250}" python3 benchmarks/validate_search.py --corpus benchmarks/results/corpus --tunings 3 \
    --family "$family" --out "$OUT/validate_one/$family.json" "${smoke[@]}" "${first[@]}" > "$OUT/vlog_$family.txt" 2>&1
  first=()
  echo "exit $? after $SECONDS s"; tail -n 3 "$OUT/vlog_$family.txt"
done
(cd "$OUT" && tar czf validate_one.tgz validate_one)
python3 - "$OUT/validate_one" <<'PY'
import json, sys, pathlib
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    d = json.loads(f.read_text())
    ratios = [r["ratio"] for r in d["rows"] if r["ratio"] is not None]
    for r in d["rows"]:
        print(d["family"], r["m"], r["tuning"], r["choice"], r["ratio"], round(r["seconds"], 2), r["best_screened"],
              r["search"])
    if ratios:
        ratios.sort()
        print(f"{d['family']}: {len(ratios)} tunings, within 1.02: {sum(x <= 1.02 for x in ratios)}, median "
              f"{ratios[len(ratios) // 2]:.3f}, worst {ratios[-1]:.3f}")
PY
