#!/usr/bin/env bash
# Captures Nsight Compute reports of two Triton kernels on the H200 (the parser's fixture).
# Run on a GPU box with Nsight Compute, from the repository root; copy what $OUT receives over
# tests/data/ncu/ to refresh the fixture:
#   bash bench/ncu_fixture.sh   ($OUT receives the files; /tmp/ncu_out when unset)
set -u
here=$(dirname "$0")
OUT=${OUT:-/tmp/ncu_out}; mkdir -p "$OUT"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
{
  echo "== $(date -u) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  "$NCU" --version
  python3 -c 'import os; print("landlock ABI", os.syscall if False else "")' 2>/dev/null
  python3 - <<'PY'
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print("landlock ABI:", libc.syscall(444, None, 0, 1))
PY
  python3 "$here/ncu_fixture_driver.py" rmsnorm
} > "$OUT/log.txt" 2>&1
for k in rmsnorm matmul; do
  name=$([ $k = rmsnorm ] && echo rmsnorm_rows || echo matmul_tiles)
  echo "== ncu $k" >> "$OUT/log.txt"
  "$NCU" --target-processes all --kernel-name "$name" --launch-skip 1 --launch-count 1 \
      --set full -f -o "$OUT/$k" python3 "$here/ncu_fixture_driver.py" $k >> "$OUT/log.txt" 2>&1
  "$NCU" --import "$OUT/$k.ncu-rep" --csv --page details > "$OUT/${k}_details.csv" 2>>"$OUT/log.txt"
  "$NCU" --import "$OUT/$k.ncu-rep" --csv --page raw > "$OUT/${k}_raw.csv" 2>>"$OUT/log.txt"
done
"$NCU" --import "$OUT/rmsnorm.ncu-rep" --page details > "$OUT/rmsnorm_details.txt" 2>>"$OUT/log.txt"
rm -f "$OUT/matmul.ncu-rep"
ls -la "$OUT"; tail -30 "$OUT/log.txt"; head -c 3000 "$OUT/rmsnorm_details.csv"
