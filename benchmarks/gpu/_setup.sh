# Sourced by the one-GPU scripts of the ninth session: unbuffered Python, $OUT (default: $1) made, $smoke set to
# (--cpu-smoke) under CPU_SMOKE, a fresh HOME, and the GPU's name, clock and power printed.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-$1}; mkdir -p "$OUT"
smoke=(); [ -n "${CPU_SMOKE:-}" ] && smoke=(--cpu-smoke)
export HOME=$(mktemp -d)
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
