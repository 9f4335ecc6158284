/* The GPU sampler (sampler/sampler_cuda.h) against its CPU reference (sampler/sampler.c,
 * sampler/accept.c) on random rows drawn from a printed seed. Labelled cuda: it needs a GPU and runs
 * on the GPU machine only.
 *
 * 1. Philox-4x32-10 and the 53-bit uniform: 100k (key, counter) pairs, bit-identical.
 * 2. The softmax exponential against the host's expf on 2^20 inputs of [-110, 0] and specials:
 *    bit-identical in exact mode (the default; reported, not failed, when the host CPU has no FMA
 *    and so runs glibc's other expf), <= 3 ulp on normal results in fast mode (CUDA's expf, 2 ulp
 *    from the true value; subnormal results reported).
 * 3. flint_cuda_sample vs flint_sampler_sample / flint_sampler_probs, vocabularies 1..151936
 *    (single block and 2, 4, 8-block clusters), rows of Gaussian, peaked (LLM-like), tied, -inf
 *    strewn, very wide and flat logits, temperatures 0.05..100 and 0, random top-k / top-p / min-p,
 *    row_param and purpose, unaligned rows. Greedy: the token identical, the one-hot exact, NaN rows
 *    included. Sampled: the probabilities within 1e-6 with the same support, the token identical.
 *    A differing support is allowed only at a boundary rounding can move (every differing entry
 *    underflows, or sits within 1e-5 relative of min-p's threshold or of the last kept value, or
 *    the top-p cumulative at it is within 1e-5 of top_p * total); a differing token only when
 *    u * total is within 1e-6 (relative) of the CPU's cumulative at the smaller of the two tokens.
 *    Such boundary cases are counted and printed: the test fails on any other difference and when
 *    there are more than 2 (exact mode; and then also unless all but one row's probabilities are
 *    bit-identical) or more than max(5, 2.5%) (fast mode).
 * 4. flint_cuda_draft_sample vs flint_sample_draft with the drafter's q rule (drafter/forward_cpu.c):
 *    the same token and boundary rules, q within 1e-6, greedy rows' q rows left untouched.
 * 5. flint_cuda_accept vs flint_accept_draft: k 0..7, greedy and sampled targets with filters, with
 *    q and with greedy drafts (q NULL), shuffled row0; out and n_acc identical (the acceptance test
 *    within 1e-5 relative of its threshold, or the emitted token at a 1e-6 boundary, counted as
 *    above; none for greedy targets); entries past n_acc untouched. Chi-square (p = 0.001) on a
 *    24-token vocabulary, 60k requests: the first emitted token follows the processed p (with q and
 *    with greedy drafts), and the same harness rejects the drafts' own first token (it follows q).
 * 6. Batch invariance: rows (and requests) alone in an aligned buffer vs inside a batch of 64 rows
 *    of other content with an unaligned stride: tokens and probabilities bit-identical.
 * Every output buffer has 256 guard bytes of 0xFF on each side and strided outputs gap columns;
 * all must be untouched; every probability finite, in [0, 1], summing to 1.
 * 7. Timings (rows 1/8/64/512 x 151936, greedy / top-p / top-k+top-p, both exp modes; drafting;
 *    acceptance), printed, not asserted; --no-lab skips them.
 * Usage: test_sampler_cuda [--seed N] [--no-lab]; FLINT_SEED=N also fixes the seed. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chisq.h"
#include "sampler/sampler.h"
#include "sampler/sampler_cuda.h"
#include "cuda_check.h"
#include "test.h"


#define VMAX 151936

/* ==== Random inputs (splitmix64) ==== */

static uint64_t rng_s;

static uint64_t rng_next(void) {
    uint64_t z = (rng_s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double urand(void) { return (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0); }
static int irand(int n) { return (int)(rng_next() % (uint64_t)n); }
static float gauss(void) {
    double a = urand(), b = urand();
    return (float)(sqrt(-2.0 * log(a + 1e-300)) * cos(6.283185307179586 * b));
}

/* ==== Failure notes: the first few in full, all counted ==== */

static int notes;
static void note(const char *fmt, ...) {
    if (notes++ >= 40) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* ==== Device buffers with guard bytes ==== */

#define GUARD 256
typedef struct dbuf {
    unsigned char *raw;
    size_t bytes;
} dbuf;

static void *dnew(dbuf *b, size_t bytes) {
    CK(cudaMalloc((void **)&b->raw, bytes + 2 * GUARD));
    CK(cudaMemset(b->raw, 0xFF, bytes + 2 * GUARD));
    b->bytes = bytes;
    return b->raw + GUARD;
}
static void *dput(dbuf *b, const void *h, size_t bytes) {
    void *d = dnew(b, bytes);
    if (bytes) CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}
static void dget(void *h, const dbuf *b) { CK(cudaMemcpy(h, b->raw + GUARD, b->bytes, cudaMemcpyDeviceToHost)); }
static int dguard_ok(const dbuf *b) {
    unsigned char g[2 * GUARD];
    CK(cudaMemcpy(g, b->raw, GUARD, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(g + GUARD, b->raw + GUARD + b->bytes, GUARD, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 2 * GUARD; i++)
        if (g[i] != 0xFF) return 0;
    return 1;
}
static void dfree(dbuf *b) {
    if (b->raw) CK(cudaFree(b->raw));
    b->raw = NULL;
}
static int untouched(const void *p, size_t bytes) {
    const unsigned char *c = p;
    for (size_t i = 0; i < bytes; i++)
        if (c[i] != 0xFF) return 0;
    return 1;
}

/* ==== Inputs ==== */

enum { K_GAUSS, K_PEAKED, K_TIES, K_NEGINF, K_WIDE, K_FLAT, K_NAN, N_KINDS };
static const char *kind_name[N_KINDS] = {"gauss", "peaked", "ties", "-inf", "wide", "flat", "nan"};

static void gen_logits(float *x, int V, int kind) {
    switch (kind) {
    case K_GAUSS:
        for (int i = 0; i < V; i++) x[i] = gauss();
        break;
    case K_PEAKED: { /* an LM's row: a broad tail and a few strong candidates */
        for (int i = 0; i < V; i++) x[i] = 2.5f * gauss();
        int n = 1 + irand(8);
        for (int s = 0; s < n; s++) x[irand(V)] += 8.0f + 10.0f * (float)urand();
        break;
    }
    case K_TIES:
        for (int i = 0; i < V; i++) x[i] = (float)irand(4);
        break;
    case K_NEGINF:
        for (int i = 0; i < V; i++) x[i] = urand() < 0.3 ? -INFINITY : 2.0f * gauss();
        x[irand(V)] = 1.0f;
        break;
    case K_WIDE:
        for (int i = 0; i < V; i++) x[i] = (float)(400.0 * urand() - 200.0);
        break;
    case K_FLAT:
        for (int i = 0; i < V; i++) x[i] = 0.25f;
        break;
    default: /* K_NAN, greedy rows only */
        for (int i = 0; i < V; i++) x[i] = urand() < 0.2 ? NAN : gauss();
        if (irand(4) == 0)
            for (int i = 0; i < V; i++) x[i] = NAN;
        else if (irand(3) == 0)
            for (int i = 0; i < V; i++) x[i] = urand() < 0.5 ? NAN : -INFINITY;
        break;
    }
}

static void gen_params(flint_cuda_sampling *P, int V, int kind) {
    static const float temps[] = {0.05f, 0.5f, 1.0f, 1.0f, 1.0f, 1.5f, 100.0f};
    static const float tps[] = {1.0f, 1.0f, 1.0f, 0.999f, 0.95f, 0.9f, 0.5f, 0.1f, 1e-6f};
    static const float mps[] = {0.0f, 0.0f, 0.0f, 0.01f, 0.1f, 0.5f, 1.0f};
    const int tks[] = {0, 0, 0, 1, 2, 7, 50, 1000, V - 1, V, V + 3};
    P->temperature = kind == K_NAN || irand(7) == 0 ? 0.0f : temps[irand(7)];
    P->top_k = tks[irand(11)];
    if (P->top_k < 0) P->top_k = 0;
    P->top_p = tps[irand(9)];
    P->min_p = mps[irand(7)];
    P->seed = rng_next();
}

static flint_sampling_params to_sp(const flint_cuda_sampling *P) {
    flint_sampling_params s;
    s.temperature = P->temperature;
    s.top_k = P->top_k;
    s.top_p = P->top_p;
    s.min_p = P->min_p;
    s.seed = P->seed;
    return s;
}

/* The drafter's q (drafter/forward_cpu.c, markov_loop): softmax(l / T) with one normalisation. */
static void cpu_draft_q(const float *lk, int V, float T, float *q) {
    float inv_t = 1.0f / T, mx = -INFINITY;
    for (int v = 0; v < V; v++)
        if (lk[v] * inv_t > mx) mx = lk[v] * inv_t;
    double sum = 0;
    for (int v = 0; v < V; v++) {
        float ev = expf(lk[v] * inv_t - mx);
        q[v] = ev;
        sum += ev;
    }
    float norm = (float)(1.0 / sum);
    for (int v = 0; v < V; v++) q[v] *= norm;
}

/* ==== Telling a rounding boundary from an error ==== */

typedef struct tally {
    long rows, bits_same, tok_boundary, set_boundary, bad;
} tally;

static const float *sort_p;
static int cmp_desc(const void *a, const void *b) { /* sampler.c's order */
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (sort_p[i] > sort_p[j]) return -1;
    if (sort_p[i] < sort_p[j]) return 1;
    return (i > j) - (i < j);
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* 1 when every entry where the supports of pc (CPU) and pg (GPU) differ sits where rounding can
 * move a boundary: it underflows (< 1e-30), or its unfiltered probability is within 1e-5
 * (relative) of min-p's threshold, or of the smallest kept value without an exact tie (another
 * kept entry with the same logit: ties are broken by index on both sides, never by rounding), or
 * the top-p cumulative just before or after it is within 1e-5 of top_p * total. */
static int support_boundary(const flint_cuda_sampling *P, const float *logits, const float *pc, const float *pg,
                            int V, flint_sampler_scratch *sc, int *ndiff) {
    const double eps = 1e-5;
    flint_cuda_sampling raw = *P;
    raw.top_k = 0;
    raw.top_p = 1.0f;
    raw.min_p = 0.0f;
    flint_sampling_params sp = to_sp(&raw);
    float *pre = malloc(sizeof(float) * V);
    int32_t *ord = malloc(sizeof(int32_t) * V), *where = malloc(sizeof(int32_t) * V);
    double *cumb = malloc(sizeof(double) * (V + 1));
    flint_sampler_probs(&sp, logits, V, pre, sc);
    float pmax = 0, vb = INFINITY;
    for (int i = 0; i < V; i++) {
        if (pre[i] > pmax) pmax = pre[i];
        if (pc[i] > 0 && pre[i] < vb) vb = pre[i];
    }
    for (int i = 0; i < V; i++) ord[i] = i;
    sort_p = pre;
    qsort(ord, (size_t)V, sizeof *ord, cmp_desc);
    int keep = P->top_k > 0 && P->top_k < V ? P->top_k : V;
    double tot = 0;
    cumb[0] = 0;
    for (int q = 0; q < V; q++) {
        where[ord[q]] = q;
        cumb[q + 1] = cumb[q] + pre[ord[q]];
        if (q < keep) tot += pre[ord[q]];
    }
    float *kl = malloc(sizeof(float) * V); /* the logits the CPU kept, sorted */
    int nk = 0;
    for (int i = 0; i < V; i++)
        if (pc[i] > 0) kl[nk++] = logits[i];
    qsort(kl, (size_t)nk, sizeof *kl, cmp_float);
    int ok_all = 1;
    *ndiff = 0;
    for (int i = 0; i < V; i++) {
        if ((pc[i] > 0) == (pg[i] > 0)) continue;
        ++*ndiff;
        int ok = fmaxf(pc[i], pg[i]) < 1e-30f;
        double thr = (double)P->min_p * pmax;
        if (P->min_p > 0 && fabs(pre[i] - thr) <= eps * thr) ok = 1;
        /* kept entries with this entry's logit, itself excluded */
        int lo = 0, hi = nk;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (kl[mid] < logits[i]) lo = mid + 1;
            else hi = mid;
        }
        int same = 0;
        while (lo + same < nk && kl[lo + same] == logits[i]) same++;
        if (pc[i] > 0) same--;
        if (fabs(pre[i] - vb) <= eps * vb && same == 0) ok = 1;
        if (P->top_p < 1.0f) {
            int q = where[i];
            double target = P->top_p * tot;
            if (q < keep && (fabs(cumb[q] - target) <= eps * tot || fabs(cumb[q + 1] - target) <= eps * tot)) ok = 1;
        }
        if (!ok) ok_all = 0;
    }
    free(pre);
    free(ord);
    free(where);
    free(cumb);
    free(kl);
    return ok_all;
}

/* 1 when a draw of a (GPU) instead of b (CPU) from p with uniform u is a rounding boundary: u * total
 * within 1e-6 (relative) of the cumulative (index order, zeros skipped) at the smaller token. */
static int token_boundary(const float *p, int V, double u, int a, int b) {
    if (a < 0 || a >= V || b < 0 || b >= V) return 0;
    double tot = 0, cum = 0;
    for (int i = 0; i < V; i++) tot += p[i];
    int lo = a < b ? a : b;
    for (int i = 0; i <= lo; i++)
        if (p[i] > 0) cum += p[i];
    return fabs(cum - u * tot) <= 1e-6 * tot;
}

/* Finite, in [0, 1], summing to 1. */
static int probs_sane(const float *p, int V) {
    double s = 0;
    for (int i = 0; i < V; i++) {
        if (!isfinite(p[i]) || p[i] < 0 || p[i] > 1.0f + 1e-6f) return 0;
        s += p[i];
    }
    return fabs(s - 1.0) <= 1e-5;
}

static int exact_mode = 1; /* the sampler's exp mode under test */
static int exp_identical = 1; /* section 2 found the device exp equal to the host's */

/* Section-end verdict on the boundary cases. */
static void tally_verdict(const char *what, const tally *ty) {
    long nb = ty->tok_boundary + ty->set_boundary;
    long cap = exact_mode ? 2 : (ty->rows / 40 > 5 ? ty->rows / 40 : 5);
    printf("%-34s %s: %ld rows, %ld bit-identical, %ld token / %ld set boundary cases (cap %ld), %ld bad\n", what,
           exact_mode ? "exact" : "fast ", ty->rows, ty->bits_same, ty->tok_boundary, ty->set_boundary, cap, ty->bad);
    CHECKF(ty->bad == 0, "%s: %ld differences that are not rounding boundaries", what, ty->bad);
    CHECKF(nb <= cap, "%s: %ld boundary cases, more than %ld", what, nb, cap);
}

/* ==== 1. Philox and the uniform ==== */

static void test_philox(void) {
    const int n = 100000;
    uint64_t *key = malloc(sizeof(uint64_t) * n);
    uint32_t *ctr = malloc(sizeof(uint32_t) * 4 * n), *o4 = malloc(sizeof(uint32_t) * 4 * n);
    double *u = malloc(sizeof(double) * n);
    for (int i = 0; i < n; i++) {
        key[i] = i < 4 ? (uint64_t)0 - (uint64_t)(i & 1) : rng_next();
        for (int e = 0; e < 4; e++) ctr[4 * i + e] = i < 2 ? 0xffffffffu * (uint32_t)(i & 1) : (uint32_t)rng_next();
        if (i % 3 == 0) ctr[4 * i + 2] = (uint32_t)irand(5); /* real purposes and small indices too */
        if (i % 5 == 0) ctr[4 * i + 3] = (uint32_t)irand(3);
    }
    dbuf bk, bc, bo, bu;
    uint64_t *dk = dput(&bk, key, sizeof(uint64_t) * n);
    uint32_t *dc = dput(&bc, ctr, sizeof(uint32_t) * 4 * n), *dO = dnew(&bo, sizeof(uint32_t) * 4 * n);
    double *du = dnew(&bu, sizeof(double) * n);
    flint_cuda_philox_test(dO, du, dk, dc, n, NULL);
    CK(cudaDeviceSynchronize());
    dget(o4, &bo);
    dget(u, &bu);
    long bad4 = 0, badu = 0;
    for (int i = 0; i < n; i++) {
        uint32_t ref[4];
        flint_philox4x32(key[i], ctr + 4 * i, ref);
        if (memcmp(ref, o4 + 4 * i, sizeof ref)) bad4++;
        int64_t pos = (int64_t)(((uint64_t)ctr[4 * i + 1] << 32) | ctr[4 * i]);
        double ur = flint_rng_uniform(key[i], pos, (flint_rng_purpose)ctr[4 * i + 2], ctr[4 * i + 3]);
        if (memcmp(&ur, u + i, sizeof ur)) {
            if (!badu) note("philox: uniform %d: cpu %.17g gpu %.17g", i, ur, u[i]);
            badu++;
        }
    }
    printf("philox/uniform: %d pairs, %ld philox and %ld uniform mismatches\n", n, bad4, badu);
    CHECKF(bad4 == 0 && badu == 0, "philox %ld, uniform %ld mismatches", bad4, badu);
    CHECK(dguard_ok(&bo) && dguard_ok(&bu));
    dfree(&bk);
    dfree(&bc);
    dfree(&bo);
    dfree(&bu);
    free(key);
    free(ctr);
    free(o4);
    free(u);
}

/* ==== 1b. The verify rows from device-resident drafts (flint_cuda_draft_rows) ==== */

static void test_draft_rows(void) {
    enum { L = 7, ND = 5, STRIDE = 8, NST = 6, MAXR = 64 };
    int32_t toks[L * STRIDE], src[MAXR], want_rows[MAXR], got_rows[MAXR];
    int32_t want_dr[ND * L], got_dr[ND * L];
    for (int i = 0; i < L * STRIDE; i++) toks[i] = (int32_t)irand(150000);
    int R = 0;
    for (int d = 0; d < ND; d++) { /* anchor then k_d <= NST drafts per request, as the engine lays them out */
        const int32_t anchor = (int32_t)irand(150000);
        src[R] = -1 - anchor, want_rows[R++] = anchor;
        const int k = 1 + (int)irand(NST);
        for (int j = 0; j < k; j++) src[R] = d * L + j, want_rows[R++] = toks[j * STRIDE + d];
    }
    for (int i = 0; i < ND * L; i++) got_dr[i] = want_dr[i] = -7; /* slots j >= NST stay as they were */
    for (int d = 0; d < ND; d++)
        for (int j = 0; j < NST; j++) want_dr[d * L + j] = toks[j * STRIDE + d];
    dbuf bt, bs, br, bd;
    int32_t *dt = dput(&bt, toks, sizeof toks), *ds = dput(&bs, src, sizeof(int32_t) * R);
    int32_t *drow = dnew(&br, sizeof(int32_t) * R), *ddr = dput(&bd, got_dr, sizeof got_dr);
    flint_cuda_draft_rows(drow, ds, R, ddr, L, ND, NST, dt, STRIDE, NULL);
    CK(cudaDeviceSynchronize());
    dget(got_rows, &br);
    dget(got_dr, &bd);
    CHECKF(!memcmp(got_rows, want_rows, sizeof(int32_t) * R) && !memcmp(got_dr, want_dr, sizeof want_dr),
           "draft_rows: the rows or the [request][L] drafts differ from the host's layout");
    CHECK(dguard_ok(&br) && dguard_ok(&bd));
    printf("draft_rows: %d verify rows and %d x %d drafts built on the device\n", R, ND, L);
    dfree(&bt), dfree(&bs), dfree(&br), dfree(&bd);
}

/* ==== 2. The exponential ==== */

static int32_t ulp_dist(float a, float b) {
    int32_t x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    if (x < 0) x = INT32_MIN - x;
    if (y < 0) y = INT32_MIN - y;
    return x > y ? x - y : y - x;
}

static void test_exp(void) {
    const int n = 1 << 20;
    float *in = malloc(sizeof(float) * n), *out = malloc(sizeof(float) * n);
    const float sp[] = {0.0f, -0.0f, -INFINITY, -1e-30f, -1e-7f, -87.3f, -88.0f, -88.7f, -103.0f, -103.3f,
                        -103.5f, -103.98f, -104.0f, -150.0f, -1e30f, 1e-30f, 1.0f};
    const int ns = (int)(sizeof sp / sizeof sp[0]);
    for (int i = 0; i < n; i++) {
        if (i < ns) in[i] = sp[i];
        else if (i & 1) in[i] = (float)(-110.0 * urand());
        else in[i] = -(float)exp(urand() * 12.0 - 8.0); /* small and large magnitudes */
    }
    dbuf bi, bo;
    float *di = dput(&bi, in, sizeof(float) * n), *dout = dnew(&bo, sizeof(float) * n);
    flint_cuda_sampler_exp_test(dout, di, n, NULL);
    CK(cudaDeviceSynchronize());
    dget(out, &bo);
    long diff = 0;
    int32_t worst = 0, worst_sub = 0; /* normal results, subnormal ones */
    for (int i = 0; i < n; i++) {
        float r = expf(in[i]);
        if (memcmp(&r, out + i, 4)) {
            if (exact_mode && diff < 3) note("exp(%a): host %a device %a", in[i], r, out[i]);
            diff++;
        }
        int32_t d = isnan(r) || isnan(out[i]) ? (isnan(r) && isnan(out[i]) ? 0 : INT32_MAX) : ulp_dist(r, out[i]);
        if (r >= 0x1p-126f || isnan(r)) worst = d > worst ? d : worst;
        else worst_sub = d > worst_sub ? d : worst_sub;
    }
    printf("exp (%s): %d inputs, %ld differ from the host's expf, worst %d ulp (%d on subnormal results)\n",
           exact_mode ? "exact" : "fast", n, diff, worst, worst_sub);
    if (exact_mode) {
        exp_identical = diff == 0;
        if (__builtin_cpu_supports("fma")) CHECKF(diff == 0, "exact exp: %ld differences", diff);
        else if (diff) printf("  (host CPU without FMA: glibc runs its SSE2 expf, which rounds a few inputs otherwise)\n");
    } else {
        CHECKF(worst <= 3, "fast exp: %d ulp", worst); /* CUDA: 2 ulp from the true value; glibc 0.502 */
    }
    CHECK(dguard_ok(&bo));
    dfree(&bi);
    dfree(&bo);
    free(in);
    free(out);
}

/* ==== 3. flint_cuda_sample ==== */

static void test_sample(int V, int R, int kind, tally *ty, flint_sampler_scratch *sc) {
    const int ld = V + irand(4), off = irand(4), ldp = V + 2;
    const int purpose = irand(3) == 0 ? FLINT_RNG_BONUS : FLINT_RNG_SAMPLE;
    size_t nl = (size_t)R * ld + off;
    float *h = malloc(sizeof(float) * nl), *pg = malloc(sizeof(float) * (size_t)R * ldp), *pc = malloc(sizeof(float) * V);
    for (size_t i = 0; i < nl; i++) h[i] = 1e30f; /* padding a kernel must not read */
    flint_cuda_sampling *P = malloc(sizeof *P * R);
    int32_t *rp = malloc(sizeof(int32_t) * R), *tok = malloc(sizeof(int32_t) * (R + 2));
    int64_t *pos = malloc(sizeof(int64_t) * R);
    const int use_rp = irand(2);
    for (int r = 0; r < R; r++) {
        gen_logits(h + off + (size_t)r * ld, V, kind);
        gen_params(P + r, V, kind);
        rp[r] = r;
        pos[r] = irand(8) == 0 ? -(int64_t)irand(1000) : (int64_t)(rng_next() >> 24);
    }
    for (int r = R - 1; r > 0 && use_rp; r--) {
        int j = irand(r + 1), tmp = rp[r];
        rp[r] = rp[j];
        rp[j] = tmp;
    }
    dbuf bl, bp, brp, bpos, bt, bpr;
    float *dl = dput(&bl, h, sizeof(float) * nl);
    flint_cuda_sampling *dp = dput(&bp, P, sizeof *P * R);
    int32_t *drp = dput(&brp, rp, sizeof(int32_t) * R), *dt = dnew(&bt, sizeof(int32_t) * R);
    int64_t *dpos = dput(&bpos, pos, sizeof(int64_t) * R);
    float *dpr = dnew(&bpr, sizeof(float) * (size_t)R * ldp);
    flint_cuda_sample(dt, dpr, ldp, dl + off, ld, R, V, dp, use_rp ? drp : NULL, dpos, purpose, NULL, NULL);
    CK(cudaDeviceSynchronize());
    dget(tok, &bt);
    dget(pg, &bpr);
    CHECKF(dguard_ok(&bt) && dguard_ok(&bpr), "sample V=%d %s: guard bytes overwritten", V, kind_name[kind]);
    for (int r = 0; r < R; r++) {
        const flint_cuda_sampling *Pr = P + (use_rp ? rp[r] : r);
        const float *lg = h + off + (size_t)r * ld, *g = pg + (size_t)r * ldp;
        flint_sampling_params sp = to_sp(Pr);
        const int tg = tok[r];
        if (!untouched(g + V, sizeof(float) * (ldp - V))) {
            note("sample V=%d %s row %d: gap columns written", V, kind_name[kind], r);
            ty->bad++;
        }
        if (!probs_sane(g, V) || tg < 0 || tg >= V) {
            note("sample V=%d %s row %d: token %d or probabilities not sane", V, kind_name[kind], r, tg);
            ty->bad++;
            continue;
        }
        if (Pr->temperature == 0.0f) {
            int tc = flint_argmax(lg, V), onehot = 1;
            for (int i = 0; i < V; i++) onehot &= g[i] == (i == tc ? 1.0f : 0.0f);
            if (tg != tc || !onehot) {
                note("greedy V=%d %s row %d: gpu %d cpu %d one-hot %d", V, kind_name[kind], r, tg, tc, onehot);
                ty->bad++;
            }
            continue;
        }
        ty->rows++;
        flint_sampler_probs(&sp, lg, V, pc, sc);
        const double u = flint_rng_uniform(Pr->seed, pos[r], (flint_rng_purpose)purpose, 0);
        const int tc = flint_sample_from_probs(pc, V, u);
        if (purpose == FLINT_RNG_SAMPLE && V <= 40000 && flint_sampler_sample(&sp, lg, V, pos[r], sc) != tc) {
            note("cpu reference: flint_sampler_sample disagrees with probs + sample_from_probs");
            ty->bad++;
        }
        if (!(g[tg] > 0)) {
            note("sample V=%d %s row %d: token %d has probability 0", V, kind_name[kind], r, tg);
            ty->bad++;
        }
        int same_support = 1;
        for (int i = 0; i < V; i++) same_support &= (pc[i] > 0) == (g[i] > 0);
        if (!same_support) {
            int nd;
            if (support_boundary(Pr, lg, pc, g, V, sc, &nd)) {
                ty->set_boundary++;
                printf("  boundary: sample V=%d %s row %d (T %g k %d p %g min_p %g): %d entries in or out\n", V,
                       kind_name[kind], r, Pr->temperature, Pr->top_k, Pr->top_p, Pr->min_p, nd);
            } else {
                note("sample V=%d %s row %d (T %g k %d p %g min_p %g): support differs in %d entries", V,
                     kind_name[kind], r, Pr->temperature, Pr->top_k, Pr->top_p, Pr->min_p, nd);
                ty->bad++;
            }
            continue;
        }
        double md = 0;
        for (int i = 0; i < V; i++) md = fmax(md, fabs((double)g[i] - pc[i]));
        if (md > 1e-6) {
            note("sample V=%d %s row %d: probabilities differ by %g", V, kind_name[kind], r, md);
            ty->bad++;
        }
        if (!memcmp(g, pc, sizeof(float) * V)) ty->bits_same++;
        if (tg != tc) {
            if (token_boundary(pc, V, u, tg, tc)) {
                ty->tok_boundary++;
                printf("  boundary: sample V=%d %s row %d: token %d vs cpu %d\n", V, kind_name[kind], r, tg, tc);
            } else {
                note("sample V=%d %s row %d (T %g k %d p %g min_p %g seed %llu pos %lld): token %d, cpu %d", V,
                     kind_name[kind], r, Pr->temperature, Pr->top_k, Pr->top_p, Pr->min_p,
                     (unsigned long long)Pr->seed, (long long)pos[r], tg, tc);
                ty->bad++;
            }
        }
    }
    dfree(&bl);
    dfree(&bp);
    dfree(&brp);
    dfree(&bpos);
    dfree(&bt);
    dfree(&bpr);
    free(h);
    free(pg);
    free(pc);
    free(P);
    free(rp);
    free(tok);
    free(pos);
}

static void suite_sample(flint_sampler_scratch *sc, int quick) {
    static const int vs[] = {1, 2, 3, 17, 1000, 20480, 20481, 40000, 70000, 151936};
    tally ty;
    memset(&ty, 0, sizeof ty);
    for (size_t a = 0; a < sizeof vs / sizeof vs[0]; a++) {
        int V = vs[a], R = V >= 100000 ? 12 : V >= 20000 ? 20 : 48;
        if (quick && V > 1000 && V != 151936) continue;
        for (int kind = 0; kind < N_KINDS; kind++) test_sample(V, quick ? R / 2 + 1 : R, kind, &ty, sc);
    }
    tally_verdict("flint_cuda_sample", &ty);
    if (exact_mode && exp_identical)
        CHECKF(ty.bits_same + 1 >= ty.rows - ty.set_boundary, "exact mode: only %ld of %ld rows bit-identical",
               ty.bits_same, ty.rows - ty.set_boundary);
}

/* ==== 4. flint_cuda_draft_sample ==== */

static void test_draft(int V, int R, tally *ty) {
    static const float temps[] = {0.0f, 0.3f, 1.0f, 2.5f};
    const int ld = V + irand(3), ldq = V + 1, use_g = irand(3) != 0;
    float *h = malloc(sizeof(float) * (size_t)R * ld), *qg = malloc(sizeof(float) * (size_t)R * ldq),
          *qc = malloc(sizeof(float) * V), *T = malloc(sizeof(float) * R);
    int32_t *gr = malloc(sizeof(int32_t) * R), *tok = malloc(sizeof(int32_t) * R);
    uint64_t *seed = malloc(sizeof(uint64_t) * R);
    int64_t *pos = malloc(sizeof(int64_t) * R);
    for (int r = 0; r < R; r++) {
        gen_logits(h + (size_t)r * ld, V, irand(4));
        T[r] = temps[irand(4)];
        gr[r] = irand(5) == 0;
        seed[r] = rng_next();
        pos[r] = (int64_t)(rng_next() >> 30);
    }
    dbuf bl, bT, bg, bs, bpos, bt, bq;
    float *dl = dput(&bl, h, sizeof(float) * (size_t)R * ld), *dT = dput(&bT, T, sizeof(float) * R);
    int32_t *dg = dput(&bg, gr, sizeof(int32_t) * R), *dt = dnew(&bt, sizeof(int32_t) * R);
    uint64_t *ds = dput(&bs, seed, sizeof(uint64_t) * R);
    int64_t *dpos = dput(&bpos, pos, sizeof(int64_t) * R);
    float *dq = dnew(&bq, sizeof(float) * (size_t)R * ldq);
    flint_cuda_draft_sample(dt, dq, ldq, dl, ld, R, V, dT, use_g ? dg : NULL, ds, dpos, NULL, NULL);
    CK(cudaDeviceSynchronize());
    dget(tok, &bt);
    dget(qg, &bq);
    CHECKF(dguard_ok(&bt) && dguard_ok(&bq), "draft V=%d: guard bytes overwritten", V);
    for (int r = 0; r < R; r++) {
        const float *lg = h + (size_t)r * ld, *g = qg + (size_t)r * ldq;
        const int greedy = (use_g && gr[r]) || T[r] == 0.0f, tg = tok[r];
        if (greedy) {
            if (tg != flint_argmax(lg, V) || !untouched(g, sizeof(float) * ldq)) {
                note("draft V=%d row %d greedy: token %d cpu %d, q row untouched %d", V, r, tg, flint_argmax(lg, V),
                     untouched(g, sizeof(float) * ldq));
                ty->bad++;
            }
            continue;
        }
        ty->rows++;
        cpu_draft_q(lg, V, T[r], qc);
        const double u = flint_rng_uniform(seed[r], pos[r], FLINT_RNG_DRAFT, 0);
        const int tc = flint_sample_draft(qc, V, seed[r], pos[r]);
        double md = 0;
        int finite = 1;
        for (int i = 0; i < V; i++) {
            md = fmax(md, fabs((double)g[i] - qc[i]));
            finite &= isfinite(g[i]);
        }
        if (!finite || md > 1e-6 || !untouched(g + V, sizeof(float) * (ldq - V)) || tg < 0 || tg >= V) {
            note("draft V=%d row %d: q differs by %g (finite %d), token %d", V, r, md, finite, tg);
            ty->bad++;
            continue;
        }
        if (!memcmp(g, qc, sizeof(float) * V)) ty->bits_same++;
        if (tg != tc) {
            if (token_boundary(qc, V, u, tg, tc)) {
                ty->tok_boundary++;
                printf("  boundary: draft V=%d row %d: token %d vs cpu %d\n", V, r, tg, tc);
            } else {
                note("draft V=%d row %d (T %g seed %llu pos %lld): token %d, cpu %d", V, r, T[r],
                     (unsigned long long)seed[r], (long long)pos[r], tg, tc);
                ty->bad++;
            }
        }
    }
    dfree(&bl);
    dfree(&bT);
    dfree(&bg);
    dfree(&bs);
    dfree(&bpos);
    dfree(&bt);
    dfree(&bq);
    free(h);
    free(qg);
    free(qc);
    free(T);
    free(gr);
    free(tok);
    free(seed);
    free(pos);
}

/* ==== 5. flint_cuda_accept ==== */

/* The distribution accept.c draws the emitted token of row `row` from (the residual when rejected). */
static void cpu_emit_dist(const flint_sampling_params *sp, const float *row, const float *qrow, int x, int V,
                          int rejected, float *p, flint_sampler_scratch *sc) {
    flint_sampler_probs(sp, row, V, p, sc);
    if (!rejected) return;
    double mass = 0;
    if (qrow) {
        for (int v = 0; v < V; v++) {
            float r = p[v] - qrow[v];
            p[v] = r > 0 ? r : 0;
            mass += p[v];
        }
    } else {
        mass = 1.0 - p[x];
        p[x] = 0;
    }
    if (mass <= 1e-8) flint_sampler_probs(sp, row, V, p, sc);
}

typedef struct acc_case {
    int V, n_req, K, with_q, ldl, ldq, nrows;
    size_t ldqr;
    float *logits, *q;
    int32_t *k, *draft, *row0;
    int64_t *pos0;
    flint_cuda_sampling *P;
} acc_case;

static void acc_case_free(acc_case *c) {
    free(c->logits);
    free(c->q);
    free(c->k);
    free(c->draft);
    free(c->row0);
    free(c->pos0);
    free(c->P);
}

/* Random requests: rows in shuffled order with gaps, drafts half the target's argmax, half from q
 * (or the draft logits' argmax for greedy drafts), a few arbitrary. */
static void acc_case_make(acc_case *c, int V, int n_req, int with_q, int kfix) {
    static const float temps[] = {0.6f, 1.0f, 1.3f};
    memset(c, 0, sizeof *c);
    c->V = V;
    c->n_req = n_req;
    c->K = 7;
    c->with_q = with_q;
    c->ldl = V + irand(3);
    c->ldq = V + 1;
    c->ldqr = (size_t)c->K * c->ldq + 5;
    c->k = malloc(sizeof(int32_t) * n_req);
    c->row0 = malloc(sizeof(int32_t) * n_req);
    c->pos0 = malloc(sizeof(int64_t) * n_req);
    c->draft = malloc(sizeof(int32_t) * n_req * c->K);
    c->P = malloc(sizeof *c->P * n_req);
    int *order = malloc(sizeof(int) * n_req);
    for (int i = 0; i < n_req; i++) {
        c->k[i] = kfix >= 0 ? kfix : irand(c->K + 1);
        order[i] = i;
    }
    for (int i = n_req - 1; i > 0; i--) {
        int j = irand(i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    int rows = 0;
    for (int a = 0; a < n_req; a++) {
        c->row0[order[a]] = rows;
        rows += c->k[order[a]] + 1 + irand(2);
    }
    c->nrows = rows;
    c->logits = malloc(sizeof(float) * (size_t)rows * c->ldl);
    for (size_t i = 0; i < (size_t)rows * c->ldl; i++) c->logits[i] = 1e30f;
    for (int r = 0; r < rows; r++) gen_logits(c->logits + (size_t)r * c->ldl, V, irand(4) ? K_PEAKED : K_GAUSS);
    c->q = with_q ? malloc(sizeof(float) * c->ldqr * n_req) : NULL;
    if (c->q)
        for (size_t i = 0; i < c->ldqr * n_req; i++) c->q[i] = 1e30f;
    float *dl = malloc(sizeof(float) * V);
    for (int i = 0; i < n_req; i++) {
        flint_cuda_sampling *P = c->P + i;
        gen_params(P, V, K_GAUSS);
        P->temperature = irand(10) < 3 ? 0.0f : temps[irand(3)];
        c->pos0[i] = (int64_t)(rng_next() >> 28);
        const float Td = irand(2) ? 0.7f : 1.0f;
        for (int j = 0; j < c->k[i]; j++) {
            const float *row = c->logits + (size_t)(c->row0[i] + j) * c->ldl;
            for (int v = 0; v < V; v++) dl[v] = row[v] + 0.7f * gauss();
            float *qr = c->q ? c->q + i * c->ldqr + (size_t)j * c->ldq : NULL;
            if (qr) cpu_draft_q(dl, V, Td, qr);
            int x, w = irand(20);
            if (w < 9) x = flint_argmax(row, V);
            else if (w < 18) x = qr ? flint_sample_draft(qr, V, P->seed, c->pos0[i] + j) : flint_argmax(dl, V);
            else x = irand(V);
            c->draft[i * c->K + j] = x;
        }
    }
    free(dl);
    free(order);
}

typedef struct acc_dev {
    dbuf bl, bq, bk, bd, br, bp, bP, bs, bo, bn;
    const float *logits, *q;
    const int32_t *k, *draft, *row0;
    const int64_t *pos0;
    const flint_cuda_sampling *P;
    int32_t *out, *n_acc;
    void *scratch;
} acc_dev;

static void acc_launch(const acc_case *c, acc_dev *d) {
    flint_cuda_accept(d->out, d->n_acc, d->draft, c->K, d->k, d->q, c->ldqr, c->ldq, d->logits, c->ldl, d->row0,
                      d->pos0, d->P, c->n_req, c->V, d->scratch, NULL);
}

static void acc_run(const acc_case *c, acc_dev *d) {
    /* q: request i's rows start at i * ldqr (ldqr may be 0: all share one set) */
    const size_t qn = (size_t)(c->n_req - 1) * c->ldqr + (size_t)c->K * c->ldq;
    d->logits = dput(&d->bl, c->logits, sizeof(float) * (size_t)c->nrows * c->ldl);
    d->q = c->q ? dput(&d->bq, c->q, sizeof(float) * qn) : NULL;
    d->k = dput(&d->bk, c->k, sizeof(int32_t) * c->n_req);
    d->draft = dput(&d->bd, c->draft, sizeof(int32_t) * c->n_req * c->K);
    d->row0 = dput(&d->br, c->row0, sizeof(int32_t) * c->n_req);
    d->pos0 = dput(&d->bp, c->pos0, sizeof(int64_t) * c->n_req);
    d->P = dput(&d->bP, c->P, sizeof *c->P * c->n_req);
    d->scratch = dnew(&d->bs, flint_cuda_sampler_scratch_bytes(c->n_req * (c->K + 1), c->V));
    d->out = dnew(&d->bo, sizeof(int32_t) * c->n_req * (c->K + 1));
    d->n_acc = dnew(&d->bn, sizeof(int32_t) * c->n_req);
    acc_launch(c, d);
    CK(cudaDeviceSynchronize());
}

static void acc_dev_free(acc_dev *d) {
    dfree(&d->bl);
    dfree(&d->bq);
    dfree(&d->bk);
    dfree(&d->bd);
    dfree(&d->br);
    dfree(&d->bp);
    dfree(&d->bP);
    dfree(&d->bs);
    dfree(&d->bo);
    dfree(&d->bn);
}

/* Checks the GPU's out / n_acc against flint_accept_draft, request by request. */
static void acc_check(const acc_case *c, const int32_t *out, const int32_t *nacc, tally *ty, flint_sampler_scratch *sc) {
    const int V = c->V, K = c->K;
    float *rows = malloc(sizeof(float) * (size_t)(K + 1) * V), *qp = malloc(sizeof(float) * (size_t)K * V),
          *p = malloc(sizeof(float) * V);
    int32_t oc[16];
    for (int i = 0; i < c->n_req; i++) {
        const int k = c->k[i];
        const flint_cuda_sampling *P = c->P + i;
        flint_sampling_params sp = to_sp(P);
        for (int j = 0; j <= k; j++) memcpy(rows + (size_t)j * V, c->logits + (size_t)(c->row0[i] + j) * c->ldl, sizeof(float) * V);
        for (int j = 0; j < k && c->q; j++) memcpy(qp + (size_t)j * V, c->q + i * c->ldqr + (size_t)j * c->ldq, sizeof(float) * V);
        const int nc = flint_accept_draft(&sp, k, c->draft + i * K, c->q ? qp : NULL, rows, V, c->pos0[i], sc, oc);
        const int ng = nacc[i];
        const int32_t *og = out + i * (K + 1);
        ty->rows++;
        if (ng < 0 || ng > k || !untouched(og + ng + 1, sizeof(int32_t) * (K - ng))) {
            note("accept V=%d req %d: n_acc %d of k %d, or entries past it written", V, i, ng, k);
            ty->bad++;
            continue;
        }
        int same = ng == nc;
        for (int j = 0; same && j <= nc; j++) same = og[j] == oc[j];
        if (same) {
            ty->bits_same++;
            continue;
        }
        /* where they part: the acceptance test at row min(n), or the emitted token */
        const int j = ng < nc ? ng : nc, x = j < k ? c->draft[i * K + j] : -1;
        int boundary = 0;
        if (P->temperature != 0.0f) {
            if (ng != nc) {
                flint_sampler_probs(&sp, rows + (size_t)j * V, V, p, sc);
                const double u = flint_rng_uniform(P->seed, c->pos0[i] + j, FLINT_RNG_ACCEPT, 0);
                const double lhs = u * (c->q ? qp[(size_t)j * V + x] : 1.0f), rhs = p[x];
                boundary = fabs(lhs - rhs) <= 1e-5 * rhs;
            } else {
                const int rej = j < k;
                cpu_emit_dist(&sp, rows + (size_t)j * V, c->q ? qp + (size_t)j * V : NULL, x, V, rej, p, sc);
                const double u = flint_rng_uniform(P->seed, c->pos0[i] + j, rej ? FLINT_RNG_RESIDUAL : FLINT_RNG_BONUS, 0);
                boundary = token_boundary(p, V, u, og[j], oc[j]);
            }
        }
        if (boundary) {
            if (ng != nc) ty->set_boundary++;
            else ty->tok_boundary++;
            printf("  boundary: accept V=%d req %d: n_acc %d vs cpu %d, token %d vs %d\n", V, i, ng, nc, og[j], oc[j]);
        } else {
            note("accept V=%d req %d (T %g k %d p %g min_p %g seed %llu pos0 %lld, k=%d, q %d): n_acc %d cpu %d, "
                 "token at %d: %d cpu %d",
                 V, i, P->temperature, P->top_k, P->top_p, P->min_p, (unsigned long long)P->seed,
                 (long long)c->pos0[i], k, c->q != NULL, ng, nc, j, og[j], oc[j]);
            ty->bad++;
        }
    }
    free(rows);
    free(qp);
    free(p);
}

static void test_accept(int V, int n_req, int with_q, tally *ty, flint_sampler_scratch *sc) {
    acc_case c;
    acc_dev d;
    memset(&d, 0, sizeof d);
    acc_case_make(&c, V, n_req, with_q, -1);
    acc_run(&c, &d);
    int32_t *out = malloc(sizeof(int32_t) * n_req * (c.K + 1)), *nacc = malloc(sizeof(int32_t) * n_req);
    dget(out, &d.bo);
    dget(nacc, &d.bn);
    CHECKF(dguard_ok(&d.bo) && dguard_ok(&d.bn) && dguard_ok(&d.bs), "accept V=%d: guard bytes overwritten", V);
    acc_check(&c, out, nacc, ty, sc);
    acc_dev_free(&d);
    acc_case_free(&c);
    free(out);
    free(nacc);
}

/* Lossless acceptance by chi-square: 60k requests over one set of rows (V = 24, k = 3), each with
 * its own seed; the first emitted token must follow the processed p of row 0. */
static void test_accept_chisq(int with_q, flint_sampler_scratch *sc) {
    enum { CV = 24, CK3 = 3, N = 60000 };
    float logits[(CK3 + 1) * CV], dlog[CK3 * CV], q[CK3 * CV], p0[CV];
    for (int i = 0; i <= CK3; i++)
        for (int v = 0; v < CV; v++)
            logits[i * CV + v] = (float)(1.5 * sin(0.9 * v + 1.3 * i) + (v == (5 * i + 3) % CV ? 1.5 : 0.0));
    for (int i = 0; i < CK3; i++) {
        for (int v = 0; v < CV; v++) dlog[i * CV + v] = (float)(0.8 * logits[i * CV + v] + 0.7 * cos(2.1 * v + i));
        cpu_draft_q(dlog + i * CV, CV, 1.0f, q + i * CV);
    }
    flint_cuda_sampling base = {1.2f, 0, 0.95f, 0.02f, 0}; /* leaves about 15 tokens */
    flint_sampling_params sp0 = to_sp(&base);
    flint_sampler_probs(&sp0, logits, CV, p0, sc);
    acc_case c;
    memset(&c, 0, sizeof c);
    c.V = CV;
    c.n_req = N;
    c.K = CK3;
    c.with_q = with_q;
    c.ldl = CV;
    c.ldq = CV;
    c.ldqr = 0; /* every request reads the same q rows */
    c.nrows = CK3 + 1;
    c.logits = malloc(sizeof logits);
    memcpy(c.logits, logits, sizeof logits);
    c.q = with_q ? malloc(sizeof q) : NULL;
    if (c.q) memcpy(c.q, q, sizeof q);
    c.k = malloc(sizeof(int32_t) * N);
    c.row0 = calloc(N, sizeof(int32_t));
    c.pos0 = malloc(sizeof(int64_t) * N);
    c.draft = malloc(sizeof(int32_t) * N * CK3);
    c.P = malloc(sizeof *c.P * N);
    for (int i = 0; i < N; i++) {
        c.k[i] = CK3;
        c.P[i] = base;
        c.P[i].seed = rng_next();
        c.pos0[i] = 1000 + i % 17;
        for (int j = 0; j < CK3; j++)
            c.draft[i * CK3 + j] = with_q ? flint_sample_draft(q + j * CV, CV, c.P[i].seed, c.pos0[i] + j)
                                          : flint_argmax(dlog + j * CV, CV);
    }
    acc_dev d;
    memset(&d, 0, sizeof d);
    acc_run(&c, &d);
    int32_t *out = malloc(sizeof(int32_t) * N * (CK3 + 1)), *nacc = malloc(sizeof(int32_t) * N);
    dget(out, &d.bo);
    dget(nacc, &d.bn);
    tally ty;
    memset(&ty, 0, sizeof ty);
    acc_check(&c, out, nacc, &ty, sc);
    tally_verdict(with_q ? "flint_cuda_accept chi-square (q)" : "flint_cuda_accept chi-square (greedy)", &ty);
    long cg[CV] = {0}, cr[CV] = {0}, cx[CV] = {0};
    for (int i = 0; i < N; i++) {
        int t = out[i * (CK3 + 1)];
        if (t >= 0 && t < CV) cg[t]++;
        cx[c.draft[i * CK3]]++;
        cr[flint_sample_from_probs(p0, CV, urand())]++;
    }
    char what[96];
    snprintf(what, sizeof what, "accept chi-square, %s: first token vs p", with_q ? "q" : "greedy drafts");
    CHECKF(!differ(cg, cr, CV, what), "%s: the emitted token does not follow p", what);
    if (with_q) { /* the harness can fail: the drafts' own first token follows q, not p */
        CHECKF(differ(cx, cr, CV, "accept chi-square, broken on purpose: draft x0 vs p (must differ)"),
               "chi-square did not tell q from p");
    }
    acc_dev_free(&d);
    acc_case_free(&c);
    free(out);
    free(nacc);
}

/* ==== 6. Batch invariance ==== */

static void test_batch_invariance(int V) {
    const int R = 64, ld = V + 3;
    float *h = malloc(sizeof(float) * (size_t)R * ld), *pb = malloc(sizeof(float) * (size_t)R * V),
          *p1 = malloc(sizeof(float) * V), *T = malloc(sizeof(float) * R);
    flint_cuda_sampling *P = malloc(sizeof *P * R);
    int32_t tb[64], t1, gr[64];
    int64_t pos[64];
    uint64_t seed[64];
    for (int r = 0; r < R; r++) {
        gen_logits(h + (size_t)r * ld, V, irand(5));
        gen_params(P + r, V, K_GAUSS);
        if (r % 8 == 1) P[r].top_p = 0.95f, P[r].temperature = 1.0f;
        pos[r] = (int64_t)(rng_next() >> 30);
        T[r] = irand(4) ? 1.0f : 0.0f;
        gr[r] = irand(6) == 0;
        seed[r] = rng_next();
    }
    dbuf bl, bP, bpos, bt, bp, b1, bP1, bpos1, bt1, bp1, bT, bg, bs, bT1, bg1, bs1;
    float *dl = dput(&bl, h, sizeof(float) * (size_t)R * ld), *dp = dnew(&bp, sizeof(float) * (size_t)R * V);
    flint_cuda_sampling *dP = dput(&bP, P, sizeof *P * R);
    int64_t *dpos = dput(&bpos, pos, sizeof pos);
    int32_t *dt = dnew(&bt, sizeof tb);
    flint_cuda_sample(dt, dp, V, dl, ld, R, V, dP, NULL, dpos, FLINT_RNG_SAMPLE, NULL, NULL);
    CK(cudaDeviceSynchronize());
    dget(tb, &bt);
    dget(pb, &bp);
    long bad = 0, badd = 0;
    for (int a = 0; a < 8; a++) {
        int r = a * 8 + irand(8);
        float *d1 = dput(&b1, h + (size_t)r * ld, sizeof(float) * V), *dp1 = dnew(&bp1, sizeof(float) * V);
        flint_cuda_sampling *dP1 = dput(&bP1, P + r, sizeof *P);
        int64_t *dpos1 = dput(&bpos1, pos + r, sizeof(int64_t));
        int32_t *dt1 = dnew(&bt1, sizeof(int32_t));
        flint_cuda_sample(dt1, dp1, V, d1, V, 1, V, dP1, NULL, dpos1, FLINT_RNG_SAMPLE, NULL, NULL);
        CK(cudaDeviceSynchronize());
        dget(&t1, &bt1);
        dget(p1, &bp1);
        if (t1 != tb[r] || memcmp(p1, pb + (size_t)r * V, sizeof(float) * V)) {
            note("batch invariance V=%d sample row %d: token %d alone, %d in the batch", V, r, t1, tb[r]);
            bad++;
        }
        dfree(&b1);
        dfree(&bp1);
        dfree(&bP1);
        dfree(&bpos1);
        dfree(&bt1);
    }
    /* drafting: the same rows with the drafter's parameters, q compared too */
    float *dT = dput(&bT, T, sizeof(float) * R);
    int32_t *dg = dput(&bg, gr, sizeof gr);
    uint64_t *ds = dput(&bs, seed, sizeof seed);
    CK(cudaMemset(dp, 0, sizeof(float) * (size_t)R * V));
    flint_cuda_draft_sample(dt, dp, V, dl, ld, R, V, dT, dg, ds, dpos, NULL, NULL);
    CK(cudaDeviceSynchronize());
    dget(tb, &bt);
    dget(pb, &bp);
    for (int a = 0; a < 8; a++) {
        int r = a * 8 + irand(8);
        float *d1 = dput(&b1, h + (size_t)r * ld, sizeof(float) * V), *dp1 = dnew(&bp1, sizeof(float) * V);
        float *dT1 = dput(&bT1, T + r, sizeof(float));
        int32_t *dg1 = dput(&bg1, gr + r, sizeof(int32_t)), *dt1 = dnew(&bt1, sizeof(int32_t));
        uint64_t *ds1 = dput(&bs1, seed + r, sizeof(uint64_t));
        int64_t *dpos1 = dput(&bpos1, pos + r, sizeof(int64_t));
        CK(cudaMemset(dp1, 0, sizeof(float) * V));
        flint_cuda_draft_sample(dt1, dp1, V, d1, V, 1, V, dT1, dg1, ds1, dpos1, NULL, NULL);
        CK(cudaDeviceSynchronize());
        dget(&t1, &bt1);
        dget(p1, &bp1);
        if (t1 != tb[r] || memcmp(p1, pb + (size_t)r * V, sizeof(float) * V)) {
            note("batch invariance V=%d draft row %d: token %d alone, %d in the batch", V, r, t1, tb[r]);
            badd++;
        }
        dfree(&b1);
        dfree(&bp1);
        dfree(&bT1);
        dfree(&bg1);
        dfree(&bs1);
        dfree(&bpos1);
        dfree(&bt1);
    }
    /* acceptance: a request alone (its rows copied to a fresh buffer) vs among 24 */
    acc_case c;
    acc_dev d;
    memset(&d, 0, sizeof d);
    acc_case_make(&c, V, 24, irand(2), -1);
    acc_run(&c, &d);
    int32_t out[24 * 8], nacc[24];
    dget(out, &d.bo);
    dget(nacc, &d.bn);
    long bada = 0;
    for (int a = 0; a < 4; a++) {
        int i = irand(c.n_req);
        acc_case s;
        acc_dev ds1;
        memset(&s, 0, sizeof s);
        memset(&ds1, 0, sizeof ds1);
        s = c;
        s.n_req = 1;
        s.nrows = c.k[i] + 1;
        s.logits = c.logits + (size_t)c.row0[i] * c.ldl;
        int32_t zero = 0;
        s.row0 = &zero;
        s.k = c.k + i;
        s.draft = c.draft + i * c.K;
        s.pos0 = c.pos0 + i;
        s.P = c.P + i;
        s.q = c.q ? c.q + i * c.ldqr : NULL;
        acc_run(&s, &ds1);
        int32_t o1[8], n1;
        dget(o1, &ds1.bo);
        dget(&n1, &ds1.bn);
        if (n1 != nacc[i] || memcmp(o1, out + i * 8, sizeof(int32_t) * (n1 + 1))) {
            note("batch invariance V=%d accept request %d: n_acc %d alone, %d in the batch", V, i, n1, nacc[i]);
            bada++;
        }
        acc_dev_free(&ds1);
    }
    acc_dev_free(&d);
    acc_case_free(&c);
    printf("batch invariance V=%d: %ld sample, %ld draft, %ld accept rows differ alone vs batched\n", V, bad, badd, bada);
    CHECKF(bad == 0 && badd == 0 && bada == 0, "batch invariance V=%d", V);
    dfree(&bl);
    dfree(&bP);
    dfree(&bpos);
    dfree(&bt);
    dfree(&bp);
    dfree(&bT);
    dfree(&bg);
    dfree(&bs);
    free(h);
    free(pb);
    free(p1);
    free(T);
    free(P);
}

/* ==== 7. Timings ==== */

static void lab(void) {
    const int V = VMAX, RM = 512, NR = 64;
    float *h = malloc(sizeof(float) * (size_t)NR * V);
    for (int r = 0; r < NR; r++) gen_logits(h + (size_t)r * V, V, K_PEAKED);
    dbuf bl, bP, bpos, bt, bT, bs, bq;
    float *dl = dnew(&bl, sizeof(float) * (size_t)RM * V);
    for (int r = 0; r < RM; r += NR)
        CK(cudaMemcpy(dl + (size_t)r * V, h, sizeof(float) * (size_t)NR * V, cudaMemcpyHostToDevice));
    flint_cuda_sampling *P = malloc(sizeof *P * RM);
    int64_t *pos = malloc(sizeof(int64_t) * RM);
    float *T = malloc(sizeof(float) * RM);
    uint64_t *seed = malloc(sizeof(uint64_t) * RM);
    for (int r = 0; r < RM; r++) pos[r] = r, T[r] = 1.0f, seed[r] = (uint64_t)r * 7 + 1;
    flint_cuda_sampling *dP = dnew(&bP, sizeof *P * RM);
    int64_t *dpos = dput(&bpos, pos, sizeof(int64_t) * RM);
    int32_t *dt = dnew(&bt, sizeof(int32_t) * RM);
    float *dT = dput(&bT, T, sizeof(float) * RM), *dq = dnew(&bq, sizeof(float) * (size_t)RM * V);
    uint64_t *ds = dput(&bs, seed, sizeof(uint64_t) * RM);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    static const char *names[] = {"greedy", "T=1 top-p 0.95", "T=1 top-k 50 + top-p 0.9", "T=1 min-p 0.05",
                                  "draft T=1 (q out)"};
    static const int rowsv[] = {1, 8, 64, 512};
    printf("lab: one launch, vocabulary %d, peaked rows (microseconds)\n", V);
    printf("%-28s %-6s %9s %9s %9s %9s\n", "case", "exp", "rows 1", "8", "64", "512");
    for (int cs = 0; cs < 5; cs++)
        for (int ex = 1; ex >= 0; ex--) {
            if (cs == 0 && ex == 0) continue; /* greedy takes no exponential */
            int old = flint_cuda_sampler_set_exact_exp(ex);
            for (int r = 0; r < RM; r++) {
                memset(P + r, 0, sizeof *P);
                P[r].temperature = cs == 0 ? 0.0f : 1.0f;
                P[r].top_p = cs == 1 ? 0.95f : cs == 2 ? 0.9f : 1.0f;
                P[r].top_k = cs == 2 ? 50 : 0;
                P[r].min_p = cs == 3 ? 0.05f : 0.0f;
                P[r].seed = (uint64_t)r + 1;
            }
            CK(cudaMemcpy(dP, P, sizeof *P * RM, cudaMemcpyHostToDevice));
            printf("%-28s %-6s", names[cs], cs == 0 ? "-" : ex ? "exact" : "fast");
            for (int a = 0; a < 4; a++) {
                const int rows = rowsv[a], it = 20;
                float ms = 0;
                for (int i = 0; i < it + 3; i++) {
                    if (i == 3) CK(cudaEventRecord(e0, NULL));
                    if (cs == 4) flint_cuda_draft_sample(dt, dq, V, dl, V, rows, V, dT, NULL, ds, dpos, NULL, NULL);
                    else flint_cuda_sample(dt, NULL, V, dl, V, rows, V, dP, NULL, dpos, FLINT_RNG_SAMPLE, NULL, NULL);
                }
                CK(cudaEventRecord(e1, NULL));
                CK(cudaEventSynchronize(e1));
                CK(cudaEventElapsedTime(&ms, e0, e1));
                printf(" %9.1f", 1000.0 * ms / it);
            }
            printf("\n");
            flint_cuda_sampler_set_exact_exp(old);
        }
    /* acceptance: 64 requests x k = 7 drafts, q present, every row sampled with top-p 0.95 */
    {
        acc_case c;
        acc_dev d;
        memset(&d, 0, sizeof d);
        acc_case_make(&c, V, 64, 1, 7);
        for (int i = 0; i < c.n_req; i++) {
            c.P[i].temperature = 1.0f;
            c.P[i].top_k = 0;
            c.P[i].top_p = 0.95f;
            c.P[i].min_p = 0.0f;
        }
        acc_run(&c, &d);
        CK(cudaEventRecord(e0, NULL));
        for (int i = 0; i < 10; i++) acc_launch(&c, &d);
        CK(cudaEventRecord(e1, NULL));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        printf("%-28s %-6s %9.1f  (64 requests x 8 rows)\n", "accept k=7 top-p 0.95", exact_mode ? "exact" : "fast",
               100.0 * ms);
        acc_dev_free(&d);
        acc_case_free(&c);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    dfree(&bl);
    dfree(&bP);
    dfree(&bpos);
    dfree(&bt);
    dfree(&bT);
    dfree(&bs);
    dfree(&bq);
    free(h);
    free(P);
    free(pos);
    free(T);
    free(seed);
}

int main(int argc, char **argv) {
    uint64_t seed = 20240607;
    int do_lab = 1;
    const char *env = getenv("FLINT_SEED");
    if (env) seed = strtoull(env, NULL, 10);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--no-lab")) do_lab = 0;
        else {
            fprintf(stderr, "usage: %s [--seed N] [--no-lab]\n", argv[0]);
            return 2;
        }
    }
    printf("test_sampler_cuda: seed %llu (rerun with --seed %llu)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    rng_s = seed;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        fprintf(stderr, "test_sampler_cuda: no CUDA device\n");
        return 1;
    }
    flint_sampler_scratch sc;
    flint_sampler_scratch_init(&sc, VMAX);

    exact_mode = 1;
    flint_cuda_sampler_set_exact_exp(1);
    test_philox();
    test_draft_rows();
    test_exp();
    suite_sample(&sc, 0);
    {
        static const int vs[] = {1, 5, 1000, 32000, 151936};
        tally ty;
        memset(&ty, 0, sizeof ty);
        for (int a = 0; a < 5; a++)
            for (int rep = 0; rep < 3; rep++) test_draft(vs[a], vs[a] > 100000 ? 8 : 24, &ty);
        tally_verdict("flint_cuda_draft_sample", &ty);
    }
    {
        static const int vs[] = {1, 2, 50, 1000, 32000, 151936};
        tally ty;
        memset(&ty, 0, sizeof ty);
        for (int a = 0; a < 6; a++)
            for (int with_q = 0; with_q < 2; with_q++)
                test_accept(vs[a], vs[a] > 100000 ? 6 : vs[a] > 10000 ? 12 : 33, with_q, &ty, &sc);
        tally_verdict("flint_cuda_accept", &ty);
    }
    test_accept_chisq(1, &sc);
    test_accept_chisq(0, &sc);
    test_batch_invariance(1000);
    test_batch_invariance(40000);
    test_batch_invariance(VMAX);

    /* the fast exponential: same suites on fewer rows, wider boundaries */
    exact_mode = 0;
    flint_cuda_sampler_set_exact_exp(0);
    test_exp();
    suite_sample(&sc, 1);
    {
        tally ty;
        memset(&ty, 0, sizeof ty);
        test_draft(1000, 24, &ty);
        test_draft(VMAX, 8, &ty);
        tally_verdict("flint_cuda_draft_sample", &ty);
    }
    {
        tally ty;
        memset(&ty, 0, sizeof ty);
        test_accept(1000, 33, 1, &ty, &sc);
        test_accept(VMAX, 6, 1, &ty, &sc);
        tally_verdict("flint_cuda_accept", &ty);
    }
    test_batch_invariance(VMAX);
    exact_mode = 1;
    flint_cuda_sampler_set_exact_exp(1);

    if (do_lab) lab();
    flint_sampler_scratch_free(&sc);
    if (notes > 40) fprintf(stderr, "(%d failure notes, the first 40 shown)\n", notes);
    return test_report("test_sampler_cuda");
}
