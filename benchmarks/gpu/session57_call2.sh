#!/usr/bin/env bash
# Fifty-seventh session, one GPU, after the contextual change (a call that may tune waits for every earlier call to
# end): the GPU tests, the one-GPU acceptance (its flash-linear-attention steps run contextual_autotune), then the
# decided-call overhead (bench_decided_overhead.py) of the library before (arms/s57_old: git archive a843fd6) and
# after (arms/s57_new: the change), alternating ROUNDS times (default 3), each in a fresh process and HOME.
# Usage: OUT=DIR bash benchmarks/gpu/session57_call2.sh   (carry arms/fla_site, arms/s57_old, arms/s57_new)
# CPU plumbing: CPU_SMOKE=1 OUT=DIR bash benchmarks/gpu/session57_call2.sh (the overhead only, --standin).
# (Since its run, the GPU tests and the acceptance come from session56_call1.sh, the same commands: one copy of them.)
set -u
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
standin=(); [ -n "${CPU_SMOKE:-}" ] && standin=(--standin)
if [ -z "${CPU_SMOKE:-}" ]; then  # the GPU tests and the acceptance, as session56_call1.sh runs them (no first keys)
  OUT=$OUT REPEATS=0 bash benchmarks/gpu/session56_call1.sh
fi
for i in $(seq 1 "${ROUNDS:-3}"); do
  for arm in s57_old s57_new; do
    mkdir -p "$OUT/overhead/$arm-$i"
    HOME=$(mktemp -d) timeout 120 python3 "arms/$arm/benchmarks/bench_decided_overhead.py" --out "$OUT/overhead/$arm-$i" \
      "${standin[@]}" > "$OUT/overhead/$arm-$i.log" 2>&1
    echo "$arm $i: exit $? after $SECONDS s"; tail -n 6 "$OUT/overhead/$arm-$i.log"
  done
done
(cd "$OUT" && tar czf all.tgz --exclude=all.tgz ./*.txt ./*.log overhead acc/acceptance.md acc/acceptance.json 2>/dev/null)
ls -la "$OUT"
