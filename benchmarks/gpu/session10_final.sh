#!/usr/bin/env bash
# Issue 41, tenth session, one GPU, the session's last library: first keys of this tree and of ARM_OLD (the same
# library without the warm-up order of measure/warm_order.py), alternating (first_key_and_validate.sh); the full
# acceptance run (--budget ACC_BUDGET); the README's MoE campaign alone on a fresh HOME (acceptance.py --only). Only
# session10_final.tgz is left in OUT.
# Usage: OUT=DIR ARM_OLD=arms/s10fork bash benchmarks/gpu/session10_final.sh
# CPU plumbing: CPU_SMOKE=1 TRITON_INTERPRET=1 SHAPE=16 ACC=--cpu OUT=DIR bash benchmarks/gpu/session10_final.sh
set -u
FINAL=$OUT; W=$(mktemp -d); mkdir -p "$W/fk" "$FINAL"
OUT=$W FAMILIES="${FAMILIES:-gemm_k4096_n4096 moe}" VFAMILIES=none bash "$(dirname "$0")/first_key_and_validate.sh"
timeout "${ACC_TIME:-240}" python3 benchmarks/gpu/acceptance.py --out "$W/acc" --budget "${ACC_BUDGET:-230}" \
  ${ACC:-} > "$W/acc.log" 2>&1
echo "acceptance: exit $?"; grep "^| " "$W/acc/acceptance.md" | cut -d'|' -f2,4,5,7,8 | cut -c1-200
timeout "${CAMPAIGN_TIME:-150}" python3 benchmarks/gpu/acceptance.py --out "$W/campaign" --only moe_campaign \
  ${ACC:-} > "$W/campaign.log" 2>&1
echo "campaign alone: exit $? $(grep moe_campaign "$W/campaign/acceptance.md" | cut -d'|' -f5,7)"
(cd "$W" && tar czf "$FINAL/session10_final.tgz" . 2>/dev/null)
