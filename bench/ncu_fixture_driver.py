"""Runs one Triton kernel on the H200 so that Nsight Compute can profile it: an
rmsnorm (one row per program, memory-bound) or a matmul (tl.dot, compute-bound).
bench/ncu_fixture.sh runs it under ncu:

    python3 bench/ncu_fixture_driver.py rmsnorm|matmul
"""

import sys

import torch
import triton
import triton.language as tl


@triton.jit
def rmsnorm_rows(X, W, Y, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    tl.store(Y + row * N + cols, (x * rstd * w).to(tl.bfloat16), mask=mask)


@triton.jit
def matmul_tiles(A, B, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(A + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(B + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(C + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))


def main(which: str) -> None:
    torch.manual_seed(0)
    if which == "rmsnorm":
        m, n = 32768, 8192
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        y = torch.empty_like(x)
        for _ in range(3):
            rmsnorm_rows[(m,)](x, w, y, n, 1e-6, BLOCK=8192, num_warps=8)
    else:
        m = n = k = 4096
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            matmul_tiles[(m // 128, n // 128)](
                a, b, c, m, n, k, BM=128, BN=128, BK=64, num_warps=8, num_stages=3
            )
    torch.cuda.synchronize()
    print(which, "ran", triton.__version__, torch.__version__)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "rmsnorm")
