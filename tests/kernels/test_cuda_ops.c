/* The CUDA kernel lab (target/ops_cuda.h): every kernel against its C reference on random inputs
 * drawn fresh each run, then timings. Labelled cuda: it needs a GPU and runs on the GPU machine
 * (tools/device/cuda_tests.sh), never in CPU CI.
 *
 * Every check prints one table row: op, case, max |err|, err/limit (the worst ratio of an
 * element's error to its limit; <= 1 passes), non-finite outputs, guards, PASS/FAIL.
 * - References: flint_ops_* of target/ops_cpu.h (rmsnorm, rope, swiglu, matmul) fed the same
 *   bf16 values as fp32; small references here for the rest (embedding, KV store, attention,
 *   mirroring target/forward_cpu.c and drafter/forward_cpu.c).
 * - Limits per op: exact (bits) for embedding, KV store and add; bf16 outputs (rmsnorm, swiglu,
 *   attention) one bf16 ulp, 2^-7 |ref|, + a small absolute term (rounding alone costs up to
 *   2^-8 |ref|, and the fp32 values of the two sides, a few fp32 ulps apart, may round to
 *   neighbouring bf16 values); fp32 q/k norm + RoPE 1e-5 (1 + |ref|); GEMM the fp32 summation
 *   bound (K/8 + K/32 + 16) 2^-24 sum|x w| + 2^-23 |ref| (the CPU's and the GPU's orders each
 *   chain at most that many roundings); the tensor-core GEMM (gemm-tc) a looser one for its
 *   truncating MMAs (test_gemm_k says how), and "ints" cases with small-integer inputs whose sums
 *   are exact on both sides, so any index slip fails at limit 0.
 * - Guards: every device buffer has 256 bytes of 0xFF before and after it, and strided outputs
 *   have gap columns; all must still be 0xFF afterwards. 0xFF.. is NaN as fp32 and as bf16, so
 *   an output element a kernel forgot to write shows up as non-finite.
 * - Batch invariance: GEMM rows of M = 64, 9, 8, 5, 3, 2 launches bit-equal M = 1 launches (each
 *   tile height of the kernel), at small and qwen3-8b shapes; the same for the tensor-core GEMM
 *   with M = 130, 64, 33, 17, 9, 8, 5, 3, 2 (each of its launch shapes); attention rows (causal)
 *   bit-equal the same rows shuffled (other groups, other neighbours), each row alone and each run
 *   (verify block, prefill run) alone, with smaller grids; drafter blocks bit-equal each block alone.
 * Usage: test_cuda_ops [--seed N] [--no-lab] [--quick]; FLINT_SEED=N also fixes the seed. --quick
 * leaves out the large shapes and the guard bytes, for runs under compute-sanitizer: every buffer
 * is then exactly its size, so memcheck sees any access past it. --lab-small: the small-M GEMM lab
 * alone; --lab-glu: the gate-up GEMM with and without its fused SwiGLU; --lab-attn: the attention
 * lab alone; --lab-large: the warpgroup GEMM tilings and the dispatch at 96..512 rows; --lab-gemm V
 * M N K: one GEMM tiling (variant V) timed at one shape (for a profiler). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "target/ops_cpu.h"  /* the C references */
#include "target/ops_cuda.h" /* the kernels under test, bf16 helpers */
#include "cuda_check.h"
#include "test.h"            /* CHECKF, test_report */
#include "kernels/lab_cuda_ops.h" /* the labs (lab_cuda_ops.c) */
#include "kernels/cuda_test_util.h" /* random inputs, guarded device buffers */


static int n_cpu = 1;

/* ==== Comparison and the table ==== */

typedef struct {
    double max_abs, worst;
    size_t bad, nonfinite, n;
} cmp;

static void cmp_add(cmp *c, double got, double ref, double limit) {
    c->n++;
    if (!isfinite(got)) {
        c->nonfinite++;
        return;
    }
    double d = fabs(got - ref);
    if (d > c->max_abs) c->max_abs = d;
    double ratio = limit > 0 ? d / limit : (d > 0 ? INFINITY : 0.0);
    if (ratio > c->worst) c->worst = ratio;
    if (ratio > 1.0) c->bad++;
}

static void table_header(void) {
    printf("%-12s %-46s %10s %9s %9s %-6s %s\n", "op", "case", "max|err|", "err/lim", "nonfinite", "guards",
           "result");
}

static void row(const char *op, const char *cas, const cmp *c, int guards) {
    int ok = c->n > 0 && c->bad == 0 && c->nonfinite == 0 && guards;
    printf("%-12s %-46s %10.3g %9.3f %9zu %-6s %s\n", op, cas, c->max_abs, c->worst, c->nonfinite,
           guards ? "ok" : "BROKEN", ok ? "PASS" : "FAIL");
    fflush(stdout);
    CHECKF(ok, "%s %s: %zu of %zu over the limit, %zu non-finite, guards %s", op, cas, c->bad, c->n, c->nonfinite,
           guards ? "ok" : "broken");
}

/* A bit-exact check: mismatches out of n. */
static void bits_row(const char *op, const char *cas, size_t mismatches, size_t n, size_t nonfinite, int guards) {
    int ok = n > 0 && mismatches == 0 && nonfinite == 0 && guards;
    printf("%-12s %-46s %10s %9s %9zu %-6s %s\n", op, cas, mismatches ? "differ" : "bits eq",
           mismatches ? "-" : "0", nonfinite, guards ? "ok" : "BROKEN", ok ? "PASS" : "FAIL");
    fflush(stdout);
    CHECKF(ok, "%s %s: %zu of %zu differ, %zu non-finite", op, cas, mismatches, n, nonfinite);
}

/* ==== Embedding ==== */

static void test_embed(int V, int H, int R) {
    uint16_t *e = xmalloc(sizeof(uint16_t) * V * H);
    int32_t *tok = xmalloc(sizeof(int32_t) * R);
    float *got = xmalloc(sizeof(float) * R * H);
    rand_bf16(e, NULL, (size_t)V * H, -1, 1);
    for (int r = 0; r < R; r++) tok[r] = r == 1 ? tok[0] : (r == 2 ? V - 1 : irand(V));
    dbuf de0 = dnew_up(e, sizeof(uint16_t) * V * H), dt = dnew_up(tok, sizeof(int32_t) * R);
    dbuf de = dpack(&de0, V, H); /* the embedding is stored packed, as a GEMM weight */
    dbuf dout = dnew(sizeof(float) * R * H);
    flint_cuda_embed(dout.p, de.p, dt.p, R, H, NULL);
    down(got, &dout);
    size_t bad = 0, nf = 0;
    for (int r = 0; r < R; r++)
        for (int h = 0; h < H; h++) {
            float ref = flint_bf16_to_f32(e[(size_t)tok[r] * H + h]), g = got[(size_t)r * H + h];
            if (!isfinite(g)) nf++;
            if (memcmp(&ref, &g, sizeof g)) bad++;
        }
    char cas[96];
    snprintf(cas, sizeof cas, "V=%d H=%d rows=%d", V, H, R);
    bits_row("embed", cas, bad, (size_t)R * H, nf, guards_ok(&dout) && guards_ok(&de));
    dfree(&de0), dfree(&de), dfree(&dt), dfree(&dout);
    free(e), free(tok), free(got);
}

/* ==== RMSNorm (row) ==== */

static void test_rmsnorm(int R, int n, int ldx, int ldo, int gather) {
    int X = gather ? R + 3 : R; /* rows of x; with gather, out row i = norm(x[rows[i]]) */
    float *x = xmalloc(sizeof(float) * X * ldx), *wf = xmalloc(sizeof(float) * n), *ref = xmalloc(sizeof(float) * n);
    uint16_t *w = xmalloc(sizeof(uint16_t) * n), *got = xmalloc(sizeof(uint16_t) * R * ldo);
    int32_t *rows = xmalloc(sizeof(int32_t) * R);
    rand_f32(x, (size_t)X * ldx, -2, 2);
    rand_bf16(w, wf, n, 0.5f, 1.5f);
    for (int i = 0; i < R; i++) rows[i] = gather ? irand(X) : i;
    const float eps = 1e-6f;
    dbuf dx = dnew_up(x, sizeof(float) * X * ldx), dw = dnew_up(w, sizeof(uint16_t) * n);
    dbuf dr = dnew_up(rows, sizeof(int32_t) * R), dout = dnew(sizeof(uint16_t) * R * ldo);
    /* ungathered cases also copy the rows they read (flint_cuda_rmsnorm_copy: the target's taps),
     * at a row pitch that keeps the 16-byte path where the norm has it */
    const int copy = !gather, ldc = n % 4 == 0 ? n + 4 : n;
    dbuf dc = dnew(copy ? sizeof(float) * R * ldc : 4);
    if (copy)
        flint_cuda_rmsnorm_copy(dout.p, ldo, dx.p, ldx, NULL, dw.p, R, n, eps, dc.p, ldc, NULL);
    else
        flint_cuda_rmsnorm(dout.p, ldo, dx.p, ldx, gather ? dr.p : NULL, dw.p, R, n, eps, NULL);
    down(got, &dout);
    if (copy) {
        float *cp = xmalloc(sizeof(float) * R * ldc);
        down(cp, &dc);
        size_t bad = 0, nf = 0;
        for (int i = 0; i < R; i++)
            for (int k = 0; k < n; k++) {
                const float g = cp[(size_t)i * ldc + k];
                if (!isfinite(g)) nf++;
                if (memcmp(&g, &x[(size_t)i * ldx + k], sizeof g)) bad++;
            }
        char cc[96];
        snprintf(cc, sizeof cc, "rows=%d n=%d ldx=%d ldc=%d", R, n, ldx, ldc);
        bits_row("rmsnorm copy", cc, bad, (size_t)R * n, nf, guards_ok(&dc) && gaps_ok(cp, R, n, ldc, 4));
        free(cp);
    }
    dfree(&dc);
    cmp c = {0};
    for (int i = 0; i < R; i++) {
        flint_ops_rmsnorm(ref, x + (size_t)rows[i] * ldx, wf, n, eps);
        for (int k = 0; k < n; k++)
            cmp_add(&c, flint_bf16_to_f32(got[(size_t)i * ldo + k]), ref[k], 1e-6 + ldexp(fabs(ref[k]), -7));
    }
    char cas[96];
    snprintf(cas, sizeof cas, "rows=%d n=%d ldx=%d ldo=%d%s", R, n, ldx, ldo, gather ? " gathered" : "");
    row("rmsnorm", cas, &c, guards_ok(&dout) && gaps_ok(got, R, n, ldo, 2));
    dfree(&dx), dfree(&dw), dfree(&dr), dfree(&dout);
    free(x), free(wf), free(ref), free(w), free(got), free(rows);
}

/* The norm written straight into the GEMM's scratch (flint_cuda_rmsnorm_xp, then the GEMM with x =
 * NULL: the forward's norms before a warpgroup GEMM) against the norm into a row buffer and the
 * GEMM permuting it: the GEMM's outputs (and the tap copy) bit-equal. The scratch is filled with
 * NaN bytes first, so that a value the norm failed to write (or a pad row read as data) shows. */
static void test_rmsnorm_xp(int R, int n, int N, int gather, int accumulate) {
    const int X = gather ? R + 3 : R, ldc = n + 4;
    float *x = xmalloc(sizeof(float) * X * n), *y0 = xmalloc(sizeof(float) * R * N);
    float *want = xmalloc(sizeof(float) * R * N), *got = xmalloc(sizeof(float) * R * N);
    float *c1 = xmalloc(sizeof(float) * R * ldc), *c2 = xmalloc(sizeof(float) * R * ldc);
    uint16_t *w = xmalloc(sizeof(uint16_t) * n), *wh = xmalloc(sizeof(uint16_t) * N * n);
    int32_t *rows = xmalloc(sizeof(int32_t) * R);
    rand_f32(x, (size_t)X * n, -2, 2);
    rand_bf16(w, NULL, n, 0.5f, 1.5f);
    rand_bf16(wh, NULL, (size_t)N * n, -1, 1);
    rand_f32(y0, (size_t)R * N, -4, 4);
    for (int i = 0; i < R; i++) rows[i] = gather ? irand(X) : i;
    const float eps = 1e-6f;
    flint_cuda_gemm_configure(1, 1, -1); /* the warpgroup paths on (the only ones that read the scratch) */
    dbuf dx = dnew_up(x, sizeof(float) * X * n), dw = dnew_up(w, sizeof(uint16_t) * n);
    dbuf dr = dnew_up(rows, sizeof(int32_t) * R), dxn = dnew(sizeof(uint16_t) * R * n);
    dbuf dw0 = dnew_up(wh, sizeof(uint16_t) * N * n), dwp = dpack(&dw0, N, n);
    dbuf dy = dnew_up(y0, sizeof(float) * R * N), dc = dnew(sizeof(float) * R * ldc);
    const int32_t *rp = gather ? dr.p : NULL;
    float *cp = gather ? NULL : dc.p;
    flint_cuda_rmsnorm_copy(dxn.p, n, dx.p, n, rp, dw.p, R, n, eps, cp, ldc, NULL);
    flint_cuda_gemm_tc(dy.p, N, dxn.p, n, dwp.p, R, N, n, accumulate, NULL);
    down(want, &dy);
    if (cp) down(c1, &dc);
    int Mp = 0;
    unsigned char *xp = flint_cuda_gemm_xp(R, N, n, NULL, &Mp);
    size_t bad = 0, nf = 0, total = (size_t)R * N;
    if (xp) {
        CK(cudaMemset(xp, 0xFF, flint_cuda_gemm_scratch_bytes(R, n)));
        CK(cudaMemcpy(dy.p, y0, sizeof(float) * R * N, cudaMemcpyHostToDevice));
        CK(cudaMemset(dc.p, 0xFF, sizeof(float) * R * ldc));
        flint_cuda_rmsnorm_xp(xp, Mp, dx.p, n, rp, dw.p, R, n, eps, cp, ldc, NULL);
        flint_cuda_gemm_tc(dy.p, N, NULL, n, dwp.p, R, N, n, accumulate, NULL);
        down(got, &dy);
        for (size_t i = 0; i < total; i++) {
            nf += !isfinite(got[i]);
            bad += memcmp(&got[i], &want[i], sizeof(float)) != 0;
        }
        if (cp) {
            down(c2, &dc);
            for (int i = 0; i < R; i++) bad += memcmp(c1 + (size_t)i * ldc, c2 + (size_t)i * ldc, sizeof(float) * n) != 0;
        }
    }
    char cas[96];
    snprintf(cas, sizeof cas, "rows=%d n=%d N=%d%s%s%s", R, n, N, gather ? " gathered" : " copy", accumulate ? " acc" : "",
             xp ? "" : " (no scratch path!)");
    bits_row("rmsnorm-xp", cas, bad, total, nf, xp != NULL && guards_ok(&dy) && guards_ok(&dc));
    dfree(&dx), dfree(&dw), dfree(&dr), dfree(&dxn), dfree(&dw0), dfree(&dwp), dfree(&dy), dfree(&dc);
    free(x), free(y0), free(want), free(got), free(c1), free(c2), free(w), free(wh), free(rows);
}

/* ==== Per-head q/k RMSNorm + NeoX RoPE ==== */

static void test_qk_norm_rope(const char *name, int R, int n_a, int n_b, int hd, int with_norm, int tail) {
    const int max_pos = 4096, half = hd / 2, ld = (n_a + n_b) * hd + tail; /* tail: the v part, untouched */
    const float eps = 1e-6f;
    float *x = xmalloc(sizeof(float) * R * ld), *ref = xmalloc(sizeof(float) * R * ld);
    float *got = xmalloc(sizeof(float) * R * ld);
    float *cs = xmalloc(sizeof(float) * max_pos * half), *sn = xmalloc(sizeof(float) * max_pos * half);
    uint16_t *wa = xmalloc(sizeof(uint16_t) * hd), *wb = xmalloc(sizeof(uint16_t) * hd);
    float *waf = xmalloc(sizeof(float) * hd), *wbf = xmalloc(sizeof(float) * hd);
    int32_t *pos = xmalloc(sizeof(int32_t) * R);
    rand_f32(x, (size_t)R * ld, -2, 2);
    rand_bf16(wa, waf, hd, 0.5f, 1.5f);
    rand_bf16(wb, wbf, hd, 0.5f, 1.5f);
    for (int r = 0; r < R; r++) pos[r] = r == 0 ? 0 : (r == 1 ? max_pos - 1 : irand(max_pos));
    flint_ops_rope_table(cs, sn, max_pos, hd, 1000000.0f);
    memcpy(ref, x, sizeof(float) * R * ld);
    for (int r = 0; r < R; r++)
        for (int h = 0; h < n_a + n_b; h++) {
            float *xh = ref + (size_t)r * ld + (size_t)h * hd;
            if (with_norm) flint_ops_rmsnorm(xh, xh, h < n_a ? waf : wbf, hd, eps);
            flint_ops_rope(xh, hd, cs + (size_t)pos[r] * half, sn + (size_t)pos[r] * half);
        }
    dbuf dx = dnew_up(x, sizeof(float) * R * ld), dwa = dnew_up(wa, sizeof(uint16_t) * hd);
    dbuf dwb = dnew_up(wb, sizeof(uint16_t) * hd), dcs = dnew_up(cs, sizeof(float) * max_pos * half);
    dbuf dsn = dnew_up(sn, sizeof(float) * max_pos * half), dp = dnew_up(pos, sizeof(int32_t) * R);
    flint_cuda_qk_norm_rope(dx.p, ld, R, n_a, with_norm ? dwa.p : NULL, n_b, with_norm ? dwb.p : NULL, hd, eps, dcs.p,
                            dsn.p, dp.p, NULL);
    down(got, &dx);
    cmp c = {0};
    size_t tail_changed = 0;
    for (int r = 0; r < R; r++) {
        for (int i = 0; i < (n_a + n_b) * hd; i++) {
            double rf = ref[(size_t)r * ld + i];
            cmp_add(&c, got[(size_t)r * ld + i], rf, 1e-5 * (1.0 + fabs(rf)));
        }
        for (int i = (n_a + n_b) * hd; i < ld; i++)
            if (memcmp(&got[(size_t)r * ld + i], &x[(size_t)r * ld + i], sizeof(float))) tail_changed++;
    }
    char cas[96];
    snprintf(cas, sizeof cas, "%s rows=%d heads=%d+%d hd=%d%s", name, R, n_a, n_b, hd, with_norm ? "" : " no norm");
    row("qk_norm_rope", cas, &c, guards_ok(&dx) && tail_changed == 0);
    dfree(&dx), dfree(&dwa), dfree(&dwb), dfree(&dcs), dfree(&dsn), dfree(&dp);
    free(x), free(ref), free(got), free(cs), free(sn), free(wa), free(wb), free(waf), free(wbf), free(pos);
}

/* ==== Paged KV layout shared by the KV-store and attention tests ==== */

typedef struct {
    int n_seqs, bt_stride, n_blocks, bs, n_kv, hd;
    int32_t *bt; /* [n_seqs][bt_stride], distinct block ids */
} kv_layout;

static kv_layout kv_layout_make(int n_seqs, int max_pos, int bs, int n_kv, int hd) {
    kv_layout k;
    k.n_seqs = n_seqs;
    k.bs = bs;
    k.n_kv = n_kv;
    k.hd = hd;
    k.bt_stride = max_pos / bs + 1;
    k.n_blocks = n_seqs * k.bt_stride + 5; /* a few blocks nobody owns */
    int *ids = xmalloc(sizeof(int) * k.n_blocks);
    for (int i = 0; i < k.n_blocks; i++) ids[i] = i;
    shuffle(ids, k.n_blocks);
    k.bt = xmalloc(sizeof(int32_t) * n_seqs * k.bt_stride);
    for (int i = 0; i < n_seqs * k.bt_stride; i++) k.bt[i] = ids[i];
    free(ids);
    return k;
}
static size_t kv_slot(const kv_layout *k, int seq, int p, int kvh) {
    int32_t blk = k->bt[(size_t)seq * k->bt_stride + p / k->bs];
    return (((size_t)blk * k->bs + p % k->bs) * k->n_kv + kvh) * k->hd;
}
static size_t kv_elems(const kv_layout *k) { return (size_t)k->n_blocks * k->bs * k->n_kv * k->hd; }

/* (n_kv, hd) = (2, 64) takes the 16-byte path, (3, 6) the element-wise one (18 values a row) */
static void test_kv_store(int n_kv, int hd) {
    const int n_seqs = 3, max_pos = 200, bs = 16, kvd = n_kv * hd, q_dim = 4 * hd;
    const int ld = q_dim + 2 * kvd, R = 29; /* rows in the target's q|k|v layout */
    kv_layout L = kv_layout_make(n_seqs, max_pos, bs, n_kv, hd);
    int32_t *pos = xmalloc(sizeof(int32_t) * R), *seq = xmalloc(sizeof(int32_t) * R);
    int *cand = xmalloc(sizeof(int) * n_seqs * max_pos);
    for (int i = 0; i < n_seqs * max_pos; i++) cand[i] = i;
    shuffle(cand, n_seqs * max_pos); /* distinct (seq, pos) pairs */
    for (int r = 0; r < R; r++) {
        seq[r] = cand[r] / max_pos;
        pos[r] = cand[r] % max_pos;
    }
    float *qkv = xmalloc(sizeof(float) * R * ld);
    rand_f32(qkv, (size_t)R * ld, -3, 3);
    size_t n = kv_elems(&L);
    uint16_t *kexp = xmalloc(sizeof(uint16_t) * n), *vexp = xmalloc(sizeof(uint16_t) * n);
    uint16_t *kgot = xmalloc(sizeof(uint16_t) * n), *vgot = xmalloc(sizeof(uint16_t) * n);
    memset(kexp, 0xFF, sizeof(uint16_t) * n);
    memset(vexp, 0xFF, sizeof(uint16_t) * n);
    for (int r = 0; r < R; r++)
        for (int h = 0; h < n_kv; h++)
            for (int d = 0; d < hd; d++) {
                size_t s = kv_slot(&L, seq[r], pos[r], h) + d;
                kexp[s] = flint_bf16_from_f32(qkv[(size_t)r * ld + q_dim + h * hd + d]);
                vexp[s] = flint_bf16_from_f32(qkv[(size_t)r * ld + q_dim + kvd + h * hd + d]);
            }
    dbuf dq = dnew_up(qkv, sizeof(float) * R * ld), dp = dnew_up(pos, sizeof(int32_t) * R);
    dbuf ds = dnew_up(seq, sizeof(int32_t) * R), dbt = dnew_up(L.bt, sizeof(int32_t) * n_seqs * L.bt_stride);
    dbuf dk = dnew(sizeof(uint16_t) * n), dv = dnew(sizeof(uint16_t) * n);
    float *qd = dq.p;
    flint_cuda_kv_store(dk.p, dv.p, qd + q_dim, qd + q_dim + kvd, ld, dp.p, ds.p, dbt.p, L.bt_stride, R, n_kv, hd, bs,
                        NULL);
    down(kgot, &dk);
    down(vgot, &dv);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += (kgot[i] != kexp[i]) + (vgot[i] != vexp[i]);
    char cas[96];
    snprintf(cas, sizeof cas, "29 rows, 3 seqs, bs=16 kv=%d hd=%d (whole pool)", n_kv, hd);
    bits_row("kv_store", cas, bad, 2 * n, 0,
             guards_ok(&dk) && guards_ok(&dv));
    dfree(&dq), dfree(&dp), dfree(&ds), dfree(&dbt), dfree(&dk), dfree(&dv);
    free(L.bt), free(pos), free(seq), free(cand), free(qkv), free(kexp), free(vexp), free(kgot), free(vgot);
}

/* The fused q/k norm + RoPE + cache store against the two launches it replaces, bit for bit (x
 * and the whole pool): the target's q|k|v rows (K heads after n_q query heads) and the drafter
 * encode's k|v rows (no query heads). */
static void test_qk_rope_store(int n_q, int n_kv, int hd, int with_norm) {
    const int n_seqs = 3, max_pos = 300, bs = 16, R = 23, n_a = n_q ? n_q : n_kv, n_b = n_q ? n_kv : 0;
    const int ld = (n_a + n_b) * hd + n_kv * hd + (n_q ? 8 : 0), v_col = (n_a + n_b) * hd, half = hd / 2;
    kv_layout L = kv_layout_make(n_seqs, max_pos, bs, n_kv, hd);
    int32_t *pos = xmalloc(sizeof(int32_t) * R), *seq = xmalloc(sizeof(int32_t) * R);
    int *cand = xmalloc(sizeof(int) * n_seqs * max_pos);
    for (int i = 0; i < n_seqs * max_pos; i++) cand[i] = i;
    shuffle(cand, n_seqs * max_pos);
    for (int r = 0; r < R; r++) seq[r] = cand[r] / max_pos, pos[r] = cand[r] % max_pos;
    float *x = xmalloc(sizeof(float) * R * ld), *cs = xmalloc(sizeof(float) * max_pos * half);
    float *sn = xmalloc(sizeof(float) * max_pos * half), *xa = xmalloc(sizeof(float) * R * ld);
    float *xb = xmalloc(sizeof(float) * R * ld);
    uint16_t *wa = xmalloc(sizeof(uint16_t) * hd), *wb = xmalloc(sizeof(uint16_t) * hd);
    rand_f32(x, (size_t)R * ld, -2, 2);
    rand_bf16(wa, NULL, hd, 0.5f, 1.5f);
    rand_bf16(wb, NULL, hd, 0.5f, 1.5f);
    flint_ops_rope_table(cs, sn, max_pos, hd, 1000000.0f);
    size_t n = kv_elems(&L);
    uint16_t *ka = xmalloc(sizeof(uint16_t) * n), *va = xmalloc(sizeof(uint16_t) * n);
    uint16_t *kb = xmalloc(sizeof(uint16_t) * n), *vb = xmalloc(sizeof(uint16_t) * n);
    dbuf dxa = dnew_up(x, sizeof(float) * R * ld), dxb = dnew_up(x, sizeof(float) * R * ld);
    dbuf dwa = dnew_up(wa, sizeof(uint16_t) * hd), dwb = dnew_up(wb, sizeof(uint16_t) * hd);
    dbuf dcs = dnew_up(cs, sizeof(float) * max_pos * half), dsn = dnew_up(sn, sizeof(float) * max_pos * half);
    dbuf dp = dnew_up(pos, sizeof(int32_t) * R), ds = dnew_up(seq, sizeof(int32_t) * R);
    dbuf dbt = dnew_up(L.bt, sizeof(int32_t) * n_seqs * L.bt_stride);
    dbuf dka = dnew(sizeof(uint16_t) * n), dva = dnew(sizeof(uint16_t) * n);
    dbuf dkb = dnew(sizeof(uint16_t) * n), dvb = dnew(sizeof(uint16_t) * n);
    CK(cudaMemset(dka.p, 0xFF, dka.bytes));
    CK(cudaMemset(dva.p, 0xFF, dva.bytes));
    CK(cudaMemset(dkb.p, 0xFF, dkb.bytes));
    CK(cudaMemset(dvb.p, 0xFF, dvb.bytes));
    const uint16_t *wqa = with_norm ? dwa.p : NULL, *wqb = with_norm ? dwb.p : NULL;
    float *pa = dxa.p, *pb = dxb.p;
    flint_cuda_qk_norm_rope(pa, ld, R, n_a, wqa, n_b, wqb, hd, 1e-6f, dcs.p, dsn.p, dp.p, NULL);
    flint_cuda_kv_store(dka.p, dva.p, pa + (n_a + n_b - n_kv) * hd, pa + v_col, ld, dp.p, ds.p, dbt.p, L.bt_stride, R,
                        n_kv, hd, bs, NULL);
    flint_cuda_kv_dst kv = {dkb.p, dvb.p, n_a + n_b - n_kv, v_col, n_kv, ds.p, dbt.p, L.bt_stride, bs};
    flint_cuda_qk_norm_rope_store(pb, ld, R, n_a, wqa, n_b, wqb, hd, 1e-6f, dcs.p, dsn.p, dp.p, &kv, NULL);
    down(xa, &dxa), down(xb, &dxb), down(ka, &dka), down(va, &dva), down(kb, &dkb), down(vb, &dvb);
    size_t bad = 0;
    for (size_t i = 0; i < (size_t)R * ld; i++) bad += memcmp(&xa[i], &xb[i], sizeof(float)) != 0;
    for (size_t i = 0; i < n; i++) bad += (ka[i] != kb[i]) + (va[i] != vb[i]);
    char cas[96];
    snprintf(cas, sizeof cas, "%s rows=%d heads=%d+%d hd=%d%s == 2 launches", n_q ? "q|k|v" : "k|v", R, n_a, n_b, hd,
             with_norm ? "" : " no norm");
    bits_row("qk_rope_store", cas, bad, (size_t)R * ld + 2 * n, 0,
             guards_ok(&dxb) && guards_ok(&dkb) && guards_ok(&dvb));
    dfree(&dxa), dfree(&dxb), dfree(&dwa), dfree(&dwb), dfree(&dcs), dfree(&dsn), dfree(&dp), dfree(&ds), dfree(&dbt);
    dfree(&dka), dfree(&dva), dfree(&dkb), dfree(&dvb);
    free(L.bt), free(pos), free(seq), free(cand), free(x), free(cs), free(sn), free(xa), free(xb), free(wa), free(wb);
    free(ka), free(va), free(kb), free(vb);
}

/* ==== SwiGLU and residual add ==== */

static void test_swiglu(int R, int n) {
    const int ldg = 2 * n + 4, ldo = n + 3;
    float *gu = xmalloc(sizeof(float) * R * ldg), *ref = xmalloc(sizeof(float) * n);
    uint16_t *got = xmalloc(sizeof(uint16_t) * R * ldo);
    for (int r = 0; r < R; r++) {
        rand_f32(gu + (size_t)r * ldg, n, -8, 8);
        rand_f32(gu + (size_t)r * ldg + n, n + 4, -2, 2);
    }
    dbuf dg = dnew_up(gu, sizeof(float) * R * ldg), dout = dnew(sizeof(uint16_t) * R * ldo);
    flint_cuda_swiglu(dout.p, ldo, dg.p, ldg, R, n, NULL);
    down(got, &dout);
    cmp c = {0};
    for (int r = 0; r < R; r++) {
        flint_ops_swiglu(ref, gu + (size_t)r * ldg, gu + (size_t)r * ldg + n, n);
        for (int i = 0; i < n; i++)
            cmp_add(&c, flint_bf16_to_f32(got[(size_t)r * ldo + i]), ref[i], 1e-6 + ldexp(fabs(ref[i]), -7));
    }
    char cas[96];
    snprintf(cas, sizeof cas, "rows=%d n=%d ldg=%d ldo=%d", R, n, ldg, ldo);
    row("swiglu", cas, &c, guards_ok(&dout) && gaps_ok(got, R, n, ldo, 2));
    dfree(&dg), dfree(&dout);
    free(gu), free(ref), free(got);
}

static void test_add(size_t n) {
    float *y = xmalloc(sizeof(float) * n), *x = xmalloc(sizeof(float) * n), *got = xmalloc(sizeof(float) * n);
    rand_f32(y, n, -100, 100);
    rand_f32(x, n, -1, 1);
    dbuf dy = dnew_up(y, sizeof(float) * n), dx = dnew_up(x, sizeof(float) * n);
    flint_cuda_add(dy.p, dx.p, n, NULL);
    down(got, &dy);
    size_t bad = 0, nf = 0;
    for (size_t i = 0; i < n; i++) {
        volatile float r = y[i] + x[i];
        float rr = r;
        if (!isfinite(got[i])) nf++;
        if (memcmp(&rr, &got[i], sizeof rr)) bad++;
    }
    char cas[96];
    snprintf(cas, sizeof cas, "n=%zu", n);
    bits_row("add", cas, bad, n, nf, guards_ok(&dy));
    dfree(&dy), dfree(&dx);
    free(y), free(x), free(got);
}

/* rows of n floats from a [rows][lds] matrix into columns off.. of a [rows][ldd] one (the taps'
 * layout); the destination's other columns (NaN) must stay */
static void test_copy_rows(int rows, int n, int lds, int ldd, int off) {
    const size_t ns = (size_t)rows * lds, nd = (size_t)rows * ldd;
    float *src = xmalloc(sizeof(float) * ns), *dst = xmalloc(sizeof(float) * nd), *got = xmalloc(sizeof(float) * nd);
    rand_f32(src, ns, -10, 10);
    memset(dst, 0xFF, sizeof(float) * nd);
    dbuf ds = dnew_up(src, sizeof(float) * ns), dd = dnew_up(dst, sizeof(float) * nd);
    flint_cuda_copy_rows((float *)dd.p + off, ldd, ds.p, lds, rows, n, NULL);
    down(got, &dd);
    size_t bad = 0;
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < ldd; i++) {
            const float *want = i >= off && i < off + n ? &src[(size_t)r * lds + i - off] : &dst[(size_t)r * ldd + i];
            bad += memcmp(want, &got[(size_t)r * ldd + i], sizeof(float)) != 0;
        }
    char cas[96];
    snprintf(cas, sizeof cas, "%d rows of %d, lds %d, ldd %d, at %d", rows, n, lds, ldd, off);
    bits_row("copy-rows", cas, bad, nd, 0, guards_ok(&dd));
    dfree(&ds), dfree(&dd);
    free(src), free(dst), free(got);
}

/* ==== GEMM ==== */

/* The two GEMMs under test: flint_cuda_gemm (CUDA cores) and flint_cuda_gemm_tc (tensor cores). */
typedef void (*gemm_fn)(float *, int, const uint16_t *, int, const uint16_t *, int, int, int, int,
                        flint_cuda_stream);
static const gemm_fn gemm_fns[2] = {flint_cuda_gemm, flint_cuda_gemm_tc};
static const char *const gemm_names[2] = {"gemm", "gemm-tc"};

/* Small integers as bf16, fp32 copies in f: every product and partial sum is an integer below
 * 2^24, so both sides are exact whatever their order or rounding (limit 0: any index slip shows). */
static void rand_int_bf16(uint16_t *h, float *f, size_t n, int lim) {
    for (size_t i = 0; i < n; i++) {
        h[i] = flint_bf16_from_f32((float)(irand(2 * lim + 1) - lim));
        f[i] = flint_bf16_to_f32(h[i]);
    }
}

/* tc = 1: the tensor-core GEMM. Its limit adds to the CPU's chain (K/8 + 16 roundings) the
 * tensor cores': per output K/64 MMAs in a chain, each modelled as aligning its 16 exact
 * products and the accumulator to the largest with truncation and normalising with truncation
 * (at most 18 ulps of 2^-23 times the sum of magnitudes), + 3 adds: (K/8 + 16 + 9K/16 + 6) 2^-24
 * sum|x w|. exact = 1: integer inputs in [-4, 4], limit 0 (K <= 2^20 / 16 keeps sums exact). */
static void test_gemm_k(int tc, int exact, int M, int N, int K, int ldx, int ldy, int accumulate) {
    uint16_t *xh = xmalloc(sizeof(uint16_t) * M * ldx), *wh = xmalloc(sizeof(uint16_t) * N * K);
    float *xf = xmalloc(sizeof(float) * M * ldx), *wf = xmalloc(sizeof(float) * N * K);
    float *y0 = xmalloc(sizeof(float) * M * ldy), *ref = xmalloc(sizeof(float) * M * ldy);
    float *bound = xmalloc(sizeof(float) * M * N), *got = xmalloc(sizeof(float) * M * ldy);
    if (exact) {
        rand_int_bf16(xh, xf, (size_t)M * ldx, 4);
        rand_int_bf16(wh, wf, (size_t)N * K, 4);
    } else {
        rand_bf16(xh, xf, (size_t)M * ldx, -1, 1);
        rand_bf16(wh, wf, (size_t)N * K, -1, 1);
    }
    memset(y0, 0xFF, sizeof(float) * M * ldy); /* NaN: gaps, and the outputs when storing */
    if (accumulate)
        for (int m = 0; m < M; m++) rand_f32(y0 + (size_t)m * ldy, N, -4, 4);
    memcpy(ref, y0, sizeof(float) * M * ldy);
    flint_ops_matmul(ref, ldy, xf, ldx, wf, M, K, N, accumulate, n_cpu);
    for (size_t i = 0; i < (size_t)M * ldx; i++) xf[i] = fabsf(xf[i]);
    for (size_t i = 0; i < (size_t)N * K; i++) wf[i] = fabsf(wf[i]);
    flint_ops_matmul(bound, N, xf, ldx, wf, M, K, N, 0, n_cpu); /* sum |x w| per output */
    dbuf dx = dnew_up(xh, sizeof(uint16_t) * M * ldx), dw = dnew_up(wh, sizeof(uint16_t) * N * K);
    dbuf dy = dnew_up(y0, sizeof(float) * M * ldy), dwp = dpack(&dw, N, K);
    gemm_fns[tc](dy.p, ldy, dx.p, ldx, tc ? dwp.p : dw.p, M, N, K, accumulate, NULL); /* tc reads W packed */
    down(got, &dy);
    const double g = (tc ? K / 8.0 + 16.0 + 9.0 * K / 16.0 + 6.0 : K / 8.0 + K / 32.0 + 16.0) * ldexp(1.0, -24);
    cmp c = {0};
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double r = ref[(size_t)m * ldy + n];
            double lim = exact ? 0.0 : 1e-6 + g * bound[(size_t)m * N + n] + ldexp(fabs(r), -23);
            cmp_add(&c, got[(size_t)m * ldy + n], r, lim);
        }
    char cas[96];
    snprintf(cas, sizeof cas, "M=%d N=%d K=%d ldx=%d ldy=%d%s%s", M, N, K, ldx, ldy, accumulate ? " accumulate" : "",
             exact ? " ints" : "");
    row(gemm_names[tc], cas, &c, guards_ok(&dy) && gaps_ok(got, M, N, ldy, 4));
    dfree(&dx), dfree(&dw), dfree(&dy), dfree(&dwp);
    free(xh), free(wh), free(xf), free(wf), free(y0), free(ref), free(bound), free(got);
}

static void test_gemm(int M, int N, int K, int ldx, int ldy, int accumulate) {
    test_gemm_k(0, 0, M, N, K, ldx, ldy, accumulate);
}

/* Rows of launches of M = ms[0..n_ms) (the largest first) against the same rows launched alone
 * (M = 1). */
static void test_gemm_invariance_k(int tc, int N, int K, const int *ms, int n_ms) {
    const int MB = ms[0];
    uint16_t *xh = xmalloc(sizeof(uint16_t) * MB * K), *wh = xmalloc(sizeof(uint16_t) * N * K);
    float *one = xmalloc(sizeof(float) * MB * N), *many = xmalloc(sizeof(float) * MB * N);
    rand_bf16(xh, NULL, (size_t)MB * K, -1, 1);
    rand_bf16(wh, NULL, (size_t)N * K, -1, 1);
    dbuf dx = dnew_up(xh, sizeof(uint16_t) * MB * K), dw = dnew_up(wh, sizeof(uint16_t) * N * K);
    dbuf d1 = dnew(sizeof(float) * MB * N), dm = dnew(sizeof(float) * MB * N), dwp = dpack(&dw, N, K);
    const uint16_t *x = dx.p, *w = tc ? dwp.p : dw.p; /* tc reads W packed */
    float *y1 = d1.p;
    for (int r = 0; r < MB; r++) gemm_fns[tc](y1 + (size_t)r * N, N, x + (size_t)r * K, K, w, 1, N, K, 0, NULL);
    down(one, &d1);
    size_t bad = 0, nf = 0, total = 0;
    for (size_t i = 0; i < (size_t)MB * N; i++) nf += !isfinite(one[i]);
    for (int t = 0; t < n_ms; t++) {
        CK(cudaMemset(dm.p, 0xFF, sizeof(float) * MB * N)); /* no stale rows from the last launch */
        gemm_fns[tc](dm.p, N, dx.p, K, w, ms[t], N, K, 0, NULL);
        down(many, &dm);
        for (size_t i = 0; i < (size_t)ms[t] * N; i++) {
            total++;
            nf += !isfinite(many[i]);
            bad += memcmp(&many[i], &one[i], sizeof(float)) != 0;
        }
    }
    char cas[96], list[64] = "";
    for (int t = 0; t < n_ms; t++) {
        size_t l = strlen(list);
        snprintf(list + l, sizeof list - l, "%s%d", t ? "," : "", ms[t]);
    }
    snprintf(cas, sizeof cas, "N=%d K=%d: rows of M=%s == M=1", N, K, list);
    bits_row(tc ? "gemm-tc-batch" : "gemm-batch", cas, bad, total, nf, guards_ok(&d1) && guards_ok(&dm));
    dfree(&dx), dfree(&dw), dfree(&d1), dfree(&dm), dfree(&dwp);
    free(xh), free(wh), free(one), free(many);
}

static void test_gemm_invariance(int N, int K) {
    const int ms[] = {64, 9, 8, 5, 3, 2};
    test_gemm_invariance_k(0, N, K, ms, 6);
}

/* The tensor-core GEMM's launch shapes: 64-row x 64-output blocks (M > 64; rows 64.. in later
 * row chunks), one block per 16 outputs with 8, 4, 2 or 1 m tiles (M <= 64). */
static void test_gemm_tc_invariance(int N, int K) {
    const int ms[] = {130, 64, 33, 17, 9, 8, 5, 3, 2};
    test_gemm_invariance_k(1, N, K, ms, 9);
}

/* Every tiling of the tensor-core GEMM (flint_cuda_gemm_tc_variant_split) shares its order, so
 * each must reproduce flint_cuda_gemm_tc_split (same n_split) bit for bit: the rows of launches of
 * M = ms[..] against one launch of the largest, x rows ldx apart, y rows ldy apart (stored, or
 * accumulated into random values); y's gap columns and the rows past M must stay untouched
 * (counted with the guards). zero_row: x row 0 is +0 and W all negative, so every product of
 * that row is -0: the register path's chains start at +0 and end at +0, tss's start with a
 * plain product (-0) and add +0 at the end; the reference's stored row must be +0 too. */
static void test_gemm_tc_variants_k(int N, int K, int ldx, int ldy, int accumulate, int n_split, const int *ms,
                                    int n_ms, int zero_row) {
    int MB = 0;
    for (int t = 0; t < n_ms; t++) MB = ms[t] > MB ? ms[t] : MB;
    const size_t ybytes = sizeof(float) * MB * ldy;
    uint16_t *xh = xmalloc(sizeof(uint16_t) * MB * ldx), *wh = xmalloc(sizeof(uint16_t) * N * K);
    float *y0 = xmalloc(ybytes), *want = xmalloc(ybytes), *got = xmalloc(ybytes);
    rand_bf16(xh, NULL, (size_t)MB * ldx, -1, 1);
    rand_bf16(wh, NULL, (size_t)N * K, -1, zero_row ? -0.01f : 1);
    if (zero_row) memset(xh, 0, sizeof(uint16_t) * ldx);
    memset(y0, 0xFF, ybytes); /* NaN: gaps, and the outputs when storing */
    if (accumulate)
        for (int m = 0; m < MB; m++) rand_f32(y0 + (size_t)m * ldy, N, -4, 4);
    dbuf dx = dnew_up(xh, sizeof(uint16_t) * MB * ldx), dw0 = dnew_up(wh, sizeof(uint16_t) * N * K);
    dbuf dw = dpack(&dw0, N, K);
    dbuf d1 = dnew_up(y0, ybytes), dm = dnew(ybytes);
    flint_cuda_gemm_configure(0, 0, -1); /* the reference: plain launches, no wgmma (the variants hold it) */
    flint_cuda_gemm_tc_split(d1.p, ldy, dx.p, ldx, dw.p, MB, N, K, accumulate, n_split, NULL);
    down(want, &d1);
    if (zero_row && !accumulate) {
        size_t nz = 0;
        for (int n = 0; n < N; n++) nz += memcmp(&want[n], &(float){0.0f}, sizeof(float)) != 0;
        char cas[96];
        snprintf(cas, sizeof cas, "x row of +0, W < 0: the register path stores +0, N=%d K=%d", N, K);
        bits_row("gemm-tc-zero", cas, nz, (size_t)N, 0, 1);
    }
    flint_cuda_gemm_configure(1, 1, -1); /* the variants: programmatic dependent launches */
    for (int v = 0; v < flint_cuda_gemm_tc_variants(); v++) {
        size_t bad = 0, nf = 0, total = 0;
        int untouched = 1;
        for (int t = 0; t < n_ms; t++) {
            CK(cudaMemcpy(dm.p, y0, ybytes, cudaMemcpyHostToDevice));
            flint_cuda_gemm_tc_variant_split(dm.p, ldy, dx.p, ldx, dw.p, ms[t], N, K, accumulate, n_split, v, NULL);
            down(got, &dm);
            for (int m = 0; m < ms[t]; m++)
                for (int n = 0; n < N; n++) {
                    const size_t i = (size_t)m * ldy + n;
                    total++;
                    nf += !isfinite(got[i]);
                    bad += memcmp(&got[i], &want[i], sizeof(float)) != 0;
                }
            untouched &= gaps_ok(got, ms[t], N, ldy, 4) &&
                         !memcmp(got + (size_t)ms[t] * ldy, y0 + (size_t)ms[t] * ldy,
                                 sizeof(float) * (size_t)(MB - ms[t]) * ldy);
        }
        char cas[96];
        snprintf(cas, sizeof cas, "%s N=%d K=%d%s%s ns=%d%s", flint_cuda_gemm_tc_variant(NULL, 0, NULL, 0, NULL, 0, 0,
                 0, 0, v, NULL), N, K, ldx != K || ldy != N ? " ld+" : "", accumulate ? " acc" : "", n_split,
                 zero_row ? " 0-row" : "");
        bits_row("gemm-tc-tiling", cas, bad, total, nf, untouched && guards_ok(&dm));
    }
    dfree(&dx), dfree(&dw0), dfree(&dw), dfree(&d1), dfree(&dm);
    free(xh), free(wh), free(y0), free(want), free(got);
}

/* The packed layout (ops_cuda.h): the host packer (uploads) gives the device packer's bytes, the
 * padding is zero, and a GEMM over rows r0.. of a packed matrix (flint_cuda_gemm_packed_offset)
 * gives the same bits as those outputs of the whole GEMM. */
static void test_gemm_pack(int N, int K, int r0, int M) {
    const size_t pe = flint_cuda_gemm_packed_elems(N, K);
    uint16_t *wh = xmalloc(sizeof(uint16_t) * N * K), *xh = xmalloc(sizeof(uint16_t) * M * K);
    uint16_t *dev = xmalloc(sizeof(uint16_t) * pe), *host = xmalloc(sizeof(uint16_t) * pe);
    float *wf = xmalloc(sizeof(float) * N * K), *a = xmalloc(sizeof(float) * M * N), *b = xmalloc(sizeof(float) * M * N);
    rand_bf16(wh, wf, (size_t)N * K, -1, 1);
    rand_bf16(xh, NULL, (size_t)M * K, -1, 1);
    dbuf dw0 = dnew_up(wh, sizeof(uint16_t) * N * K), dx = dnew_up(xh, sizeof(uint16_t) * M * K);
    dbuf dw = dpack(&dw0, N, K), dy = dnew(sizeof(float) * M * N), dy2 = dnew(sizeof(float) * M * N);
    down(dev, &dw);
    const size_t tile = (size_t)((K + 31) / 32) * 512;
    for (int tr = 0; tr < (N + 15) / 16; tr++) flint_cuda_gemm_pack_rows_host(host + tr * tile, wf, tr, N, K);
    size_t bad = 0, nonzero_pad = 0;
    for (size_t i = 0; i < pe; i++) bad += dev[i] != host[i];
    /* padding: entries whose (n, k) lie outside the matrix */
    for (size_t i = 0; i < pe; i++) {
        const size_t tl = i / 512;
        /* gemm_layout.h, written out: p = 256 half + 128 h + 64 c + 8 row + 2 t + e holds row
         * 8 half + row, k 8 t + 4 h + 2 c + e of its tile */
        const int p = (int)(i % 512), nJ = (K + 31) / 32;
        const int n = 16 * (int)(tl / nJ) + 8 * (p / 256) + (p / 8) % 8;
        const int k = 32 * (int)(tl % nJ) + 8 * ((p / 2) % 4) + 4 * ((p / 128) % 2) + 2 * ((p / 64) % 2) + p % 2;
        if ((n >= N || k >= K) && dev[i]) nonzero_pad++;
    }
    char cas[96];
    snprintf(cas, sizeof cas, "N=%d K=%d host == device, padding zero", N, K);
    bits_row("gemm-pack", cas, bad + nonzero_pad, pe, 0, guards_ok(&dw));
    flint_cuda_gemm_tc(dy.p, N, dx.p, K, dw.p, M, N, K, 0, NULL);
    flint_cuda_gemm_tc((float *)dy2.p + r0, N, dx.p, K, (const uint16_t *)dw.p + flint_cuda_gemm_packed_offset(r0, K), M,
                       N - r0, K, 0, NULL);
    down(a, &dy), down(b, &dy2);
    bad = 0;
    for (int m = 0; m < M; m++)
        for (int n = r0; n < N; n++) bad += memcmp(&a[(size_t)m * N + n], &b[(size_t)m * N + n], 4) != 0;
    snprintf(cas, sizeof cas, "N=%d K=%d rows %d.. of a packed W, M=%d", N, K, r0, M);
    bits_row("gemm-pack", cas, bad, (size_t)M * (N - r0), 0, guards_ok(&dy2));
    dfree(&dw0), dfree(&dx), dfree(&dw), dfree(&dy), dfree(&dy2);
    free(wh), free(xh), free(dev), free(host), free(wf), free(a), free(b);
}

/* The gate-up GEMM with SwiGLU fused (flint_cuda_gemm_tc_glu, W packed with its rows interleaved)
 * against the plain GEMM (W packed as stored) and the swiglu kernel: the same bf16 bits, for every
 * tiling at M = ms[..] and through the dispatcher; the output's gap columns (ldo > I) and the rows
 * past M stay untouched. */
static void test_gemm_tc_glu(int I, int K, int ldx, int ldo, const int *ms, int n_ms) {
    const int N = 2 * I;
    int MB = 0;
    for (int t = 0; t < n_ms; t++) MB = ms[t] > MB ? ms[t] : MB;
    const size_t obytes = sizeof(uint16_t) * MB * ldo, pe = flint_cuda_gemm_packed_elems(N, K);
    uint16_t *xh = xmalloc(sizeof(uint16_t) * MB * ldx), *wh = xmalloc(sizeof(uint16_t) * N * K);
    uint16_t *wg = xmalloc(sizeof(uint16_t) * pe), *want = xmalloc(obytes), *got = xmalloc(obytes), *o0 = xmalloc(obytes);
    float *wf = xmalloc(sizeof(float) * N * K);
    rand_bf16(xh, NULL, (size_t)MB * ldx, -1, 1);
    rand_bf16(wh, wf, (size_t)N * K, -1, 1);
    memset(o0, 0xFF, obytes); /* NaN patterns: the gaps, and the outputs before the launch */
    const size_t tile = (size_t)((K + 31) / 32) * 512;
    for (int tr = 0; tr < N / 16; tr++) flint_cuda_gemm_pack_rows_host_glu(wg + tr * tile, wf, tr, I, K);
    dbuf dx = dnew_up(xh, sizeof(uint16_t) * MB * ldx), dw0 = dnew_up(wh, sizeof(uint16_t) * N * K);
    dbuf dw = dpack(&dw0, N, K), dwg = dnew_up(wg, sizeof(uint16_t) * pe);
    dbuf dy = dnew(sizeof(float) * MB * N), dref = dnew_up(o0, obytes), dm = dnew(obytes);
    flint_cuda_gemm_configure(0, 0, -1);
    flint_cuda_gemm_tc(dy.p, N, dx.p, ldx, dw.p, MB, N, K, 0, NULL);
    flint_cuda_swiglu(dref.p, ldo, dy.p, N, MB, I, NULL);
    down(want, &dref);
    flint_cuda_gemm_configure(1, 1, -1);
    for (int v = -1; v < flint_cuda_gemm_tc_variants(); v++) { /* -1: flint_cuda_gemm_tc_glu */
        size_t bad = 0, nf = 0, total = 0;
        int untouched = 1;
        for (int t = 0; t < n_ms; t++) {
            CK(cudaMemcpy(dm.p, o0, obytes, cudaMemcpyHostToDevice));
            if (v < 0) flint_cuda_gemm_tc_glu(dm.p, ldo, dx.p, ldx, dwg.p, ms[t], I, K, NULL);
            else flint_cuda_gemm_tc_variant_split(dm.p, ldo, dx.p, ldx, dwg.p, ms[t], N, K, 2, 4, v, NULL);
            down(got, &dm);
            for (int m = 0; m < ms[t]; m++)
                for (int i = 0; i < I; i++) {
                    const size_t j = (size_t)m * ldo + i;
                    total++;
                    nf += !isfinite(flint_bf16_to_f32(got[j]));
                    bad += got[j] != want[j];
                }
            untouched &= gaps_ok(got, ms[t], I, ldo, 2) &&
                         !memcmp(got + (size_t)ms[t] * ldo, o0 + (size_t)ms[t] * ldo,
                                 sizeof(uint16_t) * (size_t)(MB - ms[t]) * ldo);
        }
        char cas[96];
        snprintf(cas, sizeof cas, "%s I=%d K=%d%s", v < 0 ? "dispatch" : flint_cuda_gemm_tc_variant(NULL, 0, NULL, 0,
                 NULL, 0, 0, 0, 0, v, NULL), I, K, ldx != K || ldo != I ? " ld+" : "");
        bits_row("gemm-tc-glu", cas, bad, total, nf, untouched && guards_ok(&dm));
    }
    dfree(&dx), dfree(&dw0), dfree(&dw), dfree(&dwg), dfree(&dy), dfree(&dref), dfree(&dm);
    free(xh), free(wh), free(wg), free(want), free(got), free(o0), free(wf);
}

/* The MLP with the SwiGLU output in the down projection's input layout (flint_cuda_gemm_tc_glu_xp
 * into a NaN-filled buffer, then flint_cuda_gemm_tc_xp adding into y) against the row-layout calls
 * (flint_cuda_gemm_tc_glu, flint_cuda_gemm_tc): y bit-equal. Where neither GEMM can take that
 * layout (want_xp 0: 16 rows, the register path), both calls must return 0 and launch nothing. */
static void test_mlp_xp(int M, int I, int K, int want_xp) {
    const int N = 2 * I, H = K; /* down: H x I */
    const size_t pe = flint_cuda_gemm_packed_elems(N, K), xb = flint_cuda_gemm_scratch_bytes(M, I);
    uint16_t *xh = xmalloc(sizeof(uint16_t) * M * K), *wh = xmalloc(sizeof(uint16_t) * N * K);
    uint16_t *wg = xmalloc(sizeof(uint16_t) * pe), *wd = xmalloc(sizeof(uint16_t) * H * I);
    float *wf = xmalloc(sizeof(float) * N * K), *y0 = xmalloc(sizeof(float) * M * H);
    float *want = xmalloc(sizeof(float) * M * H), *got = xmalloc(sizeof(float) * M * H);
    rand_bf16(xh, NULL, (size_t)M * K, -1, 1);
    rand_bf16(wh, wf, (size_t)N * K, -1, 1);
    rand_bf16(wd, NULL, (size_t)H * I, -1, 1);
    rand_f32(y0, (size_t)M * H, -4, 4);
    const size_t tile = (size_t)((K + 31) / 32) * 512;
    for (int tr = 0; tr < N / 16; tr++) flint_cuda_gemm_pack_rows_host_glu(wg + tr * tile, wf, tr, I, K);
    flint_cuda_gemm_configure(1, 1, -1);
    dbuf dx = dnew_up(xh, sizeof(uint16_t) * M * K), dwg = dnew_up(wg, sizeof(uint16_t) * pe);
    dbuf dwd0 = dnew_up(wd, sizeof(uint16_t) * H * I), dwd = dpack(&dwd0, H, I);
    dbuf dact = dnew(sizeof(uint16_t) * M * I), dxp = dnew(xb), dy = dnew_up(y0, sizeof(float) * M * H);
    flint_cuda_gemm_tc_glu(dact.p, I, dx.p, K, dwg.p, M, I, K, NULL);
    flint_cuda_gemm_tc(dy.p, H, dact.p, I, dwd.p, M, H, I, 1, NULL);
    down(want, &dy);
    CK(cudaMemcpy(dy.p, y0, sizeof(float) * M * H, cudaMemcpyHostToDevice));
    const int Mp = (M + 127) / 128 * 128;
    int a = flint_cuda_gemm_tc_glu_xp(dxp.p, Mp, dx.p, K, dwg.p, M, I, K, NULL), b = 0;
    if (a) b = flint_cuda_gemm_tc_xp(dy.p, H, dxp.p, Mp, dwd.p, M, H, I, 1, NULL);
    down(got, &dy);
    size_t bad = 0, nf = 0;
    for (size_t i = 0; i < (size_t)M * H; i++) {
        nf += !isfinite(got[i]);
        bad += memcmp(&got[i], a && b ? &want[i] : &y0[i], sizeof(float)) != 0; /* nothing launched: y as it was */
    }
    char cas[96];
    snprintf(cas, sizeof cas, "M=%d I=%d K=%d: %s", M, I, K, want_xp ? "scratch layout" : "rows (both refuse)");
    bits_row("mlp-xp", cas, bad, (size_t)M * H, nf, a == want_xp && b == want_xp && guards_ok(&dxp) && guards_ok(&dy));
    dfree(&dx), dfree(&dwg), dfree(&dwd0), dfree(&dwd), dfree(&dact), dfree(&dxp), dfree(&dy);
    free(xh), free(wh), free(wg), free(wd), free(wf), free(y0), free(want), free(got);
}

/* at M = 1, 8, 64 and 130, n_split 4, plain strides */
static void test_gemm_tc_variants(int N, int K) {
    const int ms[] = {1, 8, 64, 130};
    test_gemm_tc_variants_k(N, K, K, N, 0, 4, ms, 4, 0);
}

/* ==== Attention ==== */

/* The reference, mirroring target/forward_cpu.c attention() (causal) and drafter/forward_cpu.c
 * block_attention() (blk_rows > 0): scores by flint_ops_dot * scale, max, expf, sum and the
 * weighted V sum in position order, then * 1/sum.
 * Limit per output: 2^-7 |ref| + 2e-5. The bf16 rounding of the output costs up to 2^-8 |ref|;
 * the rest is fp32-level: the tensor-core path (attn_cuda.cu) feeds q and the softmax weights to
 * the MMAs as hi + lo bf16 halves (within 2^-16 relative; block-mode K/V the same), accumulates
 * in fp32, and sums in another order than the reference. With q in [-3, 3), K/V in [-1, 1) and
 * head_dim <= 256 that moves scores by ~1e-6 and outputs by a few 1e-6 (the worst case, every
 * rounding aligned, ~1.5e-5), under the 2e-5; an indexing slip (a wrong position, head or chunk)
 * moves an output by ~1 / context or more, visible at contexts of a few hundred. */
typedef struct {
    const kv_layout *L;
    const float *kc, *vc; /* the bf16 caches as fp32 */
    const float *q;
    int ldq, n_rows, n_heads, blk_rows, ld_blk;
    const int32_t *pos, *seq;
    const float *blk_k, *blk_v;
} ref_attn;

static void ref_attention(const ref_attn *a, float *out /* [n_rows][n_heads * hd] */) {
    const kv_layout *L = a->L;
    const int hd = L->hd, G = a->n_heads / L->n_kv;
    const float scale = (float)(1.0 / sqrt((double)hd));
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 4) num_threads(n_cpu)
#endif
    for (int r = 0; r < a->n_rows; r++) {
        float *sc = xmalloc(sizeof(float) * 65536);
        int n_cache, T, blk0 = 0;
        if (a->blk_rows) {
            blk0 = r - r % a->blk_rows;
            n_cache = a->pos[blk0];
            T = n_cache + a->blk_rows;
        } else {
            n_cache = T = a->pos[r] + 1;
        }
        for (int h = 0; h < a->n_heads; h++) {
            const int kvh = h / G;
            const float *q = a->q + (size_t)r * a->ldq + (size_t)h * hd;
            float *o = out + (size_t)r * a->n_heads * hd + (size_t)h * hd;
            float mx = -INFINITY;
            for (int t = 0; t < T; t++) {
                const float *k = t < n_cache ? a->kc + kv_slot(L, a->seq[r], t, kvh)
                                             : a->blk_k + (size_t)(blk0 + t - n_cache) * a->ld_blk + (size_t)kvh * hd;
                sc[t] = flint_ops_dot(q, k, hd) * scale;
                if (sc[t] > mx) mx = sc[t];
            }
            float sum = 0.0f;
            for (int t = 0; t < T; t++) {
                sc[t] = expf(sc[t] - mx);
                sum += sc[t];
            }
            for (int d = 0; d < hd; d++) o[d] = 0.0f;
            for (int t = 0; t < T; t++) {
                const float *v = t < n_cache ? a->vc + kv_slot(L, a->seq[r], t, kvh)
                                             : a->blk_v + (size_t)(blk0 + t - n_cache) * a->ld_blk + (size_t)kvh * hd;
                for (int d = 0; d < hd; d++) o[d] += sc[t] * v[d];
            }
            float inv = 1.0f / sum;
            for (int d = 0; d < hd; d++) o[d] *= inv;
        }
        free(sc);
    }
}

/* Causal rows: n_groups runs of consecutive positions, one sequence each (a prefill run, verify
 * blocks, decode rows). Launch A keeps each run's rows together in position order (the order of
 * the runs shuffled), so the kernel groups them (a verify block in one CTA, a long prefill cut
 * into groups); it is checked against the reference. Then, bit for bit against launch A: the
 * rows shuffled one by one (launch B: mostly groups of one row, other neighbours); each row
 * alone (grid sized for that row); each run alone. */
#define ATTN_LONG 4096 /* positions past a launch's own max_ctx that its grid may be sized for */
static void test_attention_causal(const char *name, int n_heads, int n_kv, int hd, int bs, int n_groups,
                                  const int *starts, const int *lens) {
    int R = 0, max_pos = 0;
    for (int i = 0; i < n_groups; i++) {
        R += lens[i];
        if (starts[i] + lens[i] - 1 > max_pos) max_pos = starts[i] + lens[i] - 1;
    }
    kv_layout L = kv_layout_make(n_groups, max_pos, bs, n_kv, hd);
    const int q_dim = n_heads * hd, ldq = q_dim + 2 * n_kv * hd, ldo = q_dim + 8;
    /* logical row k (run i, j-th row) sits at row ra[k] of launch A and rb[k] of launch B */
    int *ra = xmalloc(sizeof(int) * R), *rb = xmalloc(sizeof(int) * R), *gorder = xmalloc(sizeof(int) * n_groups);
    int *g0 = xmalloc(sizeof(int) * n_groups); /* first logical row of each run */
    int32_t *pos = xmalloc(sizeof(int32_t) * R), *seq = xmalloc(sizeof(int32_t) * R);
    for (int i = 0, k = 0; i < n_groups; i++) {
        g0[i] = k;
        for (int j = 0; j < lens[i]; j++, k++) pos[k] = starts[i] + j, seq[k] = i;
    }
    for (int i = 0; i < n_groups; i++) gorder[i] = i;
    shuffle(gorder, n_groups);
    for (int o = 0, row = 0; o < n_groups; o++)
        for (int j = 0; j < lens[gorder[o]]; j++) ra[g0[gorder[o]] + j] = row++;
    for (int k = 0; k < R; k++) rb[k] = k;
    shuffle(rb, R);
    size_t n = kv_elems(&L);
    uint16_t *kh = xmalloc(sizeof(uint16_t) * n), *vh = xmalloc(sizeof(uint16_t) * n);
    float *kf = xmalloc(sizeof(float) * n), *vf = xmalloc(sizeof(float) * n);
    rand_bf16(kh, kf, n, -1, 1);
    rand_bf16(vh, vf, n, -1, 1);
    float *q = xmalloc(sizeof(float) * R * ldq), *ref = xmalloc(sizeof(float) * R * q_dim);
    rand_f32(q, (size_t)R * ldq, -3, 3);
    /* launch order copies of q, pos, seq */
    float *qa = xmalloc(sizeof(float) * R * ldq), *qb = xmalloc(sizeof(float) * R * ldq);
    int32_t *pa = xmalloc(sizeof(int32_t) * R), *pb = xmalloc(sizeof(int32_t) * R);
    int32_t *sa = xmalloc(sizeof(int32_t) * R), *sb = xmalloc(sizeof(int32_t) * R);
    for (int k = 0; k < R; k++) {
        memcpy(qa + (size_t)ra[k] * ldq, q + (size_t)k * ldq, sizeof(float) * ldq);
        memcpy(qb + (size_t)rb[k] * ldq, q + (size_t)k * ldq, sizeof(float) * ldq);
        pa[ra[k]] = pos[k], sa[ra[k]] = seq[k];
        pb[rb[k]] = pos[k], sb[rb[k]] = seq[k];
    }
    uint16_t *got = xmalloc(sizeof(uint16_t) * R * ldo), *other = xmalloc(sizeof(uint16_t) * R * ldo);

    dbuf dk = dnew_up(kh, sizeof(uint16_t) * n), dv = dnew_up(vh, sizeof(uint16_t) * n);
    dbuf dbt = dnew_up(L.bt, sizeof(int32_t) * L.n_seqs * L.bt_stride);
    dbuf dqa = dnew_up(qa, sizeof(float) * R * ldq), dqb = dnew_up(qb, sizeof(float) * R * ldq);
    dbuf dpa = dnew_up(pa, sizeof(int32_t) * R), dpb = dnew_up(pb, sizeof(int32_t) * R);
    dbuf dsa = dnew_up(sa, sizeof(int32_t) * R), dsb = dnew_up(sb, sizeof(int32_t) * R);
    dbuf dout = dnew(sizeof(uint16_t) * R * ldo), dalone = dnew(sizeof(uint16_t) * R * ldo);
    /* (the scratch also takes the runs alone in a grid sized for a long max_len, below) */
    dbuf dscr = dnew(sizeof(float) * flint_cuda_attn_scratch_floats(R, n_heads, n_kv, hd, max_pos + 1 + ATTN_LONG));
    flint_cuda_attn a = {0};
    a.q = dqa.p;
    a.ldq = ldq;
    a.out = dout.p;
    a.ldo = ldo;
    a.k_cache = dk.p;
    a.v_cache = dv.p;
    a.block_tables = dbt.p;
    a.bt_stride = L.bt_stride;
    a.row_seq = dsa.p;
    a.pos = dpa.p;
    a.n_rows = R;
    a.n_heads = n_heads;
    a.n_kv_heads = n_kv;
    a.head_dim = hd;
    a.block_size = bs;
    a.max_ctx = max_pos + 1;
    a.scratch = dscr.p;
    flint_cuda_attention(&a, NULL);
    down(got, &dout);

    ref_attn rf = {&L, kf, vf, q, ldq, R, n_heads, 0, 0, pos, seq, NULL, NULL};
    ref_attention(&rf, ref);
    cmp c = {0};
    for (int k = 0; k < R; k++)
        for (int i = 0; i < q_dim; i++) {
            double x = ref[(size_t)k * q_dim + i];
            cmp_add(&c, flint_bf16_to_f32(got[(size_t)ra[k] * ldo + i]), x, 2e-5 + ldexp(fabs(x), -7));
        }
    char cas[96];
    snprintf(cas, sizeof cas, "%s causal rows=%d heads=%d/%d hd=%d bs=%d", name, R, n_heads, n_kv, hd, bs);
    row("attention", cas, &c, guards_ok(&dout) && gaps_ok(got, R, q_dim, ldo, 2));

    /* launch A with its output into a GEMM scratch's layout (out_xp: the forward's O projection
     * input at > 32 rows) == launch A's rows, permuted on the host; pad rows and bytes stay 0xFF */
    if (q_dim % 32 == 0) {
        const int Mp = (R + 127) / 128 * 128;
        const size_t xb = flint_cuda_gemm_scratch_bytes(R, q_dim);
        dbuf dxp = dnew(xb);
        unsigned char *hx = xmalloc(xb), *want = xmalloc(xb);
        memset(want, 0xFF, xb);
        for (int r = 0; r < R; r++)
            for (int e = 0; e < q_dim; e++) {
                const size_t off = (size_t)(e >> 5) * Mp * 64 + (r >> 3) * 512 + ((e >> 1) & 3) * 128 + (r & 7) * 16 +
                                   ((e >> 3) & 3) * 4 + (e & 1) * 2;
                memcpy(want + off, &got[(size_t)r * ldo + e], 2);
            }
        flint_cuda_attn x = a;
        x.out = NULL;
        x.out_xp = dxp.p;
        x.out_mp = Mp;
        flint_cuda_attention(&x, NULL);
        down(hx, &dxp);
        size_t bad = 0;
        for (size_t i = 0; i < xb; i++) bad += hx[i] != want[i];
        snprintf(cas, sizeof cas, "%s causal: into the GEMM scratch == rows permuted", name);
        bits_row("attn-xp", cas, bad, xb, 0, guards_ok(&dxp));
        dfree(&dxp);
        free(hx), free(want);
    }

    /* bit-compare a launch's output (rows at map[k]) with launch A's */
    size_t bad, nf;
#define ATTN_BITS(map, what)                                                                                       \
    do {                                                                                                           \
        down(other, &dalone);                                                                                      \
        bad = nf = 0;                                                                                              \
        for (int k = 0; k < R; k++)                                                                                \
            for (int i = 0; i < q_dim; i++) {                                                                      \
                const uint16_t y = other[(size_t)(map)[k] * ldo + i];                                              \
                bad += y != got[(size_t)ra[k] * ldo + i];                                                          \
                nf += !isfinite(flint_bf16_to_f32(y));                                                             \
            }                                                                                                      \
        snprintf(cas, sizeof cas, "%s causal: %s", name, what);                                                    \
        bits_row("attn-batch", cas, bad, (size_t)R * q_dim, nf,                                                    \
                 guards_ok(&dalone) && guards_ok(&dscr) && gaps_ok(other, R, q_dim, ldo, 2));                      \
    } while (0)

    /* B: the rows shuffled */
    flint_cuda_attn b = a;
    b.q = dqb.p;
    b.pos = dpb.p;
    b.row_seq = dsb.p;
    b.out = dalone.p;
    flint_cuda_attention(&b, NULL);
    ATTN_BITS(rb, "rows shuffled == runs together");

    /* each row alone, with the grid sized for that row only */
    CK(cudaMemset(dalone.p, 0xFF, dalone.bytes));
    for (int r = 0; r < R; r++) {
        b = a;
        b.q = (const float *)dqa.p + (size_t)r * ldq;
        b.out = (uint16_t *)dalone.p + (size_t)r * ldo;
        b.pos = (const int32_t *)dpa.p + r;
        b.row_seq = (const int32_t *)dsa.p + r;
        b.n_rows = 1;
        b.max_ctx = pa[r] + 1;
        flint_cuda_attention(&b, NULL);
    }
    ATTN_BITS(ra, "each row alone == in its run");

    /* each run alone (a verify block, the prefill run); then again with its length as the hint (a
     * verify block's m tiles go to several CTAs when the CTAs are few: the split kernel's ms); then
     * hinted in a grid sized for ATTN_LONG more positions (a server's long max_len: more splits
     * than the run's chunks, m tiles shared or not by the run's own chunk count) */
    for (int hinted = 0; hinted < 3; hinted++) {
        CK(cudaMemset(dalone.p, 0xFF, dalone.bytes));
        for (int i = 0; i < n_groups; i++) {
            const int r = ra[g0[i]]; /* the run's rows are ra[g0[i]] .. + lens[i] - 1 in launch A */
            b = a;
            b.q = (const float *)dqa.p + (size_t)r * ldq;
            b.out = (uint16_t *)dalone.p + (size_t)r * ldo;
            b.pos = (const int32_t *)dpa.p + r;
            b.row_seq = (const int32_t *)dsa.p + r;
            b.n_rows = lens[i];
            b.max_ctx = starts[i] + lens[i];
            if (hinted) b.rows_per_seq = lens[i] < 8 ? lens[i] : 8;
            if (hinted == 2) b.max_ctx += ATTN_LONG;
            flint_cuda_attention(&b, NULL);
        }
        ATTN_BITS(ra, hinted == 2 ? "each run alone, hinted, grid for a long max_len == in the batch"
                      : hinted    ? "each run alone, its rows as the hint == in the batch"
                                  : "each run alone == in the batch");
    }

    /* the window hint (rows_per_seq, a speed knob) changes no bit */
    for (int h = 1; h <= 8; h *= 2) {
        CK(cudaMemset(dalone.p, 0xFF, dalone.bytes));
        b = a;
        b.out = dalone.p;
        b.rows_per_seq = h;
        flint_cuda_attention(&b, NULL);
        char what[48];
        snprintf(what, sizeof what, "rows_per_seq %d == no hint", h);
        ATTN_BITS(ra, what);
    }

#undef ATTN_BITS

    dfree(&dk), dfree(&dv), dfree(&dbt), dfree(&dqa), dfree(&dqb), dfree(&dpa), dfree(&dpb), dfree(&dsa), dfree(&dsb);
    dfree(&dout), dfree(&dalone), dfree(&dscr);
    free(L.bt), free(ra), free(rb), free(gorder), free(g0), free(pos), free(seq), free(kh), free(vh), free(kf), free(vf);
    free(q), free(ref), free(qa), free(qb), free(pa), free(pb), free(sa), free(sb), free(got), free(other);
}

/* Drafter block mode: request i has B rows at positions P_i..P_i+B-1 and sees the cache before
 * P_i plus its whole block (fp32 block K/V in the drafter's [rows][k | v] layout). Then each
 * request alone must give the same bits. */
static void test_attention_block(int n_heads, int n_kv, int hd, int bs, int B, int n_req, const int *P) {
    int R = n_req * B, max_ctx = 0;
    for (int i = 0; i < n_req; i++)
        if (P[i] + B > max_ctx) max_ctx = P[i] + B;
    kv_layout L = kv_layout_make(n_req, max_ctx, bs, n_kv, hd);
    const int q_dim = n_heads * hd, kvd = n_kv * hd, ldo = q_dim + 8, ld_blk = 2 * kvd;
    int32_t *pos = xmalloc(sizeof(int32_t) * R), *seq = xmalloc(sizeof(int32_t) * R);
    for (int i = 0; i < n_req; i++)
        for (int j = 0; j < B; j++) {
            pos[i * B + j] = P[i] + j;
            seq[i * B + j] = i;
        }
    size_t n = kv_elems(&L);
    uint16_t *kh = xmalloc(sizeof(uint16_t) * n), *vh = xmalloc(sizeof(uint16_t) * n);
    float *kf = xmalloc(sizeof(float) * n), *vf = xmalloc(sizeof(float) * n);
    rand_bf16(kh, kf, n, -1, 1);
    rand_bf16(vh, vf, n, -1, 1);
    float *q = xmalloc(sizeof(float) * R * q_dim), *bkv = xmalloc(sizeof(float) * R * ld_blk);
    float *ref = xmalloc(sizeof(float) * R * q_dim);
    rand_f32(q, (size_t)R * q_dim, -3, 3);
    rand_f32(bkv, (size_t)R * ld_blk, -1, 1);
    uint16_t *got = xmalloc(sizeof(uint16_t) * R * ldo), *alone = xmalloc(sizeof(uint16_t) * R * ldo);

    dbuf dq = dnew_up(q, sizeof(float) * R * q_dim), dk = dnew_up(kh, sizeof(uint16_t) * n);
    dbuf dv = dnew_up(vh, sizeof(uint16_t) * n), dbt = dnew_up(L.bt, sizeof(int32_t) * L.n_seqs * L.bt_stride);
    dbuf dp = dnew_up(pos, sizeof(int32_t) * R), ds = dnew_up(seq, sizeof(int32_t) * R);
    dbuf db = dnew_up(bkv, sizeof(float) * R * ld_blk);
    dbuf dout = dnew(sizeof(uint16_t) * R * ldo), dalone = dnew(sizeof(uint16_t) * R * ldo);
    dbuf dscr = dnew(sizeof(float) * flint_cuda_attn_scratch_floats(R, n_heads, n_kv, hd, max_ctx + ATTN_LONG));
    const float *blk = db.p;
    flint_cuda_attn a = {0};
    a.q = dq.p;
    a.ldq = q_dim;
    a.out = dout.p;
    a.ldo = ldo;
    a.k_cache = dk.p;
    a.v_cache = dv.p;
    a.block_tables = dbt.p;
    a.bt_stride = L.bt_stride;
    a.row_seq = ds.p;
    a.pos = dp.p;
    a.n_rows = R;
    a.n_heads = n_heads;
    a.n_kv_heads = n_kv;
    a.head_dim = hd;
    a.block_size = bs;
    a.max_ctx = max_ctx;
    a.blk_rows = B;
    a.blk_k = blk;
    a.blk_v = blk + kvd;
    a.ld_blk = ld_blk;
    a.scratch = dscr.p;
    flint_cuda_attention(&a, NULL);
    down(got, &dout);

    ref_attn ra = {&L, kf, vf, q, q_dim, R, n_heads, B, ld_blk, pos, seq, bkv, bkv + kvd};
    ref_attention(&ra, ref);
    cmp c = {0};
    for (int r = 0; r < R; r++)
        for (int i = 0; i < q_dim; i++) {
            double rf = ref[(size_t)r * q_dim + i];
            cmp_add(&c, flint_bf16_to_f32(got[(size_t)r * ldo + i]), rf, 2e-5 + ldexp(fabs(rf), -7));
        }
    char cas[96];
    snprintf(cas, sizeof cas, "drafter block B=%d reqs=%d heads=%d/%d hd=%d", B, n_req, n_heads, n_kv, hd);
    row("attention", cas, &c, guards_ok(&dout) && gaps_ok(got, R, q_dim, ldo, 2));

    /* each request alone, in a grid sized for it, then for ATTN_LONG more positions (a server's
     * long max_len: more splits than the block's chunks) */
    for (int lng = 0; lng < 2; lng++) {
        CK(cudaMemset(dalone.p, 0xFF, dalone.bytes));
        for (int i = 0; i < n_req; i++) {
            flint_cuda_attn b = a;
            size_t r0 = (size_t)i * B;
            b.q = (const float *)dq.p + r0 * q_dim;
            b.out = (uint16_t *)dalone.p + r0 * ldo;
            b.pos = (const int32_t *)dp.p + r0;
            b.row_seq = (const int32_t *)ds.p + r0;
            b.blk_k = blk + r0 * ld_blk;
            b.blk_v = blk + r0 * ld_blk + kvd;
            b.n_rows = B;
            b.max_ctx = P[i] + B + (lng ? ATTN_LONG : 0);
            flint_cuda_attention(&b, NULL);
        }
        down(alone, &dalone);
        size_t bad = 0, nf = 0;
        for (int r = 0; r < R; r++)
            for (int i = 0; i < q_dim; i++) {
                bad += alone[(size_t)r * ldo + i] != got[(size_t)r * ldo + i];
                nf += !isfinite(flint_bf16_to_f32(alone[(size_t)r * ldo + i]));
            }
        bits_row("attn-batch",
                 lng ? "drafter block: each request alone, grid for a long max_len == in batch"
                     : "drafter block: each request alone == in batch",
                 bad, (size_t)R * q_dim, nf, guards_ok(&dalone) && guards_ok(&dscr));
    }

    dfree(&dq), dfree(&dk), dfree(&dv), dfree(&dbt), dfree(&dp), dfree(&ds), dfree(&db), dfree(&dout);
    dfree(&dalone), dfree(&dscr);
    free(L.bt), free(pos), free(seq), free(kh), free(vh), free(kf), free(vf), free(q), free(bkv), free(ref);
    free(got), free(alone);
}

int main(int argc, char **argv) {
    uint64_t seed = ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid();
    const char *env = getenv("FLINT_SEED");
    int lab = 1, quick = 0, lab_small = 0, lab_glu_only = 0, lab_attn_only = 0, lab_large_only = 0;
    int one[4] = {-1, 0, 0, 0};
    if (env && *env) seed = strtoull(env, NULL, 10);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--no-lab")) lab = 0;
        else if (!strcmp(argv[i], "--quick")) quick = 1, dbuf_guard_set(0);
        else if (!strcmp(argv[i], "--lab-small")) lab_small = 1;
        else if (!strcmp(argv[i], "--lab-glu")) lab_glu_only = 1;
        else if (!strcmp(argv[i], "--lab-attn")) lab_attn_only = 1;
        else if (!strcmp(argv[i], "--lab-large")) lab_large_only = 1;
        else if (!strcmp(argv[i], "--lab-gemm") && i + 4 < argc)
            for (int k = 0; k < 4; k++) one[k] = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--seed N] [--no-lab] [--quick] [--lab-small] [--lab-glu] "
                            "[--lab-attn] [--lab-large] [--lab-gemm VARIANT M N K]\n", argv[0]);
            return 2;
        }
    }
    test_rng_seed(seed);
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    n_cpu = nc > 0 ? (int)nc : 1;

    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        printf("test_cuda_ops: no CUDA device\n");
        return 1;
    }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("test_cuda_ops: %s, %d SMs, L2 %d MB; seed %llu (rerun with FLINT_SEED=%llu)\n\n", prop.name,
           prop.multiProcessorCount, prop.l2CacheSize >> 20, (unsigned long long)seed, (unsigned long long)seed);
    /* the wgmma GEMMs' scratch for the default stream: up to 512 rows of K = 12288 (the lab's
     * and the tests' largest) */
    void *gemm_scratch = NULL;
    const size_t gemm_scratch_bytes = flint_cuda_gemm_scratch_bytes(512, 12288);
    CK(cudaMalloc(&gemm_scratch, gemm_scratch_bytes));
    flint_cuda_gemm_scratch_bind(NULL, gemm_scratch, gemm_scratch_bytes);
    if (one[0] >= 0) { /* one GEMM variant at one shape (for a profiler) */
        lab_gemm_one(one[0], one[1], one[2], one[3]);
        return 0;
    }
    if (lab_large_only) { /* the warpgroup tilings at 96..512 rows alone */
        lab_gemm_large();
        return 0;
    }
    if (lab_attn_only) { /* the attention lab alone */
        lab_attention();
        return 0;
    }
    if (lab_glu_only) { /* the gate-up GEMM with and without the fused SwiGLU */
        lab_glu();
        return 0;
    }
    if (lab_small) { /* the small-M GEMM lab alone */
        lab_gemm_small();
        return 0;
    }
    table_header();

    test_embed(1000, 200, 37);
    test_embed(500, 36, 5); /* a width of 4 mod 8: the element-wise path */
    if (!quick) test_embed(20000, 4096, 64);

    test_rmsnorm(1, 4096, 4096, 4096, 0);
    test_rmsnorm(37, 1000, 1003, 1005, 0);
    test_rmsnorm(64, 4096, 4096, 4100, 1);
    test_rmsnorm(5, 64, 64, 64, 1);
    test_rmsnorm(7, 1000, 1000, 1000, 1);  /* 16-byte path, a partial last warp */
    test_rmsnorm(3, 17000, 17000, 17000, 0); /* too wide for the registers: the scalar path */
    /* into the GEMM's scratch: tcw (33..64 rows of a narrow layer, 65..128), tss (64- and 128-row tiles) */
    test_rmsnorm_xp(33, 1024, 1000, 0, 0);
    test_rmsnorm_xp(64, 4096, 4096, 0, 1);
    test_rmsnorm_xp(40, 4096, 8200, 1, 0);
    test_rmsnorm_xp(100, 1024, 2048, 0, 1);
    test_rmsnorm_xp(200, 2048, 4096, 1, 0);
    if (!quick) test_rmsnorm_xp(512, 4096, 6144, 0, 0);

    test_qk_norm_rope("qwen3-8b", 19, 32, 8, 128, 1, 8 * 128);
    test_qk_norm_rope("llama", 9, 8, 4, 64, 0, 4 * 64);
    test_qk_norm_rope("tiny", 23, 8, 4, 8, 1, 4 * 8);
    test_qk_norm_rope("drafter k", 16, 0, 8, 128, 1, 8 * 128);
    test_qk_norm_rope("hd256", 3, 4, 2, 256, 1, 0);
    test_qk_norm_rope("hd320", 3, 2, 1, 320, 1, 0); /* past the kernel's registers for cos/sin: the loop path */

    test_kv_store(2, 64);
    test_kv_store(3, 6);
    test_qk_rope_store(32, 8, 128, 1); /* qwen3-8b's target layer */
    test_qk_rope_store(4, 2, 64, 0);   /* Llama: no q/k norm */
    test_qk_rope_store(0, 8, 128, 1);  /* the drafter's context encode: k|v rows */

    test_swiglu(13, 1000);
    test_swiglu(64, 12288);

    test_add(100003);
    test_copy_rows(64, 256, 256, 768, 512); /* the taps of flint-tiny's third tap layer */
    test_copy_rows(7, 37, 41, 100, 3);      /* unaligned: the element-wise path */

    test_gemm(1, 64, 64, 64, 64, 0);
    test_gemm(3, 100, 72, 72, 101, 0);
    test_gemm(8, 256, 1024, 1024, 256, 1);
    test_gemm(13, 77, 172, 172, 77, 0);    /* K % 8 != 0: the element-wise load path */
    test_gemm(130, 96, 520, 528, 99, 1);   /* padded rows, partial tiles, accumulate */
    if (!quick) test_gemm(64, 1024, 4096, 4096, 1024, 0);
    test_gemm(512, 160, 768, 768, 160, 0);
    if (!quick) test_gemm(1, 4096, 12288, 12288, 4096, 1);

    test_gemm_invariance(96, 520);
    test_gemm_invariance(200, 172);
    if (!quick) {
        test_gemm_invariance(4096, 4096);
        test_gemm_invariance(12288, 4096);
    }

    /* tensor cores: M in {1, 3, 8, 13, 64, 130, 512} (each launch shape), N not a multiple of 16
     * or 64, K % 32 != 0, K % 16 != 0 (vector loads), K % 8 != 0 (element loads), K < 32,
     * accumulate, padded ldx / ldy; "ints" rows are exact (limit 0) */
    test_gemm_k(1, 0, 1, 64, 64, 64, 64, 0);
    test_gemm_k(1, 0, 3, 100, 72, 72, 101, 0);
    test_gemm_k(1, 0, 8, 256, 1024, 1024, 256, 1);
    test_gemm_k(1, 0, 13, 77, 172, 172, 77, 0);
    test_gemm_k(1, 0, 5, 33, 24, 24, 40, 1);
    test_gemm_k(1, 0, 5, 33, 20, 24, 40, 0);
    test_gemm_k(1, 0, 33, 50, 264, 264, 51, 1);
    test_gemm_k(1, 0, 130, 96, 520, 528, 99, 1);
    test_gemm_k(1, 0, 200, 70, 136, 136, 70, 0);
    if (!quick) test_gemm_k(1, 0, 64, 1024, 4096, 4096, 1024, 0);
    test_gemm_k(1, 0, 512, 160, 768, 768, 160, 0);
    if (!quick) test_gemm_k(1, 0, 512, 1000, 4096, 4096, 1000, 1);
    if (!quick) test_gemm_k(1, 0, 1, 4096, 12288, 12288, 4096, 1);
    test_gemm_k(1, 1, 1, 100, 1000, 1000, 100, 0);
    test_gemm_k(1, 1, 13, 77, 172, 176, 79, 1);
    test_gemm_k(1, 1, 64, 200, 4096, 4096, 200, 0);
    test_gemm_k(1, 1, 130, 96, 520, 528, 99, 1);
    if (!quick) test_gemm_k(1, 1, 512, 520, 4096, 4096, 520, 0);
    test_gemm_k(0, 1, 13, 77, 172, 176, 79, 1); /* the CUDA-core GEMM on the same exact case */

    test_gemm_tc_invariance(96, 520);
    test_gemm_tc_invariance(200, 172);
    if (!quick) {
        test_gemm_tc_invariance(4096, 4096);
        test_gemm_tc_invariance(12288, 4096);
    }
    test_gemm_pack(100, 264, 32, 3);   /* partial tiles in n and k */
    test_gemm_pack(77, 40, 16, 9);
    test_gemm_pack(1000, 4096, 512, 70); /* the tile path over a row range */
    test_gemm_tc_variants(100, 264);   /* partial n tiles, K % 32 != 0, short quarters */
    test_gemm_tc_variants(64, 40);     /* K < 4 blocks: empty quarters */
    if (!quick) test_gemm_tc_variants(4096, 4096);
    {   /* the block-tile variants (tcb): several and partial n and m tiles, 512 rows, the tensor-
         * parallel parts (n_split 2, 1), accumulate into padded y, padded x; ldx % 8 != 0 and
         * K % 8 != 0 take their fallback */
        const int ms5[] = {1, 8, 64, 130, 512}, ms3[] = {1, 77, 200};
        test_gemm_tc_variants_k(160, 768, 768, 160, 0, 4, ms5, 5, 0);
        test_gemm_tc_variants_k(200, 520, 528, 203, 1, 2, ms3, 3, 0);
        test_gemm_tc_variants_k(300, 264, 272, 301, 1, 1, ms3, 3, 0);
        test_gemm_tc_variants_k(96, 520, 524, 99, 1, 4, ms3, 3, 0);
        test_gemm_tc_variants_k(77, 172, 172, 77, 0, 2, ms3, 3, 0);
        /* every product -0 in row 0 (tss starts its chains without the +0: it must still store +0) */
        const int msz[] = {1, 64, 130};
        test_gemm_tc_variants_k(256, 1024, 1024, 256, 0, 4, msz, 3, 1);
        test_gemm_tc_variants_k(192, 1024, 1032, 197, 1, 2, msz, 3, 1);
        /* several tiles a block (tss's persistent loop: 284-628 tiles on one block a
         * multiprocessor, its ring and stash reused tile after tile), rows and outputs past the
         * tiles, gap columns (ldy > N) untouched; stored and added */
        const int msb[] = {512, 300};
        test_gemm_tc_variants_k(20000, 256, 256, 20004, 0, 4, msb, 2, 0);
        test_gemm_tc_variants_k(9000, 512, 520, 9001, 1, 4, msb, 2, 0);
        if (!quick) {
            test_gemm_tc_variants_k(1000, 4096, 4104, 1003, 1, 2, ms3, 3, 0);
            test_gemm_tc_variants_k(4096, 12288, 12288, 4096, 0, 4, ms5 + 3, 2, 0);
        }
        /* SwiGLU in the gate-up GEMM's epilogue: partial tiles in n (I % 16 == 8) and k, padded
         * x and output, the embedded pair's and qwen3-8b's shapes */
        const int ms6[] = {1, 8, 33, 64, 130, 512};
        test_gemm_tc_glu(104, 264, 272, 107, ms6, 6);
        test_gemm_tc_glu(768, 256, 256, 768, ms6, 6);
        if (!quick) test_gemm_tc_glu(12288, 4096, 4096, 12288, ms6 + 1, 5);
        /* the MLP through the scratch layout: tss gate-up (64- and 128-row tiles) into tcw and tss
         * down projections; 32 rows take the register path, which refuses */
        test_mlp_xp(40, 4608, 1024, 1);
        test_mlp_xp(100, 4608, 1024, 1);
        test_mlp_xp(300, 2048, 1024, 1);
        test_mlp_xp(32, 8192, 1024, 1); /* 17..32 rows: a wide gate-up and a long-K down take the tiles */
        test_mlp_xp(16, 4608, 1024, 0);
        if (!quick) test_mlp_xp(512, 12288, 4096, 1);
    }

    /* Attention. Chunks are 128 positions: runs crossing a chunk edge (127..134, 250..257),
     * ending exactly on one (120..127: T = 128; decode rows at 127 and 255: T = 128, 256), verify
     * blocks of q = 1..8 rows mixed with decode rows and prefill runs of other lengths; G = 1, 2,
     * 4, 5, 8 (a group of 8 rows is cut in two at G = 8), head_dim 64, 128, 256 (tensor cores)
     * and 8, 12 (the CUDA-core fallback). */
    {
        const int starts[] = {0, 250, 1000, 127, 600, 127, 255, 120, 508, 383, 60, 700, 900, 333, 64},
                  lens[] = {40, 8, 1, 8, 1, 1, 1, 8, 3, 2, 5, 7, 6, 4, 8};
        test_attention_causal("qwen3", 16, 4, 128, 16, 15, starts, lens);
    }
    if (!quick) { /* qwen3-8b heads and enough rows (50 windows x 8 KV heads >= 1.5 CTAs per
                   * multiprocessor) for the fused kernel (merges in the CTA, no partials); each
                   * row and run alone takes the unfused kernel + merge, so the bit checks compare
                   * the two */
        int starts[64], lens[64], ng = 0;
        for (int i = 0; i < 24; i++) starts[ng] = 40 + 11 * i, lens[ng++] = 8;
        starts[ng] = 0, lens[ng++] = 150;
        for (int i = 0; i < 30; i++) starts[ng] = 3 + 9 * i, lens[ng++] = 1;
        for (int qq = 2; qq <= 7; qq++) starts[ng] = 100 + 30 * qq, lens[ng++] = qq;
        /* runs whose first group has 13 rows (positions 3..15: 4 m tiles) and 11 rows (5..15: 3
         * tiles), so that the fused kernel's copies for 3 and 4 tiles run too */
        starts[ng] = 3, lens[ng++] = 20;
        starts[ng] = 5, lens[ng++] = 12;
        test_attention_causal("qwen3-8b", 32, 8, 128, 16, ng, starts, lens);
    }
    if (!quick) { /* qwen3-8b verify blocks at the most rows the split kernel takes (24 windows of 8
                   * rows x 8 KV heads below 3/4 of a wave on 132 multiprocessors: 192), with the
                   * scratch sized for them by flint_cuda_attn_scratch_floats and its guards checked */
        int starts[24], lens[24];
        for (int i = 0; i < 24; i++) starts[i] = 5 + 37 * i, lens[i] = 8;
        test_attention_causal("qwen3-8b split max", 32, 8, 128, 16, 24, starts, lens);
    }
    if (!quick) { /* qwen3-8b verify blocks at contexts of 1 to 24 chunks: alone in a grid sized for
                   * a long max_len, a block's m tiles go to two CTAs up to 16 chunks and to one
                   * past them (attn_tc_body's ms against the wave) */
        const int starts[] = {5, 1000, 2200, 3000, 1500}, lens[] = {8, 8, 8, 8, 1};
        test_attention_causal("qwen3-8b long max_len", 32, 8, 128, 16, 5, starts, lens);
    }
    {   /* a long prefill run from 0 (groups cut at multiples of 8, chunk edges 128 .. 512) beside
         * verify and decode rows */
        const int starts[] = {0, 300, 777, 250}, lens[] = {quick ? 200 : 600, 8, 1, 8};
        test_attention_causal("prefill", 8, 2, 128, 16, 4, starts, lens);
    }
    {
        const int starts[] = {0, 290, 64, 127, 255}, lens[] = {17, 8, 3, 1, 2};
        test_attention_causal("G=2 hd=64", 4, 2, 64, 16, 5, starts, lens);
    }
    {   /* G = 1: a run of 70 rows is cut at positions 32 and 64 */
        const int starts[] = {5, 300, 0, 127}, lens[] = {6, 8, 70, 1};
        test_attention_causal("G=1 hd=64", 4, 4, 64, 32, 4, starts, lens);
    }
    {   /* G = 5 (Qwen3-14B's 40 / 8) */
        const int starts[] = {0, 129, 250}, lens[] = {30, 8, 1};
        test_attention_causal("G=5", 10, 2, 128, 16, 3, starts, lens);
    }
    {
        const int starts[] = {0, 200, 130, 255}, lens[] = {3, 8, 8, 1};
        test_attention_causal("G=8 hd=256", 16, 2, 256, 16, 4, starts, lens);
    }
    {
        const int starts[] = {0, 290, 64}, lens[] = {17, 8, 3};
        test_attention_causal("tiny hd=8", 8, 4, 8, 4, 3, starts, lens);
    }
    {   /* head_dim not a multiple of 8: the fallback's element-wise K path */
        const int starts[] = {0, 140}, lens[] = {5, 4};
        test_attention_causal("hd=12", 4, 2, 12, 8, 2, starts, lens);
    }
    {   /* drafter blocks: P = 120 ends on a chunk edge, 700 inside a chunk */
        const int P[] = {0, 5, 120, 700};
        test_attention_block(16, 4, 128, 16, 8, 4, P);
    }
    {   /* G = 8: a block of 16 rows is two groups; blocks across chunk edges 128 and 256 */
        const int P[] = {0, 250, 126};
        test_attention_block(16, 2, 128, 16, 16, 3, P);
    }
    if (!quick) { /* 32 blocks of 8 at qwen3-8b heads: the fused kernel; each block alone unfused */
        int P[32];
        for (int i = 0; i < 32; i++) P[i] = i == 0 ? 0 : i == 1 ? 120 : i == 2 ? 248 : (i * 37) % 290;
        test_attention_block(32, 8, 128, 16, 8, 32, P);
    }
    if (!quick) { /* qwen3-8b blocks at contexts of 1 to 20 chunks (alone in a long max_len's grid:
                   * m tiles shared by two CTAs, or not past 16 chunks) */
        const int P[] = {5, 1000, 2500};
        test_attention_block(32, 8, 128, 16, 8, 3, P);
    }
    {   /* a block starting on a chunk edge */
        const int P[] = {0, 128, 300};
        test_attention_block(4, 2, 64, 16, 8, 3, P);
    }
    {   /* the fallback: head_dim 8, and block mode at head_dim 256 (tiles too large) */
        const int P[] = {3, 61};
        test_attention_block(8, 4, 8, 4, 16, 2, P);
        const int P2[] = {10, 130};
        test_attention_block(8, 2, 256, 16, 8, 2, P2);
    }

    int status = test_report("test_cuda_ops");
    if (lab && !quick) {
        lab_gemm();
        lab_attention();
    }
    CK(cudaDeviceSynchronize());
    flint_cuda_gemm_scratch_unbind(NULL);
    CK(cudaFree(gemm_scratch));
    return status;
}
