/* The warpgroup GEMM with both operands in shared memory (tss, sm_90a), for x of 65 rows and
 * more (the verify blocks of batches 8-64). Split from gemm_cuda.cu (the dispatch, the packing,
 * the other paths) so that it can change on its own; its labs: tools/lab/lab_ss.cu (the kernel's
 * shape on random operands, against cuBLAS) and test_cuda_ops --lab-large (every tiling here and
 * in gemm_cuda.cu on the real packing).
 * Why (session 28): tcw (gemm_cuda.cu) takes W from registers and gives each K part of a tile to
 * its own block of a cluster, which combine through distributed shared memory: 290-390 TFLOP/s
 * at 512 rows. Here
 * - W's packed tiles (gemm_layout.h) are wgmma core matrices as they lie, so one descriptor
 *   gives a warpgroup 64 rows of W from shared memory; x comes from the stream's scratch in the
 *   same order (tcw_permute_kernel); every MMA gets the register path's operands in the register
 *   path's k slots (tests/kernels/lab_wgmma.cu: the SS form gives the mma.sync chain's bits);
 * - one block computes all the K parts of its tile in the batch-invariant order: part p's k32
 *   blocks in order, MMA 0 then MMA 1 of each, into an accumulator set (its first MMA a plain
 *   product: the epilogue says why that gives the same bits); with 4 parts, p0 + p1 waits in
 *   shared memory while the two sets run p2 and p3, and the output is (p0 + p1) + (p2 + p3) with
 *   __fadd_rn, parts past n_split +0: sum_parts' bits (tcb_combine); three sets in registers
 *   spill (lab);
 * - persistent: a block a multiprocessor walks tiles tile, tile + grid, .. (m tiles fastest, so
 *   the m tiles of an n tile read its weights from L2 together); the producer fills the ring for
 *   the next tile while the consumers store this one.
 * Block: 2 consumer warpgroups (64 W rows each) and a producer warp whose lane 0 issues two
 * tensor copies a stage (one for W, one for x: a bulk copy per 1 KB tile cost ~100 cycles of the
 * copy engine each and left the first version at half the lab's speed). Stage: U k32 blocks;
 * block u's W tiles at u 8 KB + r KB (tile row r, its 1 KB as packed), its x rows at U 8 KB +
 * u BX 64 (scratch order). The W map views the packed matrix as [block j][tile row][half][256
 * elements] (strides 1 KB, nJ KB, 512 B), so one box of U x 8 x 2 x 256 lands in that order;
 * tile rows past the matrix come as zeros. The x map: [block][8 rows][256 elements].
 * Descriptors, no swizzle: A at + (4 wg) KB + 256 h, B at + 256 h, LBO 128 (core matrix c), SBO
 * 512 (the next 8 rows: a tile's second half, then the next tile). Shared memory: S stages, 2 S mbarriers (full: the producer's
 * arrival with the stage's bytes; empty: one arrival per consumer warpgroup once its wgmmas that
 * read the slot are done), then the p0 + p1 stash (BX / 2 floats per consumer thread).
 * Lab (lab_ss, H200, M = 512, random operands): 24576 x 4096 159 us (647 TFLOP/s; tcw 286,
 * cuBLAS 143), 4096 x 12288 75 (tcw 172, cuBLAS 70), 151936 x 4096 1086 (tcw 1636, cuBLAS 855). */
#include <cuda.h> /* CUtensorMap (the encoder comes from the runtime's driver entry point: no -lcuda) */

#include "target/cuda_common.cuh"
#include "target/wgmma.cuh"

#define TSS_THREADS 288
/* q steps (8 x rows each) whose residual loads go out together in the epilogue, as registers
 * allow: all 8 of BX 64's with one block a multiprocessor (132 of the 168 a thread may have at
 * 9 warps, three a sub-partition); 2 for BX 128, whose two sets nearly fill them (168; 4 or 8
 * spilled 384 / 160 bytes), and with two blocks a multiprocessor (112) */
#define TSS_QG(BX, MINB) ((MINB) == 1 && (BX) == 64 ? 8 : 2)

#if TCW_HAVE
/* add = 0: D = A B (scale-d false: the chain's first MMA; D's old registers are not read) */
static __device__ __forceinline__ void ss_mma_n64(float *d, uint64_t da, uint64_t db, int add) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
                 "}, %32, %33, p, 1, 1, 0, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(add));
}

static __device__ __forceinline__ void ss_mma_n128(float *d, uint64_t da, uint64_t db, int add) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
                 "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
                 "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
                 "}, %64, %65, p, 1, 1, 0, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(add));
}

/* one stage (U k32 blocks, MMA 0 then MMA 1 of each) into d, the chain's first (first) starting
 * from nothing; then releases the slot of the stage before, whose wgmmas are done once this one's
 * group is the only one in flight */
template <int BX, int U, int S>
static __device__ __forceinline__ void tss_stage(float *d, uint32_t smem_s, uint32_t bars, int it, int first, int wg,
                                                 int *pend) {
    const int SB = U * (8192 + BX * 64), slot = it % S;
    mbar_wait(bars + 8 * slot, (uint32_t)((it / S) & 1));
    wg_fence();
    const uint32_t base = smem_s + slot * SB;
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint64_t da = wg_desc(base + u * 8192 + wg * 4096 + 256 * h, 128, 512);
            const uint64_t db = wg_desc(base + U * 8192 + u * BX * 64 + 256 * h, 128, 512);
            const int add = !first || u > 0 || h > 0;
            if (BX == 64) ss_mma_n64(d, da, db, add);
            else ss_mma_n128(d, da, db, add);
        }
    wg_commit();
    wg_wait1();
    if (*pend >= 0 && (threadIdx.x & 127) == 0) mbar_arrive(bars + 8 * (S + *pend));
    *pend = slot;
}

/* every wgmma done: both sets final, the last stage's slot released */
template <int BX, int S>
static __device__ __forceinline__ void tss_drain(float *a, float *b, uint32_t bars, int *pend) {
    wg_wait0();
    wg_hold(a, BX / 2); /* their reads stay after the wait */
    wg_hold(b, BX / 2);
    if (*pend >= 0 && (threadIdx.x & 127) == 0) mbar_arrive(bars + 8 * (S + *pend));
    *pend = -1;
}
#endif

/* GLU: accumulate is GEMM_EPI_GLU (y is the bf16 [M][ldy] SwiGLU output); otherwise store or add.
 * The launcher guarantees (K / 32) % (n_split U) == 0 and M <= the scratch's Mp. */
template <int BX, int U, int S, int GLU, int MINB>
static __global__ void __launch_bounds__(TSS_THREADS, MINB)
    gemm_tss_kernel(const __grid_constant__ CUtensorMap tw, const __grid_constant__ CUtensorMap tx, float *y, int ldy,
                    int M, int N, int K, int accumulate, int n_split, int out_mp) {
#if TCW_HAVE
    extern __shared__ __align__(128) unsigned char smem[];
    const int SB = U * (8192 + BX * 64);
    const int nJ = (K + 31) / 32, nq = nJ / n_split, st_part = nq / U;
    const int tiles_m = (M + BX - 1) / BX, n_tiles = tiles_m * ((N + 127) / 128);
    const int tid = threadIdx.x, wg = tid >> 7;
    const uint32_t smem_s = (uint32_t)__cvta_generic_to_shared(smem), bars = smem_s + S * SB;
    mbar_ring_init(bars, S, 2);
    pdl_wait(); /* the scratch comes from the kernel before (a no-op without the launch attribute) */
    if (wg == 2) { /* the producer warp */
        if (tid == 256) {
            int it = 0;
            const uint32_t bytes = (uint32_t)(U * (8192 + BX * 64));
#pragma unroll 1
            for (int tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
                const int m0 = (tile % tiles_m) * BX, n0 = (tile / tiles_m) * 128;
#pragma unroll 1
                for (int p = 0; p < n_split; p++)
#pragma unroll 1
                    for (int s = 0; s < st_part; s++, it++) {
                        const int slot = it % S, j0 = p * nq + s * U;
                        const uint32_t full = bars + 8 * slot, dst = smem_s + slot * SB;
                        if (it >= S) mbar_wait(bars + 8 * (S + slot), (uint32_t)((it / S - 1) & 1));
                        mbar_arrive_tx(full, bytes);
                        asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                                     " [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(dst),
                                     "l"((uint64_t)&tw), "r"(0), "r"(0), "r"(n0 / 16), "r"(j0), "r"(full)
                                     : "memory");
                        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                                     " [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(dst + U * 8192),
                                     "l"((uint64_t)&tx), "r"(0), "r"(m0 / 8), "r"(j0), "r"(full)
                                     : "memory");
                    }
            }
        }
        return;
    }
    const int lane = tid & 31, g = lane >> 2, t = lane & 3, tr = 4 * wg + ((tid >> 5) & 3); /* tile row */
    float *stash = (float *)(smem + S * SB + 16 * S) + tid;
    float a[BX / 2], b[BX / 2];
    int it = 0, pend = -1;
#pragma unroll 1
    for (int tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const int m0 = (tile % tiles_m) * BX, n0 = (tile / tiles_m) * 128;
#pragma unroll 1
        for (int s = 0; s < st_part; s++, it++) tss_stage<BX, U, S>(a, smem_s, bars, it, s == 0, wg, &pend);
        if (n_split > 1)
#pragma unroll 1
            for (int s = 0; s < st_part; s++, it++) tss_stage<BX, U, S>(b, smem_s, bars, it, s == 0, wg, &pend);
        tss_drain<BX, S>(a, b, bars, &pend);
        /* (Reading a set while the other's wgmmas run, to stash p0 during p1 without a drain, made
         * ptxas serialise every wgmma: C7514, session 29.) */
        if (n_split == 4) { /* p0 + p1 aside; the sets take p2 and p3 */
#pragma unroll
            for (int i = 0; i < BX / 2; i++) stash[256 * i] = __fadd_rn(a[i], b[i]);
#pragma unroll 1
            for (int s = 0; s < st_part; s++, it++) tss_stage<BX, U, S>(a, smem_s, bars, it, s == 0, wg, &pend);
#pragma unroll 1
            for (int s = 0; s < st_part; s++, it++) tss_stage<BX, U, S>(b, smem_s, bars, it, s == 0, wg, &pend);
            tss_drain<BX, S>(a, b, bars, &pend);
        }
        /* sum_parts' sums (parts past n_split are +0), + 0 at the end: a chain here starts with a
         * plain product (scale-d false) where the register path adds it to +0, which differs
         * only when every product of the chain is -0 (-0 here, +0 there); the register path never
         * ends at -0, and x + 0 changes no other value. Sum 4 q + e: x row 8 q + 2 t + (e & 1),
         * W row 16 tr + g + 8 (e >> 1) of the tile. (Zeroing the sets, or writing sums into them,
         * made ptxas serialise every wgmma: C7515.) */
#pragma unroll
        for (int q0 = 0; q0 < BX / 8; q0 += TSS_QG(BX, MINB)) {
            /* the residual's values of TSS_QG q steps, loaded before any of their stores: y's
             * stores may alias its loads, so a load after a store waits for it, and 64 such round
             * trips a thread doubled the O projection's time at 512 rows (ncu, session 29) */
            float old[TSS_QG(BX, MINB)][4];
            if (!GLU && accumulate)
#pragma unroll
                for (int qq = 0; qq < TSS_QG(BX, MINB); qq++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int m = m0 + 8 * (q0 + qq) + 2 * t + (e & 1), n = n0 + 16 * tr + g + 8 * (e >> 1);
                        old[qq][e] = m < M && n < N ? y[(size_t)m * ldy + n] : 0.0f;
                    }
#pragma unroll
            for (int qq = 0; qq < TSS_QG(BX, MINB); qq++) {
                const int q = q0 + qq;
                float r[4];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int i = 4 * q + e;
                    const float s01 = n_split == 4 ? stash[256 * i] : __fadd_rn(a[i], n_split == 2 ? b[i] : 0.0f);
                    const float s23 = n_split == 4 ? __fadd_rn(a[i], b[i]) : __fadd_rn(0.0f, 0.0f);
                    r[e] = __fadd_rn(__fadd_rn(s01, s23), 0.0f);
                }
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int m = m0 + 8 * q + 2 * t + e;
                    if (m >= M) continue;
                    if (GLU) { /* row g is a gate, row g + 8 its up (the interleaved packing) */
                        if (n0 + 16 * tr + g < N) {
                            const int c = n0 / 2 + 8 * tr + g; /* out_mp: the scratch layout (tcw_permute) */
                            uint16_t *o = out_mp ? (uint16_t *)((unsigned char *)y + (size_t)(c >> 5) * out_mp * 64 +
                                                                (m >> 3) * 512 + ((c >> 1) & 3) * 128 + (m & 7) * 16 +
                                                                ((c >> 3) & 3) * 4 + (c & 1) * 2)
                                                 : (uint16_t *)y + (size_t)m * ldy + c;
                            *o = swiglu_bf16(r[e], r[2 + e]);
                        }
                    } else {
#pragma unroll
                        for (int hh = 0; hh < 2; hh++) {
                            const int n = n0 + 16 * tr + g + 8 * hh;
                            if (n >= N) continue;
                            y[(size_t)m * ldy + n] = accumulate ? __fadd_rn(old[qq][2 * hh + e], r[2 * hh + e])
                                                                : r[2 * hh + e];
                        }
                    }
                }
            }
        }
    }
#else
    __trap(); /* built without sm_90a: the launcher never picks this path (FLINT_SM90A) */
#endif
}

typedef void (*tss_fn)(const CUtensorMap, const CUtensorMap, float *, int, int, int, int, int, int, int);
typedef struct {
    int bx, u, st, minb; /* minb: blocks a multiprocessor (the grid: minb per multiprocessor) */
    tss_fn fn, fn_glu;
} tss_kind;
#define TSS_KIND(bx, u, st, minb)                                                                                      \
    {bx, u, st, minb, gemm_tss_kernel<bx, u, st, 0, minb>, gemm_tss_kernel<bx, u, st, 1, minb>}
static const tss_kind tss_kinds[] = {TSS_KIND(128, 1, 8, 1), TSS_KIND(128, 2, 4, 1), TSS_KIND(64, 1, 10, 1),
                                     TSS_KIND(64, 2, 5, 1),  TSS_KIND(64, 2, 3, 2),  TSS_KIND(64, 1, 6, 2),
                                     TSS_KIND(128, 2, 5, 1), TSS_KIND(64, 2, 8, 1)};
#define TSS_N_KINDS ((int)(sizeof tss_kinds / sizeof tss_kinds[0]))

static const tss_kind *tss_find(int bx, int u, int st, int minb) {
    for (int i = 0; i < TSS_N_KINDS; i++)
        if (tss_kinds[i].bx == bx && tss_kinds[i].u == u && tss_kinds[i].st == st && tss_kinds[i].minb == minb)
            return &tss_kinds[i];
    FLINT_ASSERT(!"no such tss tiling");
    return NULL;
}

int gemm_tss_smem(int bx, int u, int st) { return st * u * (8192 + bx * 64) + 16 * st + bx * 512; }

static int g_tss_ready;

void gemm_tss_init(void) {
    g_tss_ready = 1;
    for (int i = 0; i < TSS_N_KINDS; i++) {
        const tss_kind *k = &tss_kinds[i];
        const int smem = gemm_tss_smem(k->bx, k->u, k->st);
        CUDA_CHECK(cudaFuncSetAttribute((const void *)k->fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        CUDA_CHECK(cudaFuncSetAttribute((const void *)k->fn_glu, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    }
}

/* multiprocessors of the current device (the grid: one block each) */
static int tss_n_sm(void) {
    static int n_sm[64];
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    FLINT_ASSERT(dev >= 0 && dev < 64);
    if (!n_sm[dev]) CUDA_CHECK(cudaDeviceGetAttribute(&n_sm[dev], cudaDevAttrMultiProcessorCount, dev));
    return n_sm[dev];
}

typedef CUresult (*tss_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                   const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static tss_encode_fn tss_encoder(void) {
    static tss_encode_fn fn;
    static int tried;
    if (!tried) {
        void *p = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) ==
                cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = (tss_encode_fn)p;
        tried = 1;
    }
    return fn;
}

/* a tiled map over bf16 data: dims[0] elements innermost, strides of the others in bytes */
static int tss_map(CUtensorMap *m, const void *base, int rank, const cuuint64_t *dims, const cuuint64_t *strides,
                   const cuuint32_t *box) {
    const tss_encode_fn enc = tss_encoder();
    const cuuint32_t ones[4] = {1, 1, 1, 1};
    return enc && enc(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, (cuuint32_t)rank, (void *)base, dims, strides, box, ones,
                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* The two maps are encoded here, on the host, at every launch (a host-side encode, no device
 * call): in a captured graph that is once, at capture; eager launches (prefill chunks,
 * --enforce-eager) pay it per GEMM. */
int gemm_tss_launch(int bx, int u, int st, int minb, float *y, int ldy, const unsigned char *xp, int Mp,
                    const uint16_t *w, int M, int N, int K, int accumulate, int n_split, int out_mp, cudaStream_t s) {
    if (!g_tss_ready) gemm_tss_init(); /* flint_cuda_gemm_init does it, outside any capture */
    const tss_kind *k = tss_find(bx, u, st, minb);
    const int nJ = (K + 31) / 32;
    FLINT_ASSERT(nJ % (n_split * u) == 0 && M <= Mp && Mp % bx == 0);
    CUtensorMap tw, tx;
    const cuuint64_t wd[4] = {256, 2, (cuuint64_t)(N + 15) / 16, (cuuint64_t)nJ};
    const cuuint64_t ws[3] = {512, (cuuint64_t)nJ * 1024, 1024};
    const cuuint32_t wb[4] = {256, 2, 8, (cuuint32_t)u};
    const cuuint64_t xd[3] = {256, (cuuint64_t)Mp / 8, (cuuint64_t)nJ};
    const cuuint64_t xs[2] = {512, (cuuint64_t)Mp * 64};
    const cuuint32_t xb[3] = {256, (cuuint32_t)bx / 8, (cuuint32_t)u};
    if (!tss_map(&tw, w, 4, wd, ws, wb) || !tss_map(&tx, xp, 3, xd, xs, xb)) return 0;
    const int tiles = (M + bx - 1) / bx * ((N + 127) / 128), n_sm = minb * tss_n_sm();
    const tss_fn fn = accumulate == GEMM_EPI_GLU ? k->fn_glu : k->fn;
    FLINT_ASSERT(!out_mp || (accumulate == GEMM_EPI_GLU && out_mp >= M && out_mp % 8 == 0));
    fn<<<tiles < n_sm ? tiles : n_sm, TSS_THREADS, gemm_tss_smem(bx, u, st), s>>>(tw, tx, y, ldy, M, N, K, accumulate,
                                                                                  n_split, out_mp);
    CUDA_CHECK(cudaGetLastError());
    return 1;
}
