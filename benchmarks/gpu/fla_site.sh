#!/usr/bin/env bash
# fla-core (flash-linear-attention's kernels) and einops, its one dependency, unpacked into DIR for PYTHONPATH: the
# GPU hosts reach no package index, so the acceptance's fla steps need them to travel with the tree (carry DIR).
# Run here, where PyPI is reachable; DIR should be a folder git ignores (arms/ is).
# Usage: bash benchmarks/gpu/fla_site.sh arms/fla_site   then on the GPU host:
#        PYTHONPATH=$PWD/arms/fla_site python3 benchmarks/gpu/acceptance.py --out "$OUT" --only fla,fla_one_process
set -euo pipefail
dir=${1:?usage: fla_site.sh DIR}
wheels=$(mktemp -d)
python3 -m pip download -q --no-deps -d "$wheels" fla-core einops
rm -rf "$dir"; mkdir -p "$dir"
for wheel in "$wheels"/*.whl; do python3 -m zipfile -e "$wheel" "$dir"; done
rm -rf "$wheels"
PYTHONPATH=$dir python3 -c 'import einops, fla; print("fla-core", fla.__version__, "and einops unpacked")' 2>/dev/null
