"""fp16 matmul C = A @ B with fp32 accumulation, tiled BM x BN over C, BK along K.

The start is deliberately mistuned (small tiles, no program swizzle, shallow pipeline):
the tuner's matmul workspace."""

import torch
import triton
import triton.language as tl


@triton.jit
def _mm(A, B, C, M, N, K, sam, sak, sbk, sbn, scm, scn,
        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GM: tl.constexpr):  # fmt: skip
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BM)
    grid_n = tl.cdiv(N, BN)
    width = GM * grid_n
    group = pid // width
    first_m = group * GM
    rows = min(grid_m - first_m, GM)
    pid_m = first_m + (pid % width) % rows
    pid_n = (pid % width) // rows
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = A + rm[:, None] * sam + rk[None, :] * sak
    b_ptrs = B + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] + k < K), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] + k < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK * sak
        b_ptrs += BK * sbk
    c_ptrs = C + rm[:, None] * scm + rn[None, :] * scn
    tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def kernel(a, b):
    m, k = a.shape
    _, n = b.shape
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    grid = lambda meta: (triton.cdiv(m, meta["BM"]) * triton.cdiv(n, meta["BN"]),)  # noqa: E731
    _mm[grid](
        a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        c.stride(0), c.stride(1), BM=32, BN=32, BK=16, GM=1, num_warps=4, num_stages=2,
    )  # fmt: skip
    return c
