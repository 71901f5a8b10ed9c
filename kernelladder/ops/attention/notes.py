"""What the search knows of the attention families (the api/code prompts' knowledge block
for attention, family.knowledge): measured figures, what paid and what did not."""

NOTES = """\
flash-wgmma (Gluon; bench/attention_search.py, an H100, 2026-12-06, 15 back-to-back rounds
per shape against SDPA as torch picks it, SDPA's cuDNN and FlashAttention backends and
torch.compile; cuDNN 0.273-0.275 ms at B4 H32 S2048, 0.099-0.100 at B1 H8 S4096):
- Its start (warp-specialised: a loader warp, two consumer warpgroups of 64 rows, 128-key
  blocks, 2 stages, head groups of 16; persistent; O by TMA store; 64-row tiles where
  128-row ones cannot fill the SMs; the first consumer on half the diagonal block):
  0.239-0.242 ms at B4 H32 S2048 (1.13x cuDNN, 569-575 TFLOP/s, 72 % of the floor by a
  bf16 ceiling of about 793 TFLOP/s, a cold matmul's), 0.061 ms at B1 H8 S4096 (1.61x),
  1.23x at the tail, 1.16x at the tiny shape: faster than every baseline at every shape
  (15 of 15 rounds), and default 40-attempt searches from it found nothing faster.
- What made it: O through shared memory by one TMA store instead of pointer stores (the
  consumers no longer wait on their own global stores): 0.277 against 0.322 ms; then
  persistence with the store overlapping the next tile: 0.248. Persistence with pointer
  stores alone: 0.290. A persistent CTA takes its tiles from a table made once per shape:
  the launch order dealt to the program free first (a tile costs its key blocks and one);
  counted in key blocks (plus one a tile), plain striding (program p takes tiles p,
  p + P, ...) leaves the busiest program 26 % above the mean at B4 H32 S2048 with head
  groups of 16, dealing to the program free first 2 % (a count, not a timing).
- Around the start: 64-key blocks in 3 or 4 stages 0.277-0.279 ms (0.98x); head groups of 4
  0.249 ms but 0.98x at the tail; FILL off 0.0107 against 0.0089 ms at the tiny shape.
- Not persistent, pointer stores (the start before): 0.319-0.328 ms at B4 H32 S2048
  (0.82-0.85x), 0.071 at S4096. Slower still, so not parameters: K and V freed together
  after P V (0.409 ms); every warp loading and computing (no loader warp; Gluon puts a
  CTA-wide barrier around each TMA issue): 0.386 ms with 128 rows; 2 stages of 64-key
  blocks: 0.37-0.47 ms; the two consumers issuing their MMAs in turns through a pair of
  mbarriers (FlashAttention-3's ping-pong): 0.324 against 0.322 ms.
- DIAG_HALF (the first consumer takes only the 64 keys of the diagonal block its rows see,
  by 64-wide warpgroup MMAs): 0.2415 against 0.2453 ms at B4 H32 S2048, 0.0611 against
  0.0618 at S4096, no slower elsewhere: in the start since. By count it drops 2.9 % of the
  MMA work at B4 H32 S2048 and gave 1.6 %.
- Neither paid nor lost (an H100, 2026-12-06, the same bench, the start 0.2403 ms at B4 H32
  S2048 and 1.272x the geomean): PINGPONG, the two consumers issuing their MMAs in turns
  through named barriers (bar.sync/bar.arrive 8 and 9 by inline PTX, FlashAttention-3's
  ping-pong; Gluon's own barriers are 0-2): 0.2390 ms, 1.274x; EARLY_RESCALE, the
  accumulator rescaled just before its block's P V, beside the next Q K^T: 0.2403, 1.269x;
  both: 0.2391, 1.274x. All within the rounds' spread, and a default search from the start
  tried PINGPONG and kept the start. So the consumers' order at the tensor cores is not
  what holds the start at 72 % of the floor.
- KV_PAIRS (compiled for sm_90a, not yet timed on a GPU): K_(j+1) and V_j share a ring
  stage and one barrier each way, so a consumer waits once and frees once a key block.
  Triton 3.6's Gluon puts a warpgroup barrier before every mbarrier arrive and before a
  wait that follows an arrive or a wait on the same allocation: the key-block loop's
  barriers go from three to two, its mbarrier waits and arrives from two to one each. K
  is held until its block's P V is done (before, until its Q K^T was): the loader keeps
  one key block of lead. (Freeing K_j with V_j, one block later still, left no lead and
  was slow: 0.409 ms, above.)
- Did not pay: the next tile's first Q K^T and softmax run beside a tile's last P V (two Q
  buffers a consumer, 229 KiB of shared memory): 0.300 ms at B4 H32 S2048 (0.90x), slower at
  every shape; it spilled about 1.3 KB at each turn between tiles with little L1 left for
  it, and the turn waited for the next tile's Q and first K before the last P V. Taken out.
- Registers: ptxas (Triton 3.6) gives the persistent consumers 240 registers once the
  loader gives its own up; the start spills nothing (it spilled 192 bytes while a tile past
  S stored from registers through 64 pointers a thread; it now stores from O's shared
  buffer 16 rows at a time). Gluon puts a warpgroup barrier before each mbarrier wait and
  arrive (three a key block per consumer); ncu's top stall for the start is "barrier".
What was measured on the H200 (Triton 3.6, bf16, causal, D=128):
- flash-tma with 64 query rows on 4 warps: 0.88x cuDNN's SDPA at B4 H32 S2048; 128 rows on
  8 warps: 0.78x. A default 40-attempt search over flash-tma/flash-split/flash-masked ended
  at 0.985x SDPA's geomean (0.879x at B4 H32 S2048, 0.949x at B1 H8 S4096), 57 % of the floor.
- A head's last query blocks first: 0.1037 against 0.1055 ms at B1 H8 S4096, no change at
  B4 H32 S2048.
- flash-ring (bench/attention_search.py, 2026-12-02, 15 back-to-back rounds per shape against
  SDPA as torch picks it, SDPA's cuDNN and FlashAttention backends, torch.compile): its start
  (64 rows, 4 warps, 64-key blocks, 3 stages) is 1.10x the fastest baseline's geomean:
  faster at B1 H8 S4096 (1.29x; 0.077 ms, 444 TFLOP/s), at the tail and tiny shapes, but
  0.87x cuDNN at B4 H32 S2048 (0.315 ms against 0.273, 57 % of the floor). A 40-attempt
  search from it found nothing better there (best #16 0.870x at B4 H32 S2048).
- What did not pay (same bench): warp specialisation compiled and ran but was slower:
  flash-ring WS 0.371 ms at B4 H32 S2048 (0.735x cuDNN), with 128 rows on 8 warps 0.422 ms;
  flash-persistent 0.548 ms at its start (0.50x), WS inner or outer 0.55 ms: one or two
  programs per SM walking tiles serially lose the L2 reuse of heads run together.
- Also slower (bench/attention_search.py --probe-only, 2026-12-03, 10 ms per timing; SDPA
  0.270-0.272 ms at B4 H32 S2048, flash-ring's start 0.310-0.313 ms there and 0.076 ms at
  B1 H8 S4096), so neither is a family or a parameter:
  - The unmasked loop pipelined by hand (FlashAttention-3's overlap inside a warpgroup:
    the next key block's Q K^T issued before this block's softmax, its result carried to
    the next iteration): 0.335 ms (and 0.081 at S4096) with the lazy rescale below,
    0.464 ms without; with 128 rows on 8 warps 0.398-0.433; 2 stages 0.358, 4 stages
    0.548, 128-key blocks 0.366-0.566. Triton 3.6 does not keep the carried dot in flight
    across the softmax, and the extra 64x64 fp32 scores it holds cost registers.
  - A lazy rescale (the running max raised, and the accumulator rescaled, only when a
    block's scores pass it by more than 8 in log2 units, decided by a max over the tile's
    rows): 0.329 ms against 0.310 in flash-ring's unmasked loop (0.081 against 0.076 at
    S4096; slower at every shape and with every tile, stage count and head group tried):
    the cross-warp max and the branch cost more than the multiply they save.
- Why the order of tiles matters: a 64-row tile does about 64 FLOPs per byte of K/V it
  streams, below the H200's ~165 (790 TFLOP/s over 4.8 TB/s), so K and V must come from L2
  for most tiles: tiles of the same head should run together.
Techniques and where they run:
- Two-stage causal loop: key blocks wholly below the diagonal need no mask (the scale
  log2(e)/sqrt(D) folded into one multiply-add before exp2); only the BLOCK_M/BLOCK_N blocks
  on the diagonal are masked. The older families need BLOCK_M a multiple of BLOCK_N;
  flash-ring and flash-persistent start the masked stage at the key block that holds the
  tile's first diagonal key, so their key blocks may be wider than the query tile
  (64 rows against 128 keys: one warpgroup, wider wgmma).
- Deferred normalisation: the accumulator is divided by the row sum once, at the end.
- Tensor descriptors (TMA) over the flat [B*H*S, D] view for Q, K, V and O; a query tile
  that runs past S stores through pointers (a descriptor store would write the next head's
  rows); rows of K/V past S are masked in the diagonal stage. Tensors a descriptor cannot
  take (not contiguous, rows not a multiple of 16 bytes) run the pointer kernel instead.
- Software-pipelined K/V ring: `tl.range(lo, hi, BLOCK_N, num_stages=NUM_STAGES)` per loop;
  warp specialisation of the unmasked loop: `tl.range(..., warp_specialize=True)` (WS; the
  diagonal's one or two blocks are not specialised). A warp-specialised point makes its
  descriptors in the kernel (`tl.make_tensor_descriptor`, scratch from `triton.set_allocator`):
  Hopper's warp specialisation of attention was enabled for descriptors made on the device
  and without the causal mask (triton-lang/triton#7658), and Triton's tutorial switches to
  them on Hopper when it specialises. Whether these loops specialise with Triton 3.6 on the
  H200, and whether it pays, is what the WS points find out.
- Triton's interpreter (the CPU) runs the descriptors, both stages, the tile orders and both
  output stores, but runs `tl.range` as a plain loop: NUM_STAGES and WS are exercised only on
  the GPU, as is the shared-memory budget (an estimate bounds the grid: Q, the output's
  staging and NUM_STAGES - 1 K/V blocks within 224 KiB at D=128).
- Launch order (HEAD_GROUP): heads in groups whose K and V share L2; inside a group every
  head's last (longest) query tile first, then the one before: the longest tiles start first
  and the short ones fill the tail. Persistent programs take every P-th tile of that order.
"""
