/* The sampler on the GPU (sampler_cuda.h), so the speculative step keeps the logits on the device
 * and brings back only the emitted tokens (issue #7). sampler.c and accept.c are the definition and
 * the C reference of every kernel here: flint_sampler_sample / flint_sampler_probs (sampler_kernel,
 * SAMPLE), flint_sample_draft with the drafter's q (DRAFT), flint_accept_draft (ACCEPT rows, then
 * accept_finish_kernel); flint_philox4x32 / flint_rng_uniform (smp_philox / smp_uniform).
 *
 * Layout. One thread-block cluster per row: C = 1..8 blocks of 512 threads (C from the vocabulary
 * size alone), block b holding entries [b L, b L + L) of the row in shared memory, L = 512 E with E
 * odd (thread t's chunk [t E, t E + E) is then read without bank conflicts). The logits are read
 * from global memory once; every later pass (softmax, the top-k / top-p boundary search, min-p,
 * renormalisation, the inverse-CDF walk) runs over shared memory, and the blocks exchange their
 * partial results through distributed shared memory at cluster barriers. One block alone could
 * not hold a 151,936-entry row and would re-read it from L2 on every pass.
 *
 * Determinism and batch invariance: every reduction has an order fixed by the vocabulary size:
 * per thread in index order (of its chunk, or of its stride j = t + 512 m), then a butterfly
 * across the warp, then the 16 warps in order, then the C blocks in rank order. Sums the CPU takes
 * in double are taken in double. Masses that need exact, order-free sums (the top-p search, the
 * walk) are fixed point: floor(p 2^62) as 64-bit integers, whose sums are exact in any order, so
 * shared-memory atomics can build histograms without making the result depend on timing. Nothing
 * depends on the number of rows or on the other rows.
 *
 * Row pipeline (SAMPLE; DRAFT stops after the softmax, without filters or renormalisation):
 *   load     x = logits * (1/T) into shared memory; max (and argmax, NaN never wins); greedy rows
 *            stop here (one pass over the logits).
 *   softmax  e = exp(x - max), S = sum e in double; p = e * (float)(1/S), as sampler.c.
 *   top-k    radix select over the float bits of p (p >= 0, so the bits order like the values):
 *            three rounds of 10-bit digits (bits 29..20, 19..10, 9..0; p <= 1 leaves bits 31..30
 *            zero), each a 1024-bin histogram (count, fixed-point mass) of the candidates that
 *            share the digits found so far, summed over the cluster; a scan of the bins from the
 *            top finds the bin where the sorted list's running count reaches top_k. A round ends
 *            the search early when that whole bin is inside. At the last round the bin is one
 *            value v: the first m elements equal to v in index order are kept (the CPU's tie
 *            break: larger probability first, then lower index), ranked by a scan of per-thread
 *            tie counts plus the counts of the lower-ranked blocks. Entries outside are zeroed.
 *   top-p    the same search on the survivors by mass: need = ceil(top_p * total) in fixed point
 *            (total over the top-k survivors), the boundary is the element where the sorted
 *            running mass first reaches need (sampler.c: cum >= top_p * tot), ties again by index.
 *   min-p    p < min_p * pmax zeroed; pmax is 1 * (float)(1/S) (exp(0) = 1 is the largest e, and
 *            the largest p always survives top-k and top-p), so it needs no reduction.
 *   renorm   tot = sum p in double, p *= (float)(1/tot).
 *   walk     u = flint_rng_uniform(seed, pos, purpose, 0); fixed-point prefix sums (per thread over
 *            its chunk in index order, a block scan, the lower ranks' totals): the thread whose
 *            range holds u * total walks its chunk to the first i with cum > u * total, skipping
 *            zeros; when u * total rounds past the end, the last positive entry (sampler.c).
 * Fixed point against the CPU's double sums: they differ by at most ~V 2^-62, so only a
 * cumulative within ~1e-13 of a boundary can be decided differently.
 *
 * Cost (estimates for an H200, not measured here; tests/test_sampler_cuda.c prints timings): one
 * read of the logits (64 x 151,936 rows: 39 MB, ~9 us), the exponential (exact mode ~0.3 clock
 * per entry per SM, ~8 us for those 64 rows; CUDA's expf ~0.1), then per select round one pass over
 * shared memory, its atomics and one cluster barrier. The round-0 atomics contend only when a
 * row's probabilities crowd into a few bins and alternate between them (near-flat rows); runs of
 * one bin are added at once and a language model's row spreads over hundreds of bins.
 *
 * Kernels never allocate or synchronise; launches are checked. */
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"      /* FLINT_ASSERT */
#include "sampler/sampler.h"  /* flint_rng_purpose */
#include "sampler/sampler_cuda.h"

#define SMP_CHECK(expr)                                                                             \
    do {                                                                                            \
        cudaError_t e_ = (expr);                                                                    \
        if (e_ != cudaSuccess) smp_cuda_fail(#expr, e_, __FILE__, __LINE__);                        \
    } while (0)

static void smp_cuda_fail(const char *expr, cudaError_t e, const char *file, int line) {
    fprintf(stderr, "flint: CUDA error: %s: %s (%s) at %s:%d\n", expr, cudaGetErrorString(e), cudaGetErrorName(e),
            file, line);
    fflush(stderr);
    abort();
}

#define SMP_T 512                 /* threads per block */
#define SMP_W (SMP_T / 32)        /* warps per block */
#define SMP_BINS 1024             /* radix digit of 10 bits */
#define SMP_SLICE 20480           /* a block takes about this many entries before the row is split */
#define SMP_MAX_C 8               /* portable cluster size */
#define SMP_MAX_E 95              /* entries per thread: 95 * 512 * 4 B + histograms < 227 KB */
#define SMP_HIST_BYTES (2 * SMP_BINS * (4 + 8)) /* two (count, mass) histograms: rounds alternate */
#define SMP_FULL 0xffffffffu

enum { SMP_SAMPLE = 0, SMP_DRAFT = 1, SMP_ACCEPT = 2 };

typedef unsigned long long u64;

/* Everything a launch needs, passed by value (one kernel serves the three launchers). */
typedef struct smp_args {
    int mode, V, C, E, L, exact;
    const float *logits;
    size_t ld;
    /* SAMPLE */
    int32_t *tokens;
    float *pout; /* probs_out or q_out */
    size_t ld_out;
    const flint_cuda_sampling *params;
    const int32_t *row_param;
    const int64_t *pos;
    int purpose;
    /* DRAFT */
    const float *temperature;
    const int32_t *greedy;
    const uint64_t *seed;
    const int32_t *cand; /* greedy rows' argmax candidates (flint_cuda_draft_sample_cand), or NULL */
    int n_cand;
    /* ACCEPT */
    const int32_t *draft;
    int ld_draft;
    const int32_t *k;
    const float *q;
    size_t ld_q_req, ld_q;
    const int32_t *row0;
    const int64_t *pos0;
    int32_t *res_acc, *res_tok; /* [n_req * (ld_draft + 1)]: accepted?, emitted token */
} smp_args;

/* One row's job, the same in every block of its cluster. */
typedef struct smp_row {
    const float *logits;
    int greedy, top_k, renorm;
    float temperature, top_p, min_p;
    uint64_t seed;
    int64_t pos;
    int purpose;  /* of the draw: SAMPLE's argument, DRAFT, RESIDUAL or BONUS */
    int check, x; /* ACCEPT: row tests draft token x (j < k) */
    const float *qrow;
    int32_t *tok, *acc;
    float *pout;
} smp_row;

/* Per-block shared state. The x_ fields are the cluster exchange: each is written once per launch
 * by thread 0 and read by every block after a cluster barrier, so none is ever overwritten while a
 * peer may still read it. */
typedef struct smp_shared {
    float x_max;
    int x_arg;
    double x_sum, x_tot, x_rmass;
    float x_px;
    u64 x_wsum;
    int x_wlast;
    /* block reductions and scans */
    double rd[SMP_W];
    float rf[SMP_W];
    int ri[SMP_W];
    unsigned rc[SMP_W];
    u64 rm[SMP_W];
    /* the bin a select round found */
    int sel_found, sel_d;
    unsigned sel_c, sel_ac;
    u64 sel_m, sel_am;
} smp_shared;

/* The kept set of a select: key >= thr, plus (tie) the first m entries equal to tie_key in index
 * order, tie_base of which sit in lower-ranked blocks. thr = 0 keeps every positive entry. */
typedef struct smp_sel {
    unsigned thr, tie_key, m, tie_base;
    int tie;
} smp_sel;

/* ==== Philox-4x32-10 and the 53-bit uniform (C reference: sampler.c) ==== */

static __device__ __forceinline__ void smp_philox(uint64_t key, const uint32_t in[4], uint32_t out[4]) {
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    uint32_t c0 = in[0], c1 = in[1], c2 = in[2], c3 = in[3];
#pragma unroll
    for (int r = 0; r < 10; r++) {
        const uint32_t lo0 = 0xD2511F53u * c0, hi0 = __umulhi(0xD2511F53u, c0);
        const uint32_t lo1 = 0xCD9E8D57u * c2, hi1 = __umulhi(0xCD9E8D57u, c2);
        const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

static __device__ double smp_uniform(uint64_t seed, int64_t pos, int purpose, uint32_t index) {
    const uint32_t ctr[4] = {(uint32_t)(uint64_t)pos, (uint32_t)((uint64_t)pos >> 32), (uint32_t)purpose, index};
    uint32_t o[4];
    smp_philox(seed, ctr, o);
    const u64 a = o[0] >> 5, b = o[1] >> 6; /* 27 + 26 bits, exact in double */
    return __dmul_rn(__ull2double_rn(a * 67108864ull + b), 1.0 / 9007199254740992.0);
}

/* ==== The exponential ====
 * glibc's expf (sysdeps/ieee754/flt-32/e_expf.c, 2.28 and later) as its x86-64 FMA build computes
 * it (__expf_fma: the three polynomial steps and the two uses of InvLn2N * x fused): a 32-entry
 * table of 2^(i/32), reduction x N/ln2 = k + r, a cubic in r, all in double, rounded once to float.
 * The same operations in the same order give the same bits (checked exhaustively on [-110, 0] on
 * the host against glibc 2.36; tests/test_sampler_cuda.c checks the device against the host). */
static __device__ const u64 smp_exp2f_tab[32] = {
    0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull,
    0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull,
    0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull,
    0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull,
    0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull,
    0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull,
    0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull,
    0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull,
};

static __device__ float smp_expf_glibc(float x) {
    const uint32_t ux = __float_as_uint(x), abstop = (ux >> 20) & 0x7ff;
    if (abstop > 0x42a) { /* |x| >= 88 or NaN: glibc's special cases */
        if (ux == 0xff800000u) return 0.0f;
        if (abstop >= 0x7f8) return x + x;
        if (x > 0x1.62e42ep6f) return __int_as_float(0x7f800000);
        if (x < -0x1.9fe368p6f) return 0.0f;
        if (x < -0x1.9d1d9ep6f) return 0x1p-149f; /* __math_may_uflowf: 0x1.4p-75f squared */
    }
    const double inv_ln2_n = 0x1.71547652b82fep+0 * 32, shift = 0x1.8p+52;
    const double c0 = 0x1.c6af84b912394p-5 / 32 / 32 / 32, c1 = 0x1.ebfce50fac4f3p-3 / 32 / 32,
                 c2 = 0x1.62e42ff0c52d6p-1 / 32;
    const double xd = (double)x;
    const double kds = fma(inv_ln2_n, xd, shift); /* rounds x N/ln2 to an integer k */
    const u64 ki = (u64)__double_as_longlong(kds);
    const double kd = __dsub_rn(kds, shift);
    const double r = fma(inv_ln2_n, xd, -kd);
    const u64 t = __ldg(&smp_exp2f_tab[ki % 32]) + (ki << 47);
    const double s = __longlong_as_double((long long)t);
    const double z = fma(r, c0, c1);
    const double r2 = __dmul_rn(r, r);
    double y = fma(r, c2, 1.0);
    y = fma(z, r2, y);
    y = __dmul_rn(y, s);
    return __double2float_rn(y);
}

static __device__ __forceinline__ float smp_exp(float x, int exact) { return exact ? smp_expf_glibc(x) : expf(x); }

/* Fixed-point mass of a probability in [0, 2]: floor(p 2^62), exact to 2^-62. */
static __device__ __forceinline__ u64 smp_fx(float p) { return __float2ull_rz(__fmul_rn(p, 0x1p62f)); }

/* ==== Block and cluster primitives (fixed orders) ==== */

static __device__ __forceinline__ void cluster_sync_all(void) {
    __cluster_barrier_arrive(); /* release: this block's shared writes ... */
    __cluster_barrier_wait();   /* ... are visible to every peer after the wait (acquire) */
}

static __device__ __forceinline__ const smp_shared *peer_sh(const smp_shared *sh, int r) {
    return (const smp_shared *)__cluster_map_shared_rank((const void *)sh, (unsigned)r);
}

/* (v, i) beats (bv, bi): larger value, then lower index; a total order, so any tree gives the same
 * winner. Empty is (-inf, INT_MAX), beaten by any real entry, -inf included (flint_argmax). */
static __device__ __forceinline__ int smp_better(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
}

static __device__ void block_argmax(float *v, int *i, smp_shared *sh) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    float bv = *v;
    int bi = *i;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(SMP_FULL, bv, o);
        const int oi = __shfl_xor_sync(SMP_FULL, bi, o);
        if (smp_better(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
    if (lane == 0) sh->rf[w] = bv, sh->ri[w] = bi;
    __syncthreads();
    bv = sh->rf[0];
    bi = sh->ri[0];
    for (int k = 1; k < SMP_W; k++)
        if (smp_better(sh->rf[k], sh->ri[k], bv, bi)) bv = sh->rf[k], bi = sh->ri[k];
    __syncthreads();
    *v = bv;
    *i = bi;
}

/* Sum in double: xor butterfly (every lane ends with the same bits: a + b == b + a), then the warps
 * in order. The result is in every thread. */
static __device__ double block_sum_d(double v, smp_shared *sh) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(SMP_FULL, v, o);
    if (lane == 0) sh->rd[w] = v;
    __syncthreads();
    double s = sh->rd[0];
    for (int k = 1; k < SMP_W; k++) s += sh->rd[k];
    __syncthreads();
    return s;
}

static __device__ int block_max_i(int v, smp_shared *sh) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    v = __reduce_max_sync(SMP_FULL, v);
    if (lane == 0) sh->ri[w] = v;
    __syncthreads();
    int m = sh->ri[0];
    for (int k = 1; k < SMP_W; k++) m = max(m, sh->ri[k]);
    __syncthreads();
    return m;
}

/* Exclusive scan over threads of a (count, mass) pair, with the block totals. Integers: exact. */
static __device__ void block_scan(unsigned c, u64 m, unsigned *ec, u64 *em, unsigned *tc, u64 *tm, smp_shared *sh) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    unsigned ic = c;
    u64 im = m;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const unsigned yc = __shfl_up_sync(SMP_FULL, ic, o);
        const u64 ym = __shfl_up_sync(SMP_FULL, im, o);
        if (lane >= o) ic += yc, im += ym;
    }
    if (lane == 31) sh->rc[w] = ic, sh->rm[w] = im;
    __syncthreads();
    unsigned oc = 0, sc = 0;
    u64 om = 0, sm = 0;
    for (int k = 0; k < SMP_W; k++) {
        if (k == w) oc = sc, om = sm;
        sc += sh->rc[k];
        sm += sh->rm[k];
    }
    __syncthreads();
    *ec = oc + ic - c;
    *em = om + im - m;
    *tc = sc;
    *tm = sm;
}

/* ==== Top-k / top-p boundary: radix select over the bits of p (see the banner) ==== */

static __device__ smp_sel smp_select(int by_mass, unsigned need_k, float top_p, const float *sp, int E, int C,
                                     int rank, unsigned *hc, u64 *hm, int *hround, smp_shared *sh) {
    const int t = threadIdx.x, j0 = t * E;
    smp_sel res = {0u, 0u, 0u, 0u, 0};
    unsigned prefix = 0, base_c = 0;
    u64 base_m = 0, need_m = 0;
    for (int round = 0; round < 3; round++) {
        const int shift = 20 - 10 * round;
        const int buf = (*hround)++ & 1; /* the other buffer may still be read by peers */
        unsigned *c = hc + buf * SMP_BINS;
        u64 *m = hm + buf * SMP_BINS;
        for (int b = t; b < SMP_BINS; b += SMP_T) {
            c[b] = 0;
            m[b] = 0;
        }
        __syncthreads();
        /* this block's histogram of the candidates' digit; a run of one digit is added at once, so
         * a flat row does not serialise on one bin */
        unsigned cur = SMP_BINS, rc = 0;
        u64 rm = 0;
        for (int k = 0; k < E; k++) {
            const float p = sp[j0 + k];
            const unsigned key = __float_as_uint(p);
            if (!(p > 0.0f) || (key >> (shift + 10)) != prefix) continue;
            const unsigned d = (key >> shift) & (SMP_BINS - 1);
            if (d != cur) {
                if (rc) {
                    atomicAdd(c + cur, rc);
                    if (by_mass) atomicAdd(m + cur, rm);
                }
                cur = d;
                rc = 0;
                rm = 0;
            }
            rc++;
            if (by_mass) rm += smp_fx(p);
        }
        if (rc) {
            atomicAdd(c + cur, rc);
            if (by_mass) atomicAdd(m + cur, rm);
        }
        cluster_sync_all();
        /* the cluster's histogram in descending digit order: thread t owns bins 1023 - 2t, 1022 - 2t */
        const int b0 = SMP_BINS - 1 - 2 * t, b1 = b0 - 1;
        unsigned c0 = 0, c1 = 0;
        u64 m0 = 0, m1 = 0;
        for (int r = 0; r < C; r++) {
            const unsigned *pc = (const unsigned *)__cluster_map_shared_rank((const void *)c, (unsigned)r);
            c0 += pc[b0];
            c1 += pc[b1];
            if (by_mass) {
                const u64 *pm = (const u64 *)__cluster_map_shared_rank((const void *)m, (unsigned)r);
                m0 += pm[b0];
                m1 += pm[b1];
            }
        }
        if (t == 0) sh->sel_found = 0;
        unsigned ec, tc;
        u64 em, tm;
        block_scan(c0 + c1, m0 + m1, &ec, &em, &tc, &tm, sh);
        /* top-p's need, from the total mass of the survivors (round 0 sees them all) */
        if (round == 0 && by_mass) need_m = (u64)ceil(__dmul_rn((double)top_p, __ull2double_rn(tm)));
        /* the bin in which the sorted list's running count / mass reaches the need: rem in
         * (above, above + bin], unique because the running sums are monotone */
        int hit = -1;
        unsigned ac = 0, hcnt = 0;
        u64 am = 0, hmass = 0;
        if (by_mass) {
            const u64 rem = need_m - base_m;
            if (em < rem && rem <= em + m0) hit = b0, ac = ec, am = em, hcnt = c0, hmass = m0;
            else if (em + m0 < rem && rem <= em + m0 + m1) hit = b1, ac = ec + c0, am = em + m0, hcnt = c1, hmass = m1;
        } else {
            const unsigned rem = need_k - base_c;
            if (ec < rem && rem <= ec + c0) hit = b0, ac = ec, am = em, hcnt = c0, hmass = m0;
            else if (ec + c0 < rem && rem <= ec + c0 + c1) hit = b1, ac = ec + c0, am = em + m0, hcnt = c1, hmass = m1;
        }
        if (hit >= 0) {
            sh->sel_found = 1;
            sh->sel_d = hit;
            sh->sel_c = hcnt;
            sh->sel_m = hmass;
            sh->sel_ac = ac;
            sh->sel_am = am;
        }
        __syncthreads();
        if (!sh->sel_found) return res; /* fewer candidates than top_k (or no mass): keep them all */
        const unsigned d = (unsigned)sh->sel_d, bc = sh->sel_c;
        const u64 bm = sh->sel_m;
        base_c += sh->sel_ac;
        base_m += sh->sel_am;
        const unsigned lo_key = (prefix << (shift + 10)) | (d << shift);
        /* the whole bin is inside: top-k needs exactly its count; top-p reaches need only at the
         * bin's last element (every mass in it is >= 1) or the bin is a single element */
        if (by_mass ? (bc == 1 || base_m + bm == need_m) : (need_k - base_c == bc)) {
            res.thr = lo_key;
            return res;
        }
        prefix = (prefix << 10) | d;
        if (round == 2) { /* the bin is one value v = prefix, bc entries equal to it */
            unsigned keep;
            if (by_mass) {
                const u64 f = smp_fx(__uint_as_float(prefix)), rem = need_m - base_m;
                keep = (unsigned)((rem + f - 1) / f);
            } else {
                keep = need_k - base_c;
            }
            if (keep >= bc) {
                res.thr = prefix;
                return res;
            }
            res.tie = 1;
            res.tie_key = prefix;
            res.thr = prefix + 1;
            res.m = keep;
            unsigned tb = 0; /* ties in lower-ranked blocks come first in index order */
            for (int r = 0; r < rank; r++)
                tb += ((const unsigned *)__cluster_map_shared_rank((const void *)c, (unsigned)r))[d];
            res.tie_base = tb;
            return res;
        }
    }
    return res;
}

/* Zero the entries outside a select's set (and below min-p); *t2 gets this thread's sum of what is
 * left, in index order (the renormaliser's partial). */
static __device__ void smp_apply(smp_sel s, float *sp, int E, int minp, float thr_minp, double *t2,
                                 smp_shared *sh) {
    const int j0 = threadIdx.x * E;
    unsigned rk = 0;
    if (s.tie) {
        unsigned n = 0, tc;
        u64 em, tm;
        for (int k = 0; k < E; k++) n += __float_as_uint(sp[j0 + k]) == s.tie_key;
        block_scan(n, 0, &rk, &em, &tc, &tm, sh);
        rk += s.tie_base;
    }
    double acc = 0;
    for (int k = 0; k < E; k++) {
        float p = sp[j0 + k];
        if (!(p > 0.0f)) continue;
        const unsigned key = __float_as_uint(p);
        int keep = key >= s.thr;
        if (s.tie && key == s.tie_key) keep = rk++ < s.m;
        if (!keep || (minp && p < thr_minp)) p = 0.0f;
        sp[j0 + k] = p;
        acc += (double)p;
    }
    *t2 = acc;
}

/* The inverse-CDF walk (flint_sample_from_probs) over the row after p *= scale. Returns the token
 * in exactly one thread of the cluster, -1 in the others. */
static __device__ int smp_walk(float *sp, int base, int E, int C, int rank, float scale, double u, smp_shared *sh) {
    const int t = threadIdx.x, j0 = t * E;
    u64 sum = 0;
    int last = -1;
    for (int k = 0; k < E; k++) {
        const float p = __fmul_rn(sp[j0 + k], scale);
        sp[j0 + k] = p;
        if (p > 0.0f) {
            sum += smp_fx(p);
            last = base + j0 + k;
        }
    }
    unsigned ec, tc;
    u64 ex, btot;
    block_scan(0, sum, &ec, &ex, &tc, &btot, sh);
    const int blast = block_max_i(last, sh);
    if (t == 0) sh->x_wsum = btot, sh->x_wlast = blast;
    cluster_sync_all();
    u64 pre = 0, tot = 0;
    int glast = -1;
    for (int r = 0; r < C; r++) {
        const smp_shared *ps = peer_sh(sh, r);
        const u64 v = ps->x_wsum;
        if (r < rank) pre += v;
        tot += v;
        glast = max(glast, ps->x_wlast);
    }
    const double target = __dmul_rn(u, __ull2double_rn(tot));
    if (!(__ull2double_rn(tot) > target)) /* u * total rounded past the end (or nothing left) */
        return rank == 0 && t == 0 ? (glast >= 0 ? glast : 0) : -1;
    u64 cum = pre + ex;
    if (!(__ull2double_rn(cum) <= target && target < __ull2double_rn(cum + sum))) return -1;
    for (int k = 0; k < E; k++) {
        const float p = sp[j0 + k];
        if (!(p > 0.0f)) continue;
        cum += smp_fx(p);
        if (__ull2double_rn(cum) > target) return base + j0 + k;
    }
    return -1; /* not reached: the range test above guarantees a crossing in this chunk */
}

/* ==== The row kernel ==== */

/* Fills w for cluster cid; 0 when the cluster has no row (ACCEPT rows past k). */
static __device__ int smp_row_setup(const smp_args *a, int cid, smp_row *w) {
    memset(w, 0, sizeof *w);
    w->x = -1;
    if (a->mode == SMP_DRAFT) {
        w->logits = a->logits + (size_t)cid * a->ld;
        w->temperature = a->temperature[cid];
        w->greedy = (a->greedy && a->greedy[cid]) || w->temperature == 0.0f;
        w->top_p = 1.0f;
        w->seed = a->seed[cid];
        w->pos = a->pos[cid];
        w->purpose = FLINT_RNG_DRAFT;
        w->tok = a->tokens + cid;
        w->pout = a->pout && !w->greedy ? a->pout + (size_t)cid * a->ld_out : NULL;
        return 1;
    }
    flint_cuda_sampling P;
    if (a->mode == SMP_SAMPLE) {
        P = a->params[a->row_param ? a->row_param[cid] : cid];
        w->logits = a->logits + (size_t)cid * a->ld;
        w->pos = a->pos[cid];
        w->purpose = a->purpose;
        w->tok = a->tokens + cid;
        w->pout = a->pout ? a->pout + (size_t)cid * a->ld_out : NULL;
    } else {
        const int i = cid / (a->ld_draft + 1), j = cid % (a->ld_draft + 1);
        const int kk = min(max(a->k[i], 0), a->ld_draft);
        if (j > kk) return 0;
        P = a->params[i];
        w->logits = a->logits + (size_t)(a->row0[i] + j) * a->ld;
        w->pos = a->pos0[i] + j;
        w->check = j < kk;
        w->x = w->check ? a->draft[(size_t)i * a->ld_draft + j] : -1;
        w->qrow = a->q && w->check ? a->q + i * a->ld_q_req + j * a->ld_q : NULL;
        w->purpose = w->check ? FLINT_RNG_RESIDUAL : FLINT_RNG_BONUS;
        w->tok = a->res_tok + cid;
        w->acc = a->res_acc + cid;
    }
    w->temperature = P.temperature;
    w->greedy = P.temperature == 0.0f;
    w->top_k = P.top_k;
    w->top_p = P.top_p;
    w->min_p = P.min_p;
    w->seed = P.seed;
    w->renorm = 1;
    return 1;
}

/* x = v * inv_t (raw logits when greedy) into sp[j]; running max / argmax over real entries. */
static __device__ __forceinline__ void smp_take(float v, int j, int base, int nreal, int greedy, float inv_t, float *sp,
                                                float *bv, int *bi) {
    const float x = greedy ? v : __fmul_rn(v, inv_t);
    if (j < nreal && x == x && smp_better(x, base + j, *bv, *bi)) *bv = x, *bi = base + j;
    sp[j] = x;
}

/* Programmatic dependent launch, as the target's kernels (target/cuda_common.cuh says how): every
 * kernel here waits (griddepcontrol.wait) before its first memory access, so it may be scheduled
 * while the kernel before it still runs; launched so while smp_pdl is on (the default;
 * flint_cuda_sampler_set_pdl). The draft's Markov loop launches the sampler after each step's
 * bias, and a plain launch waited for the whole grid before it. */
static int smp_pdl = 1;
int flint_cuda_sampler_set_pdl(int on) {
    const int old = smp_pdl;
    if (on >= 0) smp_pdl = on != 0;
    return old;
}
static __device__ __forceinline__ void smp_pdl_start(void) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
/* attrs[0..): the PDL attribute when on; returns how many were set */
static int smp_pdl_attr(cudaLaunchAttribute *at) {
    if (!smp_pdl) return 0;
    memset(at, 0, sizeof *at);
    at->id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at->val.programmaticStreamSerializationAllowed = 1;
    return 1;
}
/* a plain (non-cluster) kernel of this file, with the PDL attribute when on */
#define SMP_LAUNCH(kernel, grid, block, st_, ...)                                                          \
    do {                                                                                                      \
        cudaLaunchAttribute at_[1];                                                                           \
        cudaLaunchConfig_t cfg_;                                                                              \
        memset(&cfg_, 0, sizeof cfg_);                                                                        \
        cfg_.gridDim = dim3(grid);                                                                            \
        cfg_.blockDim = dim3(block);                                                                          \
        cfg_.stream = (st_);                                                                               \
        cfg_.attrs = at_;                                                                                     \
        cfg_.numAttrs = (unsigned)smp_pdl_attr(at_);                                                          \
        SMP_CHECK(cudaLaunchKernelEx(&cfg_, kernel, __VA_ARGS__));                                            \
    } while (0)

static __global__ void __launch_bounds__(SMP_T, 2) sampler_kernel(smp_args a) {
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ smp_shared sh;
    float *sp = (float *)smem;
    unsigned *hc = (unsigned *)(smem + (size_t)a.L * 4);
    u64 *hm = (u64 *)(smem + (size_t)a.L * 4 + 2 * SMP_BINS * 4);
    const int C = a.C, E = a.E, L = a.L, V = a.V, t = threadIdx.x;
    const int rank = (int)__clusterRelativeBlockRank(), cid = blockIdx.x / C;
    smp_pdl_start();
    smp_row w;
    if (!smp_row_setup(&a, cid, &w)) return; /* the whole cluster leaves, before any barrier */
    if (a.cand && w.greedy) { /* the argmax of the row's candidates (the same rule, a shorter read) */
        if (rank == 0) {
            const int32_t *cr = a.cand + 2 * (size_t)cid * a.n_cand;
            float bv = -INFINITY;
            int bi = INT_MAX;
            for (int j = t; j < a.n_cand; j += SMP_T) {
                const float v = __int_as_float(cr[2 * j]);
                const int i = cr[2 * j + 1];
                if (smp_better(v, i, bv, bi)) bv = v, bi = i;
            }
            block_argmax(&bv, &bi, &sh);
            if (t == 0) *w.tok = bi == INT_MAX ? 0 : bi;
        }
        return; /* the whole cluster, before any barrier */
    }
    const int base = rank * L, nreal = V - base;

    /* load: x and the max, one read of the logits (16 bytes at a time when aligned) */
    const float inv_t = w.greedy ? 1.0f : __fdiv_rn(1.0f, w.temperature);
    const float *src = w.logits + base;
    float bv = -INFINITY;
    int bi = INT_MAX;
    if (((uintptr_t)src & 15) == 0) {
        const int n4 = L / 4;
        for (int q0 = 0; q0 < n4; q0 += 4 * SMP_T) {
            float4 v[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int q = q0 + u * SMP_T + t, j = 4 * q;
                if (q < n4 && j + 3 < nreal) {
                    v[u] = __ldg((const float4 *)src + q);
                } else if (q >= n4) {
                    v[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                } else {
                    v[u].x = j < nreal ? __ldg(src + j) : 0.0f;
                    v[u].y = j + 1 < nreal ? __ldg(src + j + 1) : 0.0f;
                    v[u].z = j + 2 < nreal ? __ldg(src + j + 2) : 0.0f;
                    v[u].w = j + 3 < nreal ? __ldg(src + j + 3) : 0.0f;
                }
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int q = q0 + u * SMP_T + t, j = 4 * q;
                if (q >= n4) continue;
                smp_take(v[u].x, j, base, nreal, w.greedy, inv_t, sp, &bv, &bi);
                smp_take(v[u].y, j + 1, base, nreal, w.greedy, inv_t, sp, &bv, &bi);
                smp_take(v[u].z, j + 2, base, nreal, w.greedy, inv_t, sp, &bv, &bi);
                smp_take(v[u].w, j + 3, base, nreal, w.greedy, inv_t, sp, &bv, &bi);
            }
        }
    } else {
        for (int j0 = 0; j0 < L; j0 += 8 * SMP_T) {
            float v[8];
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const int j = j0 + u * SMP_T + t;
                v[u] = j < L && j < nreal ? __ldg(src + j) : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const int j = j0 + u * SMP_T + t;
                if (j < L) smp_take(v[u], j, base, nreal, w.greedy, inv_t, sp, &bv, &bi);
            }
        }
    }
    block_argmax(&bv, &bi, &sh);
    if (t == 0) sh.x_max = bv, sh.x_arg = bi;
    cluster_sync_all();
    for (int r = 0; r < C; r++) {
        const smp_shared *ps = peer_sh(&sh, r);
        const float pv = ps->x_max;
        const int pi = ps->x_arg;
        if (smp_better(pv, pi, bv, bi)) bv = pv, bi = pi;
    }

    if (w.greedy) { /* flint_argmax: lowest index of the largest value, 0 when all are NaN */
        const int tok = bi == INT_MAX ? 0 : bi;
        if (rank == 0 && t == 0) {
            *w.tok = tok;
            if (w.acc) *w.acc = w.check && w.x == tok;
        }
        if (w.pout)
            for (int j = t; j < L && j < nreal; j += SMP_T) w.pout[base + j] = base + j == tok ? 1.0f : 0.0f;
        cluster_sync_all(); /* peers may still read sh */
        return;
    }

    /* softmax: e = exp(x - max) and S = sum e in double (stride order), p = e * (float)(1 / S) */
    const float mx = bv;
    double s = 0;
    for (int j = t; j < L; j += SMP_T) {
        const float e = j < nreal ? smp_exp(__fsub_rn(sp[j], mx), a.exact) : 0.0f;
        sp[j] = e;
        s += (double)e;
    }
    s = block_sum_d(s, &sh);
    if (t == 0) sh.x_sum = s;
    cluster_sync_all();
    double S = peer_sh(&sh, 0)->x_sum;
    for (int r = 1; r < C; r++) S += peer_sh(&sh, r)->x_sum;
    const float inv = __double2float_rn(__ddiv_rn(1.0, S));

    const int sel_k = w.top_k > 0 && w.top_k < V, sel_p = w.top_p < 1.0f, minp = w.min_p > 0.0f;
    const float thr_minp = __fmul_rn(w.min_p, inv); /* pmax = 1 * inv */
    double t2 = 0;
    for (int j = t; j < L; j += SMP_T) {
        float p = __fmul_rn(sp[j], inv);
        if (!sel_k && !sel_p) {
            if (minp && p < thr_minp) p = 0.0f;
            t2 += (double)p;
        }
        sp[j] = p;
    }
    int hround = 0;
    if (sel_k) {
        const smp_sel r = smp_select(0, (unsigned)w.top_k, 1.0f, sp, E, C, rank, hc, hm, &hround, &sh);
        smp_apply(r, sp, E, minp && !sel_p, thr_minp, &t2, &sh);
    }
    if (sel_p) {
        const smp_sel r = smp_select(1, 0u, w.top_p, sp, E, C, rank, hc, hm, &hround, &sh);
        smp_apply(r, sp, E, minp, thr_minp, &t2, &sh);
    }

    /* renormalisation: r = (float)(1 / sum p); the owner of the draft token publishes its p too */
    float scale = 1.0f;
    const int xok = w.x >= 0 && w.x < V, owner = xok ? w.x / L : -1;
    if (w.renorm) {
        t2 = block_sum_d(t2, &sh); /* its barriers also order the passes above before the read below */
        if (t == 0) {
            sh.x_tot = t2;
            if (w.check && owner == rank) sh.x_px = sp[w.x - base];
        }
        cluster_sync_all();
        double tot = peer_sh(&sh, 0)->x_tot;
        for (int r = 1; r < C; r++) tot += peer_sh(&sh, r)->x_tot;
        scale = __double2float_rn(__ddiv_rn(1.0, tot));
    } else {
        __syncthreads();
    }

    if (w.check) { /* acceptance: u * q(x) < p(x), keyed ACCEPT at this position */
        const float px = xok ? __fmul_rn(peer_sh(&sh, owner)->x_px, scale) : 0.0f;
        const float qx = w.qrow ? (xok ? __ldg(w.qrow + w.x) : 0.0f) : 1.0f;
        const double u = smp_uniform(w.seed, w.pos, FLINT_RNG_ACCEPT, 0);
        if (__dmul_rn(u, (double)qx) < (double)px) {
            if (rank == 0 && t == 0) *w.acc = 1, *w.tok = w.x;
            cluster_sync_all();
            return;
        }
        /* rejected: the residual max(0, p - q) (p with x removed for a greedy draft), plain p when
         * its mass is <= 1e-8 */
        double mass;
        if (w.qrow) {
            double ms = 0;
            for (int j = t; j < L; j += SMP_T) {
                const float p = __fmul_rn(sp[j], scale);
                sp[j] = p;
                if (j < nreal) {
                    const float d = __fsub_rn(p, __ldg(w.qrow + base + j));
                    ms += d > 0.0f ? (double)d : 0.0;
                }
            }
            ms = block_sum_d(ms, &sh);
            if (t == 0) sh.x_rmass = ms;
            cluster_sync_all();
            mass = peer_sh(&sh, 0)->x_rmass;
            for (int r = 1; r < C; r++) mass += peer_sh(&sh, r)->x_rmass;
            if (mass > 1e-8)
                for (int j = t; j < L && j < nreal; j += SMP_T) {
                    const float d = __fsub_rn(sp[j], __ldg(w.qrow + base + j));
                    sp[j] = d > 0.0f ? d : 0.0f;
                }
        } else {
            for (int j = t; j < L; j += SMP_T) sp[j] = __fmul_rn(sp[j], scale);
            __syncthreads();
            mass = 1.0 - (double)px;
            if (mass > 1e-8 && owner == rank && t == 0) sp[w.x - base] = 0.0f;
        }
        __syncthreads();
        scale = 1.0f;
    }

    const double u = smp_uniform(w.seed, w.pos, w.purpose, 0);
    const int tok = smp_walk(sp, base, E, C, rank, scale, u, &sh);
    if (tok >= 0) *w.tok = tok;
    if (w.acc && rank == 0 && t == 0) *w.acc = 0;
    if (w.pout) /* the walk's barriers ordered its writes to sp before these reads */
        for (int j = t; j < L && j < nreal; j += SMP_T) w.pout[base + j] = sp[j];
    cluster_sync_all(); /* peers may still read sh */
}

/* flint_accept_draft's left-to-right rule over the rows' results: the accepted prefix, then the
 * first rejected row's residual token, or the bonus token after k accepted drafts. */
static __global__ void accept_finish_kernel(int32_t *out, int32_t *n_acc, const int32_t *draft, int ld_draft,
                                            const int32_t *k, int n_req, const int32_t *res_acc,
                                            const int32_t *res_tok) {
    smp_pdl_start();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_req) return;
    const int kk = min(max(k[i], 0), ld_draft), slot = i * (ld_draft + 1);
    int32_t *o = out + (size_t)i * (ld_draft + 1);
    for (int j = 0; j < kk; j++) {
        if (!res_acc[slot + j]) {
            o[j] = res_tok[slot + j];
            n_acc[i] = j;
            return;
        }
        o[j] = draft[(size_t)i * ld_draft + j];
    }
    o[kk] = res_tok[slot + kk];
    n_acc[i] = kk;
}

static __global__ void philox_test_kernel(uint32_t *out4, double *u, const uint64_t *key, const uint32_t *ctr, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const uint32_t c[4] = {ctr[4 * i], ctr[4 * i + 1], ctr[4 * i + 2], ctr[4 * i + 3]};
    uint32_t o[4];
    smp_philox(key[i], c, o);
    for (int e = 0; e < 4; e++) out4[4 * i + e] = o[e];
    u[i] = smp_uniform(key[i], (int64_t)(((uint64_t)c[1] << 32) | c[0]), (int)c[2], c[3]);
}

static __global__ void exp_test_kernel(float *out, const float *in, int n, int exact) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = smp_exp(in[i], exact);
}

/* ==== Launchers ==== */

static int smp_exact = 1;

int flint_cuda_sampler_set_exact_exp(int exact) {
    const int old = smp_exact;
    smp_exact = exact != 0;
    return old;
}

/* Cluster size and slice from the vocabulary alone (batch invariance). */
static void smp_geom(smp_args *a, int V) {
    FLINT_ASSERT(V >= 1 && V <= FLINT_CUDA_SAMPLER_MAX_VOCAB);
    int C = (V + SMP_SLICE - 1) / SMP_SLICE;
    if (C > SMP_MAX_C) C = SMP_MAX_C;
    int E = (V + C * SMP_T - 1) / (C * SMP_T);
    E |= 1; /* odd: thread t's chunk t E.. hits 32 distinct banks across a warp */
    FLINT_ASSERT(E <= SMP_MAX_E);
    a->V = V;
    a->C = C;
    a->E = E;
    a->L = SMP_T * E;
    a->exact = smp_exact;
}

static pthread_once_t smp_once = PTHREAD_ONCE_INIT;
static void smp_init(void) { /* once: the largest slice's shared memory, whatever the launch */
    SMP_CHECK(cudaFuncSetAttribute((const void *)sampler_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   SMP_T * SMP_MAX_E * 4 + SMP_HIST_BYTES));
}

static void smp_launch(smp_args *a, int n_clusters, cudaStream_t s) {
    pthread_once(&smp_once, smp_init);
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute at[2];
    memset(&cfg, 0, sizeof cfg);
    memset(at, 0, sizeof at);
    cfg.gridDim = dim3((unsigned)(a->C * n_clusters), 1, 1);
    cfg.blockDim = dim3(SMP_T, 1, 1);
    cfg.dynamicSmemBytes = (size_t)a->L * 4 + SMP_HIST_BYTES;
    cfg.stream = s;
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = (unsigned)a->C;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1 + (unsigned)smp_pdl_attr(&at[1]);
    void *args[1] = {a};
    SMP_CHECK(cudaLaunchKernelExC(&cfg, (const void *)sampler_kernel, args));
}

static __global__ void draft_rows_kernel(int32_t *row_tok, const int32_t *src, int n_rows, int32_t *drafts, int L,
                                         int n_d, int n_steps, const int32_t *toks, int stride) {
    smp_pdl_start();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_rows) {
        const int32_t v = src[i];
        row_tok[i] = v < 0 ? -1 - v : toks[(size_t)(v % L) * stride + v / L];
    }
    if (i < n_d * L) {
        const int d = i / L, j = i - d * L;
        if (j < n_steps) drafts[i] = toks[(size_t)j * stride + d];
    }
}

void flint_cuda_draft_rows(int32_t *row_tok, const int32_t *src, int n_rows, int32_t *drafts, int L, int n_d,
                           int n_steps, const int32_t *toks, int stride, flint_cuda_stream_s s) {
    FLINT_ASSERT(n_rows >= 0 && n_d >= 0 && L > 0 && n_steps >= 0 && n_steps <= L && stride >= n_d);
    const int n = n_rows > n_d * L ? n_rows : n_d * L;
    if (n == 0) return;
    SMP_LAUNCH(draft_rows_kernel, (n + 255) / 256, 256, (cudaStream_t)s, row_tok, src, n_rows, drafts, L, n_d, n_steps,
               toks, stride);
    SMP_CHECK(cudaGetLastError());
}

size_t flint_cuda_sampler_scratch_bytes(int n_rows, int n_vocab) {
    (void)n_vocab;
    return 256 + 2 * sizeof(int32_t) * (size_t)(n_rows > 0 ? n_rows : 0);
}

void flint_cuda_sample(int32_t *tokens, float *probs_out, int ld_probs, const float *logits, int ld, int n_rows,
                       int n_vocab, const flint_cuda_sampling *params, const int32_t *row_param, const int64_t *pos,
                       int purpose, void *scratch, flint_cuda_stream_s s) {
    (void)scratch;
    if (n_rows <= 0) return;
    smp_args a;
    memset(&a, 0, sizeof a);
    smp_geom(&a, n_vocab);
    a.mode = SMP_SAMPLE;
    a.logits = logits;
    a.ld = (size_t)ld;
    a.tokens = tokens;
    a.pout = probs_out;
    a.ld_out = (size_t)ld_probs;
    a.params = params;
    a.row_param = row_param;
    a.pos = pos;
    a.purpose = purpose;
    smp_launch(&a, n_rows, (cudaStream_t)s);
}

void flint_cuda_draft_sample(int32_t *tokens, float *q_out, int ld_q, const float *logits, int ld, int n_rows,
                             int n_vocab, const float *temperature, const int32_t *greedy, const uint64_t *seed,
                             const int64_t *pos, void *scratch, flint_cuda_stream_s s) {
    flint_cuda_draft_sample_cand(tokens, q_out, ld_q, logits, ld, n_rows, n_vocab, temperature, greedy, seed, pos, NULL,
                                 0, scratch, s);
}

void flint_cuda_draft_sample_cand(int32_t *tokens, float *q_out, int ld_q, const float *logits, int ld, int n_rows,
                                  int n_vocab, const float *temperature, const int32_t *greedy, const uint64_t *seed,
                                  const int64_t *pos, const int32_t *cand, int n_cand, void *scratch,
                                  flint_cuda_stream_s s) {
    (void)scratch;
    FLINT_ASSERT(!cand || n_cand == (n_vocab + 31) / 32);
    if (n_rows <= 0) return;
    smp_args a;
    memset(&a, 0, sizeof a);
    smp_geom(&a, n_vocab);
    a.mode = SMP_DRAFT;
    a.logits = logits;
    a.ld = (size_t)ld;
    a.tokens = tokens;
    a.pout = q_out;
    a.ld_out = (size_t)ld_q;
    a.temperature = temperature;
    a.greedy = greedy;
    a.seed = seed;
    a.pos = pos;
    a.cand = cand;
    a.n_cand = n_cand;
    smp_launch(&a, n_rows, (cudaStream_t)s);
}

void flint_cuda_accept(int32_t *out, int32_t *n_acc, const int32_t *draft, int ld_draft, const int32_t *k,
                       const float *q, size_t ld_q_req, int ld_q, const float *logits, int ld_logits,
                       const int32_t *row0, const int64_t *pos0, const flint_cuda_sampling *params, int n_req,
                       int n_vocab, void *scratch, flint_cuda_stream_s s) {
    if (n_req <= 0) return;
    FLINT_ASSERT(ld_draft >= 0 && scratch);
    const int slots = n_req * (ld_draft + 1);
    smp_args a;
    memset(&a, 0, sizeof a);
    smp_geom(&a, n_vocab);
    a.mode = SMP_ACCEPT;
    a.logits = logits;
    a.ld = (size_t)ld_logits;
    a.params = params;
    a.draft = draft;
    a.ld_draft = ld_draft;
    a.k = k;
    a.q = q;
    a.ld_q_req = ld_q_req;
    a.ld_q = (size_t)ld_q;
    a.row0 = row0;
    a.pos0 = pos0;
    a.res_acc = (int32_t *)scratch;
    a.res_tok = (int32_t *)scratch + slots;
    smp_launch(&a, slots, (cudaStream_t)s);
    SMP_LAUNCH(accept_finish_kernel, (n_req + 127) / 128, 128, (cudaStream_t)s, out, n_acc, draft, ld_draft, k, n_req,
               (const int32_t *)a.res_acc, (const int32_t *)a.res_tok);
    SMP_CHECK(cudaGetLastError());
}

void flint_cuda_philox_test(uint32_t *out4, double *u, const uint64_t *key, const uint32_t *ctr, int n,
                            flint_cuda_stream_s s) {
    if (n <= 0) return;
    philox_test_kernel<<<(n + 255) / 256, 256, 0, (cudaStream_t)s>>>(out4, u, key, ctr, n);
    SMP_CHECK(cudaGetLastError());
}

void flint_cuda_sampler_exp_test(float *out, const float *in, int n, flint_cuda_stream_s s) {
    if (n <= 0) return;
    exp_test_kernel<<<(n + 255) / 256, 256, 0, (cudaStream_t)s>>>(out, in, n, smp_exact);
    SMP_CHECK(cudaGetLastError());
}
