#!/usr/bin/env bash
# One GPU: the corpus validation (benchmarks/validate_search.py: fresh tunings, each choice judged by the H200
# corpus, seconds per key) of two or more source trees of the library side by side in one call, in the order
# A B ... B A (each arm twice, mirrored, so that a drift of the machine over the call weighs on every arm alike;
# MIRROR=0: A B ..., each arm once).
# An arm is NAME=TREE: TREE a checkout or an export of a commit (git archive COMMIT triton_dist_tune benchmarks/*.py
# examples | tar -x -C arms/NAME; arms/ is ignored: carry it). Each run is its own process with a fresh HOME and
# Triton cache; every run reads the corpus of this checkout.
# Usage: OUT=DIR FAMILY=gemm_k4096_n4096 SHAPES=4096,8192 ARMS="main=arms/main new=." [STIME=150] \
#          bash benchmarks/gpu/side_by_side_trees.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 (then SHAPES are the smoke family's)
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/side_trees}; mkdir -p "$OUT/runs"
FAMILY=${FAMILY:-gemm_k4096_n4096}
read -r -a arms <<< "${ARMS:?ARMS=\"NAME=TREE ...\"}"
smoke=(); [ -n "${CPU_SMOKE:-}" ] && smoke=(--cpu-smoke)
shapes=(); [ -n "${SHAPES:-}" ] && shapes=(--shapes "$SHAPES")
order=("${arms[@]}")  # MIRROR=0: each arm once, in the order given
[ "${MIRROR:-1}" != 0 ] && for ((i = ${#arms[@]} - 1; i >= 0; i--)); do order+=("${arms[i]}"); done
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
n=0
for arm in "${order[@]}"; do
  n=$((n + 1)); name=${arm%%=*}; tree=${arm#*=}
  HOME=$(mktemp -d) timeout "${STIME:-150}" python3 "$tree/benchmarks/validate_search.py" \
    --corpus benchmarks/results/corpus --family "$FAMILY" --tunings "${TUNINGS:-3}" "${shapes[@]}" "${smoke[@]}" \
    --out "$OUT/runs/${n}_${name}.json" > "$OUT/runs/${n}_${name}.txt" 2>&1
  echo "run $n: $name ($tree) exit $? after $SECONDS s"
  grep -o "M=[0-9]* tuning [0-9]: [^ ]* ratio [^ ]* in [0-9.]* s" "$OUT/runs/${n}_${name}.txt"
done
python3 - "$OUT/runs" > "$OUT/summary.md" <<'PY'
import json, pathlib, sys
from collections import defaultdict
rows = defaultdict(list)
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    arm = path.stem.split("_", 1)[1]
    rows[arm] += json.loads(path.read_text())["rows"]
print("| arm | tunings | within 1.02 | median | worst | seconds per key by M (min-max) | configs screened by probe alone |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for arm, got in rows.items():
    ratios = sorted(r["ratio"] for r in got if r["ratio"] is not None)
    by_m = defaultdict(list)
    for r in got:
        by_m[r["m"]].append(r["seconds"])
    secs = ", ".join(f"{m}: {min(s):.2f}-{max(s):.2f}" for m, s in sorted(by_m.items(), key=lambda kv: str(kv[0])))
    probed = [r["search"].split(" screened by their probe alone")[0].split(", ")[-1]
              for r in got if r.get("search") and "probe alone" in r["search"]]
    judged = (f"{sum(x <= 1.02 for x in ratios)} | {ratios[len(ratios) // 2]:.3f} | {ratios[-1]:.3f}" if ratios
              else "- | - | -")  # no corpus landscape (the CPU plumbing)
    print(f"| {arm} | {len(got)} | {judged} | {secs} | {' '.join(probed) or 'none'} |")
PY
cat "$OUT/summary.md"
(cd "$OUT" && tar czf runs.tgz runs)
