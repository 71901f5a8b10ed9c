"""Starting candidate for int8_matmul: a tiled tl.dot with int32 accumulation, then the
row/column scales in fp32 and one bf16 store. Grouped program order for L2 reuse."""

import torch
import triton
import triton.language as tl


@triton.jit
def _int8_matmul(
    A,
    B,
    SA,
    SB,
    C,
    M,
    N,
    K,
    sam,
    sak,
    sbn,
    sbk,
    scm,
    scn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * grid_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = tl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok = offs_m < M
    n_ok = offs_n < N
    a_ptrs = A + offs_m[:, None] * sam + offs_k[None, :] * sak
    b_ptrs = B + offs_n[None, :] * sbn + offs_k[:, None] * sbk  # b^T tile [BLOCK_K, BLOCK_N]

    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.int32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + offs_k) < K
        a = tl.load(a_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0)
        acc = tl.dot(a, b, acc, out_dtype=tl.int32)
        a_ptrs += BLOCK_K * sak
        b_ptrs += BLOCK_K * sbk

    sa = tl.load(SA + offs_m, mask=m_ok, other=0.0)
    sb = tl.load(SB + offs_n, mask=n_ok, other=0.0)
    out = acc.to(tl.float32) * sa[:, None] * sb[None, :]
    c_ptrs = C + offs_m[:, None] * scm + offs_n[None, :] * scn
    tl.store(c_ptrs, out.to(tl.bfloat16), mask=m_ok[:, None] & n_ok[None, :])


def kernel(a, b, scale_a, scale_b):
    m, k = a.shape
    n = b.shape[0]
    c = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
    # tl.dot needs tiles of at least 16 (32 along K for int8).
    block_m = min(128, max(16, triton.next_power_of_2(m)))
    block_n = min(128, max(16, triton.next_power_of_2(n)))
    block_k = min(128, max(32, triton.next_power_of_2(k)))
    grid = (triton.cdiv(m, block_m) * triton.cdiv(n, block_n),)
    _int8_matmul[grid](
        a,
        b,
        scale_a,
        scale_b,
        c,
        m,
        n,
        k,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        GROUP_M=8,
        num_warps=8 if block_m * block_n >= 128 * 128 else 4,
        num_stages=3,
    )
    return c
