#!/usr/bin/env bash
# One prepared run of the live microbenchmark (mla_core.bench) on an NVIDIA H200.
#
#   bash benchmarks/gpu_h200.sh            # results under ./out
#   OUT=/some/folder bash benchmarks/gpu_h200.sh
#
# What it does, in well under 6 minutes on an H200 (the sweep itself is capped at 5 minutes):
#   1. installs nothing, unless torch is missing: then `pip install -r requirements.txt` only;
#   2. checks that torch sees a CUDA device and records nvidia-smi's view of it;
#   3. runs the whole benchmark on CUDA in bf16 at DeepSeek-V3's attention shape (`--model
#      deepseek-v3`: 128 heads, d_c 512, d_r 64, d_nope 128, d_v 128; MHA/GQA/MQA head_dim 128,
#      GQA 8 groups; the explicit batches and contexts below are measured as given), sweeping
#      batch 1, 8, 64 x context 4K, 16K, 32K, 128K: copy/read bandwidth (2 GiB buffers, L2
#      flushed between repetitions), bf16 matmul peak, and the five decode kernels. Points whose
#      tensors would not fit in 80% of free memory (MHA at 64 x 32K and 64 x 128K: 129 and 516 GiB)
#      are listed under "skipped" instead of stopping the run;
#   4. writes ONE result JSON ($OUT/h200-bench-<UTC time>.json, schema
#      mla_core/store/result.schema.json) and the printed table beside it (.txt), then checks
#      the JSON against the schema;
#   5. prints the figures the issue asks for: copy bandwidth as a share of the 4.8 TB/s
#      datasheet, absorbed MLA decode as a share of its roofline time, absorbed against recompute;
#   6. with 2 or more GPUs, the collectives (NCCL, 1K..1G) under torchrun into a second JSON;
#   7. if pytest is installed, runs the GPU tests (`-m gpu`, ~20 s) into a log beside them.
# Exit status: that of the benchmark (2 with one line on stderr for a refused request).
set -euo pipefail
cd "$(dirname "$0")/.."

OUT="${OUT:-./out}"
mkdir -p "$OUT"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
    if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi

if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    echo "torch is missing: pip install -r requirements.txt" >&2
    "$PY" -m pip install -q -r requirements.txt
fi

"$PY" - <<'EOF'
import sys
import torch
if not torch.cuda.is_available():
    sys.exit(f"gpu_h200.sh: torch {torch.__version__} sees no CUDA device")
p = torch.cuda.get_device_properties(0)
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), {p.name}, {p.total_memory / 2**30:.1f} GiB, "
      f"L2 {getattr(p, 'L2_cache_size', 0) / 2**20:.0f} MiB")
if "H200" not in p.name:
    print(f"warning: this script is sized for an H200, the device is {p.name}", file=sys.stderr)
EOF

STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
JSON="$OUT/h200-bench-$STAMP.json"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.max.sm,power.limit \
        --format=csv > "$OUT/h200-nvidia-smi-$STAMP.csv" 2>&1 || true
fi

status=0
timeout 300 "$PY" -m mla_core bench --model deepseek-v3 --device cuda --dtype bf16 \
    --batch 1,8,64 --context 4K,16K,32K,128K --skip-oversize --budget-s 1 \
    --out "$JSON" > "$OUT/h200-bench-$STAMP.txt" || status=$?
cat "$OUT/h200-bench-$STAMP.txt"
if [ "$status" -ne 0 ]; then
    echo "gpu_h200.sh: the benchmark exited with status $status (124: over the 5-minute cap)" >&2
    exit "$status"
fi
"$PY" -m mla_core bench --validate "$JSON"
"$PY" - "$JSON" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
res = r["results"]
copy = next((x for x in res if x["kernel"] == "copy"), None)
if copy:
    print(f"copy: {copy['achieved_GBps']:,.0f} GB/s = {copy['achieved_GBps'] / 4800:.1%} of 4.8 TB/s")
for a in (x for x in res if x["kernel"] == "mla_absorbed_decode"):
    s = a["shape"]
    rec = next((x for x in res if x["kernel"] == "mla_recompute_decode" and x["shape"]["batch"] == s["batch"]
                and x["shape"]["context"] == s["context"]), None)
    line = (f"absorbed B={s['batch']} T={s['context']}: {a['median_s'] * 1e3:.3f} ms, "
            f"{a['predicted_s'] / a['median_s']:.1%} of its roofline time")
    if rec:
        line += f"; recompute {rec['median_s'] * 1e3:.3f} ms ({rec['median_s'] / a['median_s']:.1f}x absorbed)"
    print(line)
EOF
NGPU="$("$PY" -c "import torch; print(torch.cuda.device_count())")"
if [ "$NGPU" -ge 2 ]; then
    TORCHRUN="$(dirname "$PY")/torchrun"; [ -x "$TORCHRUN" ] || TORCHRUN=torchrun
    timeout 240 "$TORCHRUN" --standalone --nproc-per-node "$NGPU" -m mla_core bench collectives --device cuda \
        --out "$OUT/h200-collectives-$STAMP.json" > "$OUT/h200-collectives-$STAMP.txt" 2>&1 \
        || echo "gpu_h200.sh: collectives failed, see $OUT/h200-collectives-$STAMP.txt" >&2
    tail -n 12 "$OUT/h200-collectives-$STAMP.txt"
fi

if "$PY" -c "import pytest" >/dev/null 2>&1; then
    timeout 120 "$PY" -m pytest -q -m gpu -p no:cacheprovider tests/test_bench.py \
        > "$OUT/h200-gpu-tests-$STAMP.txt" 2>&1 \
        || echo "gpu_h200.sh: GPU tests failed, see $OUT/h200-gpu-tests-$STAMP.txt" >&2
    tail -n 3 "$OUT/h200-gpu-tests-$STAMP.txt"
fi
echo "wrote $JSON"
