/* Lab: a warpgroup GEMM with both operands in shared memory (wgmma's SS form), at the verify
 * shapes of 128-512 rows, against cuBLAS in the same process. Question (sessions 17, 25): the
 * forward's large-M GEMM (tcw, target/gemm_cuda.cu) takes W from registers and runs at ~360
 * TFLOP/s at 512 rows, a cluster of 4 blocks per output tile (one K quarter each, combined
 * through distributed shared memory). What would a kernel reach that (a) reads W and x from
 * shared memory in core-matrix order (one bulk copy per operand and stage), (b) is persistent
 * (the producer warp loads the next tile while the consumers store this one), and (c) keeps the
 * batch-invariant order (p0 + p1) + (p2 + p3) of the four K quarters in one block (MODE 2), or
 * one plain chain (MODE 0: the ceiling)? The operands here are
 * random bytes in the layout the kernel wants (the lab times; a small case checks the kernel
 * against a plain reference with the same layout read back). Not the forward's code.
 * Layouts (no swizzle; K-major core matrices of 8 rows x 16 bytes): per 128-row W block and k64
 * stage, 16 KB: k16 step q at 4 KB q, rows 8 G .. at 256 G, slots 8 c .. at 128 c, row i at 16 i;
 * x the same per BX-row block (BX 32 q bytes per k16 step).
 * Build (repository root): nvcc -O3 -I. -gencode arch=compute_90a,code=sm_90a tools/lab/lab_ss.cu -lcublas
 * -o lab_ss */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "target/wgmma.cuh" /* mbarriers, bulk copies, descriptors, wgmma fences (as the forward) */

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));        \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

#define WB 16384 /* W bytes per stage: 128 rows x k64 */

static __device__ __forceinline__ void ss_n64(float *d, uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(acc));
}

static __device__ __forceinline__ void ss_n128(float *d, uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(acc));
}

static __device__ __forceinline__ void ss_n256(float *d, uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, p, 1, 1, 0, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "l"(da), "l"(db), "r"(acc));
}

template <int BX>
static __device__ __forceinline__ void hold(float *d) {
#pragma unroll
    for (int i = 0; i < BX / 2; i++) asm volatile("" : "+f"(d[i])::"memory");
}

/* one stage's 4 k16 steps into d (first: the chain starts from +0); releases the slot of the
 * stage before once its wgmmas are done (pend: that slot, or -1) */
template <int BX>
static __device__ __forceinline__ void stage(float *d, uint32_t smem_s, uint32_t bars, int S, int it, int first,
                                             int wg, int *pend) {
    const int SB = WB + BX * 128, slot = it % S;
    mbar_wait(bars + 8 * slot, (uint32_t)((it / S) & 1));
    wg_fence();
    const uint32_t base = smem_s + slot * SB;
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const uint64_t da = wg_desc(base + q * 4096 + wg * 2048, 128, 256);
        const uint64_t db = wg_desc(base + WB + q * BX * 32, 128, 256);
        if (BX == 64) ss_n64(d, da, db, first && q == 0 ? 0 : 1);
        else if (BX == 128) ss_n128(d, da, db, first && q == 0 ? 0 : 1);
        else ss_n256(d, da, db, first && q == 0 ? 0 : 1);
    }
    wg_commit();
    wg_wait1();
    hold<BX>(d);
    if (*pend >= 0 && (threadIdx.x & 127) == 0) mbar_arrive(bars + 8 * (S + *pend));
    *pend = slot;
}

template <int BX>
static __device__ __forceinline__ void drain(float *d, uint32_t bars, int S, int *pend) {
    wg_wait0();
    hold<BX>(d);
    if (*pend >= 0 && (threadIdx.x & 127) == 0) mbar_arrive(bars + 8 * (S + *pend));
    *pend = -1;
}

template <int BX>
static __device__ __forceinline__ void store(float *y, const float *d, int M, int N, int m0, int n0) {
    const int tid = threadIdx.x, wg = tid >> 7, wq = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < BX / 2; i++) {
        const int q = i >> 2, e = i & 3;
        const int m = m0 + 8 * q + 2 * t + (e & 1), n = n0 + 64 * wg + 16 * wq + g + 8 * (e >> 1);
        y[(size_t)m * N + n] = d[i];
    }
}

/* MODE 0: one chain over K; MODE 2: the four quarters' chains, (p0 + p1) + (p2 + p3), in two
 * accumulator sets, p0 + p1 kept in shared memory meanwhile (BX * 512 bytes past the ring and its
 * barriers). Three sets in registers (p2 and p3 apart while p0 + p1 waits) spilled at the 168
 * registers a 288-thread block gets (registers are allotted per warpgroup: as for 384), ptxas C7512. */
template <int BX, int MODE, int S>
static __global__ void __launch_bounds__(288, 1)
    ss_kernel(float *y, const unsigned char *wp, const unsigned char *xp, int M, int N, int K) {
    extern __shared__ __align__(1024) unsigned char smem[];
    const int SB = WB + BX * 128, nS = K / 64, tiles_m = M / BX, n_tiles = tiles_m * (N / 128);
    const int tid = threadIdx.x, wg = tid >> 7;
    const uint32_t smem_s = (uint32_t)__cvta_generic_to_shared(smem), bars = smem_s + S * SB;
    mbar_ring_init(bars, S, 2);
    if (wg == 2) {
        if (tid == 256) {
            int it = 0;
            for (int tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
                const int mb = tile % tiles_m, nb = tile / tiles_m;
                for (int s = 0; s < nS; s++, it++) {
                    const int slot = it % S;
                    if (it >= S) mbar_wait(bars + 8 * (S + slot), (uint32_t)((it / S - 1) & 1));
                    const uint32_t full = bars + 8 * slot, dst = smem_s + slot * SB;
                    mbar_arrive_tx(full, (uint32_t)SB);
                    bulk_g2s(dst, wp + ((size_t)nb * nS + s) * WB, WB, full);
                    bulk_g2s(dst + WB, xp + ((size_t)mb * nS + s) * (BX * 128), BX * 128, full);
                }
            }
        }
        return;
    }
    float a[BX / 2], b[MODE == 2 ? BX / 2 : 1];
    int it = 0, pend = -1;
    for (int tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const int mb = tile % tiles_m, nb = tile / tiles_m;
        if (MODE == 0) {
            for (int s = 0; s < nS; s++, it++) stage<BX>(a, smem_s, bars, S, it, s == 0, wg, &pend);
            drain<BX>(a, bars, S, &pend);
        } else if (MODE == 2) { /* two sets: p0 + p1 waits in shared memory (after the ring) */
            float *stash = (float *)(smem + S * SB + 16 * S) + (tid & 255);
            const int nq = nS / 4;
            for (int s = 0; s < nq; s++, it++) stage<BX>(a, smem_s, bars, S, it, s == 0, wg, &pend);
            for (int s = 0; s < nq; s++, it++) stage<BX>(b, smem_s, bars, S, it, s == 0, wg, &pend);
            drain<BX>(b, bars, S, &pend);
            hold<BX>(a);
#pragma unroll
            for (int i = 0; i < BX / 2; i++) stash[256 * i] = __fadd_rn(a[i], b[i]);
            for (int s = 0; s < nq; s++, it++) stage<BX>(a, smem_s, bars, S, it, s == 0, wg, &pend);
            for (int s = 0; s < nq; s++, it++) stage<BX>(b, smem_s, bars, S, it, s == 0, wg, &pend);
            drain<BX>(b, bars, S, &pend);
            hold<BX>(a);
#pragma unroll
            for (int i = 0; i < BX / 2; i++) a[i] = __fadd_rn(stash[256 * i], __fadd_rn(a[i], b[i]));
        }
        store<BX>(y, a, M, N, mb * BX, nb * 128);
    }
}

static __global__ void ref_kernel(float *y, const unsigned char *wp, const unsigned char *xp, int M, int N, int K,
                                  int BX) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y;
    if (n >= N) return;
    const int nS = K / 64;
    float s = 0.f;
    for (int k = 0; k < K; k++) {
        const int st = k / 64, q = (k % 64) / 16, sl = k % 16, cc = sl / 8, e = sl % 8;
        const int rn = n % 128, rm = m % BX;
        const size_t ow = ((size_t)(n / 128) * nS + st) * WB + q * 4096 + (rn / 8) * 256 + cc * 128 + (rn % 8) * 16 + e * 2;
        const size_t ox = ((size_t)(m / BX) * nS + st) * (BX * 128) + q * BX * 32 + (rm / 8) * 256 + cc * 128 +
                          (rm % 8) * 16 + e * 2;
        const uint16_t hw = *(const uint16_t *)(wp + ow), hx = *(const uint16_t *)(xp + ox);
        s = fmaf(__uint_as_float((uint32_t)hw << 16), __uint_as_float((uint32_t)hx << 16), s);
    }
    y[(size_t)m * N + n] = s;
}

/* random bf16 in [-1, 1) (small exponents only: no inf/NaN) */
static __global__ void fill_kernel(uint16_t *p, size_t n, uint32_t seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        const float f = (float)(h & 0xFFFF) / 32768.0f - 1.0f;
        p[i] = (uint16_t)(__float_as_uint(f) >> 16);
    }
}

typedef void (*kfn)(float *, const unsigned char *, const unsigned char *, int, int, int);
typedef struct {
    const char *name;
    kfn f;
    int bx, s, mode;
} variant;

static int n_sm;

static int smem_of(const variant *v) { return v->s * (WB + v->bx * 128) + 16 * v->s + (v->mode == 2 ? v->bx * 512 : 0); }

static void launch(const variant *v, float *y, const unsigned char *w, const unsigned char *x, int M, int N, int K) {
    const int smem = smem_of(v);
    const int tiles = (M / v->bx) * (N / 128);
    v->f<<<tiles < n_sm ? tiles : n_sm, 288, smem>>>(y, w, x, M, N, K);
}

int main(int argc, char **argv) {
    CK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, 0));
    variant vs[] = {
        {"ss 128x128 s6 one chain", ss_kernel<128, 0, 6>, 128, 6, 0},
        {"ss 128x128 s4 quarters 2set", ss_kernel<128, 2, 4>, 128, 4, 2},
        {"ss 128x128 s4 one chain", ss_kernel<128, 0, 4>, 128, 4, 0},
        {"ss 128x256 s4 one chain", ss_kernel<256, 0, 4>, 256, 4, 0},
        {"ss 128x64 s8 one chain", ss_kernel<64, 0, 8>, 64, 8, 0},
    };
    const int nv = sizeof vs / sizeof vs[0];
    for (int i = 0; i < nv; i++)
        CK(cudaFuncSetAttribute(vs[i].f, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_of(&vs[i])));
    cublasHandle_t hb;
    if (cublasCreate(&hb) != CUBLAS_STATUS_SUCCESS) return 1;
    int bad = 0;
    { /* check: every variant against the plain reference, M 256, N 384, K 1024 */
        const int M = 256, N = 384, K = 1024;
        unsigned char *w, *x;
        float *y, *r;
        CK(cudaMalloc(&w, (size_t)N * K * 2));
        CK(cudaMalloc(&x, (size_t)M * K * 2));
        CK(cudaMalloc(&y, (size_t)M * N * 4));
        CK(cudaMalloc(&r, (size_t)M * N * 4));
        fill_kernel<<<256, 256>>>((uint16_t *)w, (size_t)N * K, 1);
        fill_kernel<<<256, 256>>>((uint16_t *)x, (size_t)M * K, 2);
        float *hy = (float *)malloc((size_t)M * N * 4), *hr = (float *)malloc((size_t)M * N * 4);
        for (int i = 0; i < nv; i++) {
            CK(cudaMemset(y, 0xFF, (size_t)M * N * 4));
            ref_kernel<<<dim3((N + 127) / 128, M), 128>>>(r, w, x, M, N, K, vs[i].bx);
            launch(&vs[i], y, w, x, M, N, K);
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(hy, y, (size_t)M * N * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(hr, r, (size_t)M * N * 4, cudaMemcpyDeviceToHost));
            double me = 0;
            for (size_t j = 0; j < (size_t)M * N; j++) {
                const double e = fabs((double)hy[j] - hr[j]);
                me = e > me || e != e ? e : me;
            }
            printf("check %-26s M %d N %d K %d: max |err| %.3g%s\n", vs[i].name, M, N, K, me, me < 1e-2 ? "" : "  BAD");
            bad |= !(me < 1e-2);
        }
        free(hy), free(hr);
        cudaFree(w), cudaFree(x), cudaFree(y), cudaFree(r);
    }
    const int shapes[][2] = {{6144, 4096}, {4096, 4096}, {24576, 4096}, {4096, 12288}, {151936, 4096}};
    const int Ms[] = {128, 256, 512};
    printf("\n%-6s %-14s %-28s %10s %9s\n", "M", "N x K", "kernel", "us", "TFLOP/s");
    for (int si = 0; si < 5; si++)
        for (int mi = 0; mi < 3; mi++) {
            const int N = shapes[si][0], K = shapes[si][1], M = Ms[mi];
            if (si == 4 && M != 512) continue;
            const size_t wbytes = (size_t)N * K * 2;
            const int copies = (int)((400u << 20) / wbytes) + 1 > 8 ? 8 : (int)((400u << 20) / wbytes) + 1;
            unsigned char *w, *x;
            float *y;
            CK(cudaMalloc(&w, wbytes * copies));
            CK(cudaMalloc(&x, (size_t)M * K * 2));
            CK(cudaMalloc(&y, (size_t)M * N * 4));
            fill_kernel<<<1024, 256>>>((uint16_t *)w, wbytes / 2 * copies, 3);
            fill_kernel<<<256, 256>>>((uint16_t *)x, (size_t)M * K, 4);
            char sh[32];
            snprintf(sh, sizeof sh, "%dx%d", N, K);
            cudaEvent_t e0, e1;
            cudaEventCreate(&e0), cudaEventCreate(&e1);
            const int reps = 20;
            for (int vi = -1; vi < nv; vi++) {
                if (vi >= 0 && M % vs[vi].bx) continue;
                for (int r = 0; r < reps + 3; r++) {
                    if (r == 3) cudaEventRecord(e0);
                    const unsigned char *wc = w + wbytes * (r % copies);
                    if (vi < 0) {
                        const float one = 1.f, zero = 0.f;
                        cublasGemmEx(hb, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, wc, CUDA_R_16BF, K, x, CUDA_R_16BF,
                                     K, &zero, y, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
                    } else {
                        launch(&vs[vi], y, wc, x, M, N, K);
                    }
                }
                cudaEventRecord(e1);
                CK(cudaEventSynchronize(e1));
                CK(cudaGetLastError());
                float ms;
                cudaEventElapsedTime(&ms, e0, e1);
                const double us = 1e3 * ms / reps;
                printf("%-6d %-14s %-28s %10.1f %9.1f\n", M, sh, vi < 0 ? "cublas (fp32 out)" : vs[vi].name, us,
                       2.0 * M * N * K / us * 1e-6);
            }
            cudaFree(w), cudaFree(x), cudaFree(y);
        }
    (void)argc, (void)argv;
    printf(bad ? "lab_ss: CHECK FAILED\n" : "lab_ss: checks passed\n");
    return bad;
}
