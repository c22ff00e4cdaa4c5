#!/usr/bin/env bash
# Fifty-seventh session, one GPU, after the contextual change (a call that may tune waits for every earlier call to
# end): the GPU tests, the one-GPU acceptance (its flash-linear-attention steps run contextual_autotune), then the
# decided-call overhead (bench_decided_overhead.py) of the library before (arms/s57_old: git archive a843fd6) and
# after (arms/s57_new: the change), alternating ROUNDS times (default 3), each in a fresh process and HOME.
# Usage: OUT=DIR bash benchmarks/gpu/session57_call2.sh   (carry arms/fla_site, arms/s57_old, arms/s57_new)
# CPU plumbing: CPU_SMOKE=1 OUT=DIR bash benchmarks/gpu/session57_call2.sh (the overhead only, --standin)
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
clock() { nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"; }
{ echo "before: $(clock)"; nproc; } > "$OUT/machine.txt"
standin=(); [ -n "${CPU_SMOKE:-}" ] && standin=(--standin)
if [ -z "${CPU_SMOKE:-}" ]; then
  TDT_TEST_FORKSERVER=0 timeout 120 python3 -m pytest -q -p no:cacheprovider -rA tests/test_contextual_cuda.py \
    tests/test_beats_cuda.py tests/test_graphs_cuda.py 2>&1 | tail -n 14 > "$OUT/gpu_tests.txt"
  echo "GPU tests ended after $SECONDS s" | tee -a "$OUT/gpu_tests.txt"
  HOME=$(mktemp -d) PYTHONPATH=$PWD/arms/fla_site timeout 270 python3 benchmarks/gpu/acceptance.py \
    --out "$OUT/acc" --budget 200 > "$OUT/acceptance.log" 2>&1
  echo "acceptance exit $? after $SECONDS s"; grep "^acceptance:" "$OUT/acceptance.log" | tail -n 14
fi
for i in $(seq 1 "${ROUNDS:-3}"); do
  for arm in s57_old s57_new; do
    mkdir -p "$OUT/overhead/$arm-$i"
    HOME=$(mktemp -d) timeout 120 python3 "arms/$arm/benchmarks/bench_decided_overhead.py" --out "$OUT/overhead/$arm-$i" \
      "${standin[@]}" > "$OUT/overhead/$arm-$i.log" 2>&1
    echo "$arm $i: exit $? after $SECONDS s"; tail -n 6 "$OUT/overhead/$arm-$i.log"
  done
done
echo "after: $(clock)" >> "$OUT/machine.txt"
(cd "$OUT" && tar czf all.tgz --exclude=all.tgz ./*.txt ./*.log overhead acc/acceptance.md acc/acceptance.json 2>/dev/null)
ls -la "$OUT"
