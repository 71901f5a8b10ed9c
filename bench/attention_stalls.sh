#!/usr/bin/env bash
# Where flash-wgmma's kernel waits, instruction by instruction: each point's candidate runs at
# B4 H32 S2048 D128 (bf16, causal) under Nsight Compute (--set full, warp-state sampling per
# SASS instruction); bench/attention_stalls_summary.py prints the kernel's duration, its
# stall reasons and the instructions that hold the most samples, with what they wait on.
#   bash bench/attention_stalls.sh '{}' '{"PINGPONG": true}'
# Reports and the per-instruction CSVs (gzip) under $OUT (a temporary directory when unset).
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT/stalls"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
n=0
for point in "$@"; do
    n=$((n + 1))
    python3 bench/wgmma_point.py "$point" "$OUT/stalls/$n.py"
    timeout "${NCU_S:-180}" "$NCU" --target-processes all --kernel-name regex:_gl_attn_fwd \
        --launch-skip 2 --launch-count 1 --set full --import-source no -f \
        -o "$OUT/stalls/$n" python3 - "$OUT/stalls/$n.py" >"$OUT/stalls/$n.log" 2>&1 <<'PY'
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("cand", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
q, k, v = (torch.randn(4, 32, 2048, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
for _ in range(3):
    m.kernel(q, k, v)
torch.cuda.synchronize()
PY
    echo "ncu $point: rc $?"
    "$NCU" --import "$OUT/stalls/$n.ncu-rep" --csv --page source --print-source sass \
        >"$OUT/stalls/$n.sass.csv" 2>>"$OUT/stalls/$n.log"
    "$NCU" --import "$OUT/stalls/$n.ncu-rep" --csv --page raw >"$OUT/stalls/$n.raw.csv" \
        2>>"$OUT/stalls/$n.log"
    python3 bench/attention_stalls_summary.py "$OUT/stalls/$n.sass.csv" "$OUT/stalls/$n.raw.csv" \
        2>&1 | tee "$OUT/stalls/$n.summary"
    gzip -f "$OUT/stalls/$n.sass.csv" "$OUT/stalls/$n.raw.csv"
done
