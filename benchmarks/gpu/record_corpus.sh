#!/usr/bin/env bash
# Issue 33's corpus on a 4-GPU machine, one recorder per GPU side by side (device tool, kind nvidia-h100-x4):
#   bash benchmarks/gpu/record_corpus.sh   (writes $OUT/corpus.tgz and $OUT/log_*.txt)
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/corpus_out}; mkdir -p "$OUT/corpus"
DEADLINE=${DEADLINE:-450}
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.device_count())'
python3 - <<'PY'  # the softmax kernel is right before it is timed
import sys, torch; sys.path.insert(0, "benchmarks")
import corpus
x = torch.randn(300, 5000, device="cuda", dtype=torch.bfloat16); y = torch.empty_like(x)
sp = corpus.SoftmaxSpace(False)
for cfg in ("1024x4-w4-s2", "256x1-w1-s1", "8192x2-w16-s3"):
    y.fill_(float("nan")); sp._launch(corpus._softmax_kernel, x, y, cfg); torch.cuda.synchronize()
    ref = torch.softmax(x.double(), 1); err = ((y.double() - ref).norm() / ref.norm()).item()
    print("softmax check", cfg, err); assert err < 1e-2
PY
run() { local gpu=$1; shift; CUDA_VISIBLE_DEVICES=$gpu timeout 560 python3 benchmarks/corpus.py "$@" \
  --deadline "$DEADLINE" --out "$OUT/corpus/gpu$gpu.json" > "$OUT/log_gpu$gpu.txt" 2>&1; }
run 0 --family gemm_k4096_n4096 --family gemm_k8192_n2048 &
run 1 --family gemm_k2048_n8192 --family softmax &
run 2 --family gemm_fp16_bt &
run 3 --family moe &
wait
tail -n 3 "$OUT"/log_gpu*.txt
(cd "$OUT" && tar czf corpus.tgz corpus)
python3 - "$OUT/corpus" <<'PY'
import json, sys, pathlib
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    for k, v in json.loads(f.read_text()).items():
        print(f.name, k, v["kept"], len(v["failed"]), v["best"], round(v["best_ms"] * 1e3, 1), "us", round(v["seconds"]), "s")
PY
