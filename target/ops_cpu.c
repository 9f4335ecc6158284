/* CPU kernels (see ops_cpu.h). The dot product is written with GCC/Clang vector types of 4 floats,
 * two accumulators = 8 lanes: plain -O2 then gives SSE on any x86-64 (NEON on arm64) with the
 * accumulators in registers, which gcc's auto-vectorizer did not manage for the multi-row tile.
 * Every kernel below performs, for each (row, output) pair, exactly the same sequence of IEEE
 * operations as flint_ops_dot: lane k sums elements i = k (mod 8) in index order, lanes k and
 * k + 4 are added, then ((0 + 1) + (2 + 3)), then the tail in index order. Tiles only change which
 * loads are shared, never that sequence; so results are batch- and thread-invariant as long as
 * the compiler does not contract a * b + c into an FMA differently in different kernels. ISO C
 * mode (-std=c11, CMAKE_C_EXTENSIONS OFF) makes gcc default to -ffp-contract=off; for clang we
 * say so explicitly. */
#include "target/ops_cpu.h"
#include "target/target.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

typedef float v4f __attribute__((vector_size(16)));

static inline v4f ld4(const float *p) {
    v4f v;
    memcpy(&v, p, sizeof v); /* unaligned load */
    return v;
}

static inline float finish(v4f lo, v4f hi, const float *a, const float *b, int i, int n) {
    v4f s = lo + hi;
    float r = (s[0] + s[1]) + (s[2] + s[3]);
    for (; i < n; i++) r += a[i] * b[i];
    return r;
}

/* ==== x86-64 with AVX: the same kernels on 8-wide vectors ====
 * One 8-lane accumulator where the portable kernels keep two of 4 (lo, hi): lane k still sums the
 * elements i = k (mod 8) of the multiple-of-8 prefix in index order, and finish8 hands lanes 0-3
 * and 4-7 to finish as lo and hi. Same operations, same bits (test_target compares the two paths
 * over tails and row counts); the 8-row products of a verify step, compute-bound on the CPU, run
 * about 1.6x faster. Chosen once, at the first call, from what the CPU supports. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define OPS_AVX 1
typedef float v8f __attribute__((vector_size(32)));
#define AVX __attribute__((target("avx")))

AVX static inline v8f ld8(const float *p) {
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}

AVX static inline float finish8(v8f s, const float *a, const float *b, int i, int n) {
    const v4f lo = {s[0], s[1], s[2], s[3]}, hi = {s[4], s[5], s[6], s[7]};
    return finish(lo, hi, a, b, i, n);
}

AVX static float dot_avx(const float *restrict a, const float *restrict b, int n) {
    v8f acc = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8) acc += ld8(a + i) * ld8(b + i);
    return finish8(acc, a, b, i, n);
}

AVX static void dot_4x1_avx(float out[4], const float *restrict x, int ldx, const float *restrict w, int n) {
    const float *x0 = x, *x1 = x + ldx, *x2 = x + 2 * (size_t)ldx, *x3 = x + 3 * (size_t)ldx;
    v8f a0 = {0, 0, 0, 0, 0, 0, 0, 0}, a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const v8f wv = ld8(w + i);
        a0 += ld8(x0 + i) * wv;
        a1 += ld8(x1 + i) * wv;
        a2 += ld8(x2 + i) * wv;
        a3 += ld8(x3 + i) * wv;
    }
    out[0] = finish8(a0, x0, w, i, n);
    out[1] = finish8(a1, x1, w, i, n);
    out[2] = finish8(a2, x2, w, i, n);
    out[3] = finish8(a3, x3, w, i, n);
}

AVX static void dot_1x4_avx(float out[4], const float *restrict x, const float *restrict w, int n) {
    const float *w0 = w, *w1 = w + n, *w2 = w + 2 * (size_t)n, *w3 = w + 3 * (size_t)n;
    v8f a0 = {0, 0, 0, 0, 0, 0, 0, 0}, a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const v8f xv = ld8(x + i);
        a0 += xv * ld8(w0 + i);
        a1 += xv * ld8(w1 + i);
        a2 += xv * ld8(w2 + i);
        a3 += xv * ld8(w3 + i);
    }
    out[0] = finish8(a0, x, w0, i, n);
    out[1] = finish8(a1, x, w1, i, n);
    out[2] = finish8(a2, x, w2, i, n);
    out[3] = finish8(a3, x, w3, i, n);
}
AVX static void axpy_avx(float *restrict y, float a, const float *restrict x, int n) {
    const v8f av = {a, a, a, a, a, a, a, a};
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        v8f yv = ld8(y + i);
        yv += av * ld8(x + i);
        memcpy(y + i, &yv, sizeof yv);
    }
    for (; i < n; i++) y[i] += a * x[i];
}
#undef AVX
#endif

/* -1: not decided yet; 0: the portable kernels; 1: AVX. A benign race: every thread that decides
 * writes the same value. */
static int g_avx = -1;

static int use_avx(void) {
    if (g_avx < 0) {
#ifdef OPS_AVX
        g_avx = __builtin_cpu_supports("avx") ? 1 : 0;
#else
        g_avx = 0;
#endif
    }
    return g_avx;
}

int flint_ops_first_bad_id(const int32_t *v, int n, int32_t limit) {
    typedef uint32_t v4u __attribute__((vector_size(16)));
    const uint32_t lim = (uint32_t)limit; /* a negative id is a huge unsigned one: one compare each */
    const v4u L = {lim, lim, lim, lim};
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        v4u a, b, c, d;
        memcpy(&a, v + i, sizeof a);
        memcpy(&b, v + i + 4, sizeof b);
        memcpy(&c, v + i + 8, sizeof c);
        memcpy(&d, v + i + 12, sizeof d);
        const v4u bad = (v4u)((a >= L) | (b >= L) | (c >= L) | (d >= L));
        if (bad[0] | bad[1] | bad[2] | bad[3]) break;
    }
    for (; i < n; i++)
        if ((uint32_t)v[i] >= lim) return i;
    return -1;
}

int flint_ops_set_avx(int on) {
    const int prev = use_avx();
#ifdef OPS_AVX
    g_avx = on && __builtin_cpu_supports("avx") ? 1 : 0;
#else
    (void)on;
    g_avx = 0;
#endif
    return prev;
}

static float dot_portable(const float *restrict a, const float *restrict b, int n) {
    v4f lo = {0, 0, 0, 0}, hi = {0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        lo += ld4(a + i) * ld4(b + i);
        hi += ld4(a + i + 4) * ld4(b + i + 4);
    }
    return finish(lo, hi, a, b, i, n);
}

float flint_ops_dot(const float *restrict a, const float *restrict b, int n) {
#ifdef OPS_AVX
    if (use_avx()) return dot_avx(a, b, n);
#endif
    return dot_portable(a, b, n);
}

void flint_ops_axpy(float *restrict y, float a, const float *restrict x, int n) {
#ifdef OPS_AVX
    if (use_avx()) {
        axpy_avx(y, a, x, n);
        return;
    }
#endif
    const v4f av = {a, a, a, a};
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        v4f yv = ld4(y + i);
        yv += av * ld4(x + i);
        memcpy(y + i, &yv, sizeof yv);
    }
    for (; i < n; i++) y[i] += a * x[i];
}

/* Four rows against one weight row: the weight loads are shared. */
static void dot_4x1(float out[4], const float *restrict x, int ldx, const float *restrict w, int n) {
    const float *x0 = x, *x1 = x + ldx, *x2 = x + 2 * (size_t)ldx, *x3 = x + 3 * (size_t)ldx;
    v4f a0 = {0, 0, 0, 0}, b0 = a0, a1 = a0, b1 = a0, a2 = a0, b2 = a0, a3 = a0, b3 = a0;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        v4f wl = ld4(w + i), wh = ld4(w + i + 4);
        a0 += ld4(x0 + i) * wl;
        b0 += ld4(x0 + i + 4) * wh;
        a1 += ld4(x1 + i) * wl;
        b1 += ld4(x1 + i + 4) * wh;
        a2 += ld4(x2 + i) * wl;
        b2 += ld4(x2 + i + 4) * wh;
        a3 += ld4(x3 + i) * wl;
        b3 += ld4(x3 + i + 4) * wh;
    }
    out[0] = finish(a0, b0, x0, w, i, n);
    out[1] = finish(a1, b1, x1, w, i, n);
    out[2] = finish(a2, b2, x2, w, i, n);
    out[3] = finish(a3, b3, x3, w, i, n);
}

/* One row against four weight rows: eight independent chains hide the add latency in decode. */
static void dot_1x4(float out[4], const float *restrict x, const float *restrict w, int n) {
    const float *w0 = w, *w1 = w + n, *w2 = w + 2 * (size_t)n, *w3 = w + 3 * (size_t)n;
    v4f a0 = {0, 0, 0, 0}, b0 = a0, a1 = a0, b1 = a0, a2 = a0, b2 = a0, a3 = a0, b3 = a0;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        v4f xl = ld4(x + i), xh = ld4(x + i + 4);
        a0 += xl * ld4(w0 + i);
        b0 += xh * ld4(w0 + i + 4);
        a1 += xl * ld4(w1 + i);
        b1 += xh * ld4(w1 + i + 4);
        a2 += xl * ld4(w2 + i);
        b2 += xh * ld4(w2 + i + 4);
        a3 += xl * ld4(w3 + i);
        b3 += xh * ld4(w3 + i + 4);
    }
    out[0] = finish(a0, b0, x, w0, i, n);
    out[1] = finish(a1, b1, x, w1, i, n);
    out[2] = finish(a2, b2, x, w2, i, n);
    out[3] = finish(a3, b3, x, w3, i, n);
}

static inline void put(float *y, float v, int accumulate) { *y = accumulate ? *y + v : v; }

#define OUT_BLOCK 16 /* outputs per task: 16 weight rows stay in L1/L2 while the rows stream past */
#define ROW_BLOCK 32 /* rows per pass over a weight block, so those rows stay in L2 */

void flint_ops_matmul(float *y, int ldy, const float *x, int ldx, const float *w, int n_rows, int n_in,
                      int n_out, int accumulate, int n_threads) {
    int n_blk = (n_out + OUT_BLOCK - 1) / OUT_BLOCK;
    /* small products are not worth waking threads for (results do not depend on it) */
    double work = (double)n_rows * n_in * n_out;
    int nt = work < 65536.0 ? 1 : n_threads;
    void (*d4x1)(float *, const float *, int, const float *, int) = dot_4x1;
    void (*d1x4)(float *, const float *, const float *, int) = dot_1x4;
#ifdef OPS_AVX
    if (use_avx()) d4x1 = dot_4x1_avx, d1x4 = dot_1x4_avx;
#endif
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int b = 0; b < n_blk; b++) {
        int o0 = b * OUT_BLOCK, o1 = o0 + OUT_BLOCK < n_out ? o0 + OUT_BLOCK : n_out;
        float v[4];
        for (int r0 = 0; r0 < n_rows; r0 += ROW_BLOCK) {
            int r1 = r0 + ROW_BLOCK < n_rows ? r0 + ROW_BLOCK : n_rows;
            int r = r0;
            for (; r + 4 <= r1; r += 4) {
                for (int o = o0; o < o1; o++) {
                    d4x1(v, x + (size_t)r * ldx, ldx, w + (size_t)o * n_in, n_in);
                    for (int k = 0; k < 4; k++) put(y + (size_t)(r + k) * ldy + o, v[k], accumulate);
                }
            }
            for (; r < r1; r++) {
                const float *xr = x + (size_t)r * ldx;
                float *yr = y + (size_t)r * ldy;
                int o = o0;
                for (; o + 4 <= o1; o += 4) {
                    d1x4(v, xr, w + (size_t)o * n_in, n_in);
                    for (int k = 0; k < 4; k++) put(yr + o + k, v[k], accumulate);
                }
                for (; o < o1; o++) put(yr + o, flint_ops_dot(xr, w + (size_t)o * n_in, n_in), accumulate);
            }
        }
    }
}

void flint_ops_rmsnorm(float *y, const float *x, const float *w, int n, float eps) {
    float ss = flint_ops_dot(x, x, n);
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++) y[i] = (x[i] * inv) * w[i];
}

void flint_ops_rope(float *x, int head_dim, const float *cos, const float *sin) {
    int half = head_dim / 2;
    for (int i = 0; i < half; i++) {
        float x1 = x[i], x2 = x[i + half];
        x[i] = x1 * cos[i] - x2 * sin[i];
        x[i + half] = x2 * cos[i] + x1 * sin[i];
    }
}

void flint_ops_swiglu(float *out, const float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void flint_ops_rope_table(float *cos_t, float *sin_t, int n_pos, int head_dim, float theta) {
    int half = head_dim / 2;
    for (int i = 0; i < half; i++) {
        /* HF: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all in fp32 */
        float e = (float)(2 * i) / (float)head_dim;
        float inv = 1.0f / powf(theta, e);
        for (int p = 0; p < n_pos; p++) {
            float a = (float)p * inv; /* HF: position_ids.float() * inv_freq, fp32 */
            cos_t[(size_t)p * half + i] = (float)cos((double)a);
            sin_t[(size_t)p * half + i] = (float)sin((double)a);
        }
    }
}

int flint_ops_row_parallel(float *x, float *part, const float *in, int n_in, const float *w, int R, int H,
                           const flint_tp_comm *tp, int n_threads) {
    if (!tp) {
        flint_ops_matmul(x, H, in, n_in, w, R, n_in, H, 1, n_threads);
        return 0;
    }
    flint_ops_matmul(part, H, in, n_in, w, R, n_in, H, 0, n_threads);
    if (tp->all_reduce(tp->ctx, part, (size_t)R * H)) return -1;
    for (size_t i = 0; i < (size_t)R * H; i++) x[i] += part[i];
    return 0;
}
