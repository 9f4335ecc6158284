/* The Hopper pieces the warpgroup GEMMs share (gemm_cuda.cu's tcw, gemm_tss_cuda.cu's tss):
 * mbarriers, bulk copies into shared memory, wgmma descriptors and fences, the register-A wgmma
 * forms. Needs cuda_runtime.h and stdint.h (cuda_common.cuh brings both); all static inline. */
#ifndef FLINT_TARGET_WGMMA_CUH
#define FLINT_TARGET_WGMMA_CUH

#define TCW_MAX_BM 128 /* the widest x tile of the warpgroup GEMMs (rows of x) */

/* What a GEMM's epilogue does with an output (gemm_cuda.cu: the kernels' `accumulate`) */
#define GEMM_EPI_STORE 0
#define GEMM_EPI_ADD 1
#define GEMM_EPI_GLU 2

/* gemm_tss_cuda.cu: the shared-memory-operand warpgroup GEMM (tss). bx x rows a tile (64 or 128),
 * u k32 blocks a stage, st stages; xp is the stream's scratch (tcw_permute_kernel's order, Mp
 * rows). Needs ((K + 31) / 32) % (n_split u) == 0. out_mp (GEMM_EPI_GLU only, else 0): the
 * SwiGLU output goes to y in the scratch's layout with out_mp rows, for the GEMM after it to read
 * (flint_cuda_gemm_tc_glu_xp). Returns 0 (nothing launched) when the
 * driver gives no tensor-map encoder or refuses the maps. */
int gemm_tss_smem(int bx, int u, int st);
void gemm_tss_init(void);
int gemm_tss_launch(int bx, int u, int st, int minb, float *y, int ldy, const unsigned char *xp, int Mp,
                    const uint16_t *w, int M, int N, int K, int accumulate, int n_split, int out_mp, cudaStream_t s);

/* sm_90a only (the host side compiles them too; the launcher checks FLINT_SM90A) */
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TCW_HAVE 1
static __device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
static __device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
/* A ring's S full and S empty barriers at bars (full[s] at 8 s, empty[s] at 8 (S + s)): full
 * takes the producer's one arrival (with the stage's bytes), empty `consumers` arrivals. Thread 0
 * initialises them; the block's barrier makes them visible before any use. */
static __device__ __forceinline__ void mbar_ring_init(uint32_t bars, int S, int consumers) {
    if (threadIdx.x == 0) {
        for (int s = 0; s < S; s++) {
            mbar_init(bars + 8 * s, 1);
            mbar_init(bars + 8 * (S + s), consumers);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
}
/* an arrival that also expects `bytes` of copies to land */
static __device__ __forceinline__ void mbar_arrive_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t ok = 0;
    while (!ok)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
                     : "=r"(ok)
                     : "r"(bar), "r"(parity)
                     : "memory");
}
static __device__ __forceinline__ void bulk_g2s(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}
/* a descriptor of a K-major operand without swizzle: start, LBO (next core matrix along k), SBO
 * (next 8 rows), all in 16-byte units */
static __device__ __forceinline__ uint64_t wg_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | (uint64_t)(lbo >> 4) << 16 | (uint64_t)(sbo >> 4) << 32;
}

static __device__ __forceinline__ void wg_fence(void) { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
static __device__ __forceinline__ void wg_commit(void) { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
static __device__ __forceinline__ void wg_wait1(void) { asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory"); }
static __device__ __forceinline__ void wg_wait0(void) { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
static __device__ __forceinline__ void wg_mma_n64(float *d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                  uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%"
                 "27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
                   "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db));
}
static __device__ __forceinline__ void wg_mma_n128(float *d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                   uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%"
                 "27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%"
                 "52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
                   "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
                   "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
                   "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),
                   "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),
                   "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db));
}

/* keeps the compiler from moving an accumulator between the asynchronous wgmmas that own it */
static __device__ __forceinline__ void wg_hold(float *d, const int n) {
#pragma unroll
    for (int i = 0; i < TCW_MAX_BM / 2; i++)
        if (i < n) asm volatile("" : "+f"(d[i])::"memory");
}
#else
#define TCW_HAVE 0
#endif

#endif
