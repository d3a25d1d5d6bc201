#!/usr/bin/env bash
# One prepared run of the live microbenchmark (mla_core.bench) on an NVIDIA H200.
#
#   bash benchmarks/gpu_h200.sh            # results under ./out
#   OUT=/some/folder bash benchmarks/gpu_h200.sh
#   STEPS="profile reduced" bash benchmarks/gpu_h200.sh   # issue 18's two steps alone (~5 minutes)
#
# Steps, in this order (STEPS, default all): profile reduced bench collectives tests.
#
# What it does, in well under 13 minutes on an H200 (each step is capped: 4 + 3 + 5 + 4 + 2 minutes):
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
#   7. if pytest is installed, runs the GPU tests (`-m gpu`, ~20 s) into a log beside them;
# and, first (issue 18):
#   P. `bench --profile --model deepseek-v3 --tp 8`: the kernel table of one GPU of an 8-GPU TP group
#      (every GEMM at m = 1..8192, MLA absorbed decode over batch 1..256 x context 1K..64K, MLA-as-MHA
#      prefill, the MoE grouped GEMM TP-sharded and as EP8, RMSNorm by bytes; with 2+ GPUs under
#      torchrun, the NCCL collectives at the model's message sizes too) into h200-profile-*.json,
#      checked against mla_core/bench/profile.schema.json;
#   R. the reduced-model check, `benchmarks/reduced_model.py --device cuda` (DeepSeek-V2-Lite's MLA +
#      dense + MoE layers, Qwen3-Next's GDN + GQA + MoE layers, bf16, profiled and timed in the same
#      run; the composed estimate beside the measured step) into h200-reduced-*.{json,md}.
# Exit status: that of the benchmark (2 with one line on stderr for a refused request), else 1 when the
# profile or the reduced-model check failed.
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
STEPS="${STEPS:-profile reduced bench collectives tests}"
has() { case " $STEPS " in *" $1 "*) return 0;; *) return 1;; esac; }
NGPU="$("$PY" -c "import torch; print(torch.cuda.device_count())")"
TORCHRUN="$(dirname "$PY")/torchrun"; [ -x "$TORCHRUN" ] || TORCHRUN=torchrun
status=0

if has profile; then
    PROF="$OUT/h200-profile-$STAMP.json"
    LAUNCH=("$PY" -m mla_core)
    [ "$NGPU" -ge 2 ] && LAUNCH=("$TORCHRUN" --standalone --nproc-per-node "$NGPU" -m mla_core)
    pstatus=0
    timeout 240 "${LAUNCH[@]}" bench --profile --model deepseek-v3 --tp 8 --device cuda --dtype bf16 \
        --out "$PROF" > "$OUT/h200-profile-$STAMP.txt" || pstatus=$?
    cat "$OUT/h200-profile-$STAMP.txt"
    if [ "$pstatus" -ne 0 ]; then
        echo "gpu_h200.sh: bench --profile exited with status $pstatus (124: over its 4-minute cap)" >&2
        status=$pstatus
    else
        "$PY" -c 'import json, sys
from mla_core.bench.profile_plan import validate_profile
t = validate_profile(json.load(open(sys.argv[1])))
print("profile valid:", ", ".join(f"{f} {len(r)}" for f, r in t["ops"].items()))' "$PROF" || status=1
    fi
fi

if has reduced; then
    timeout 180 "$PY" benchmarks/reduced_model.py --device cuda --out "$OUT/h200-reduced-$STAMP" \
        > "$OUT/h200-reduced-$STAMP.log" 2>&1 \
        || { echo "gpu_h200.sh: the reduced-model check failed, see $OUT/h200-reduced-$STAMP.log" >&2; status=1; }
    tail -n 40 "$OUT/h200-reduced-$STAMP.log"
fi

if has bench; then
JSON="$OUT/h200-bench-$STAMP.json"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.max.sm,power.limit \
        --format=csv > "$OUT/h200-nvidia-smi-$STAMP.csv" 2>&1 || true
fi

bstatus=0
timeout 300 "$PY" -m mla_core bench --model deepseek-v3 --device cuda --dtype bf16 \
    --batch 1,8,64 --context 4K,16K,32K,128K --skip-oversize --budget-s 1 \
    --out "$JSON" > "$OUT/h200-bench-$STAMP.txt" || bstatus=$?
cat "$OUT/h200-bench-$STAMP.txt"
if [ "$bstatus" -ne 0 ]; then
    echo "gpu_h200.sh: the benchmark exited with status $bstatus (124: over the 5-minute cap)" >&2
    exit "$bstatus"
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
fi

if has collectives && [ "$NGPU" -ge 2 ]; then
    timeout 240 "$TORCHRUN" --standalone --nproc-per-node "$NGPU" -m mla_core bench collectives --device cuda \
        --out "$OUT/h200-collectives-$STAMP.json" > "$OUT/h200-collectives-$STAMP.txt" 2>&1 \
        || echo "gpu_h200.sh: collectives failed, see $OUT/h200-collectives-$STAMP.txt" >&2
    tail -n 12 "$OUT/h200-collectives-$STAMP.txt"
fi

if has tests && "$PY" -c "import pytest" >/dev/null 2>&1; then
    timeout 120 "$PY" -m pytest -q -m gpu -p no:cacheprovider tests/test_bench.py tests/test_profile.py \
        > "$OUT/h200-gpu-tests-$STAMP.txt" 2>&1 \
        || echo "gpu_h200.sh: GPU tests failed, see $OUT/h200-gpu-tests-$STAMP.txt" >&2
    tail -n 3 "$OUT/h200-gpu-tests-$STAMP.txt"
fi
echo "wrote the results under $OUT (stamp $STAMP)"
exit "$status"
