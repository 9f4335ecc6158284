/* Helpers of the CUDA kernel tests and labs (test_cuda_ops.c, lab_cuda_ops.c), split from
 * test_cuda_ops.c: random inputs drawn from one seeded stream, and device buffers with guard bytes.
 * (The table rows stay in test_cuda_ops.c: test.h's pass/fail counters are per file.) */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "target/ops_cuda.h" /* bf16 helpers, the packer */
#include "cuda_check.h"
#include "kernels/cuda_test_util.h"

/* ==== Random inputs ==== */

static uint64_t rng_s;

void test_rng_seed(uint64_t seed) { rng_s = seed; }

static uint64_t rng_next(void) { /* splitmix64 */
    uint64_t z = (rng_s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float urand(float lo, float hi) { return lo + (hi - lo) * (float)((double)(rng_next() >> 40) / 16777216.0); }
int irand(int n) { return (int)(rng_next() % (uint64_t)n); }

/* n bf16 values uniform in [lo, hi); f (optional) gets the same values as fp32. */
void rand_bf16(uint16_t *h, float *f, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) {
        h[i] = flint_bf16_from_f32(urand(lo, hi));
        if (f) f[i] = flint_bf16_to_f32(h[i]);
    }
}
void rand_f32(float *f, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) f[i] = urand(lo, hi);
}
void shuffle(int *a, int n) {
    for (int i = n - 1; i > 0; i--) {
        int j = irand(i + 1), t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of host memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}

/* ==== Device buffers with guards ==== */

static size_t guard = GUARD_MAX; /* 0 with --quick */

void dbuf_guard_set(size_t bytes) { guard = bytes < GUARD_MAX ? bytes : GUARD_MAX; }

dbuf dnew(size_t bytes) {
    dbuf b;
    b.bytes = bytes;
    CK(cudaMalloc((void **)&b.base, bytes + 2 * guard));
    CK(cudaMemset(b.base, 0xFF, bytes + 2 * guard));
    b.p = b.base + guard;
    return b;
}
dbuf dnew_up(const void *h, size_t bytes) {
    dbuf b = dnew(bytes);
    CK(cudaMemcpy(b.p, h, bytes, cudaMemcpyHostToDevice));
    return b;
}
void dfree(dbuf *b) { CK(cudaFree(b->base)); }
/* A row-major bf16 W [N][K] on the device, packed as the tensor-core GEMM reads it (ops_cuda.h). */
dbuf dpack(const dbuf *w, int N, int K) {
    dbuf b = dnew(sizeof(uint16_t) * flint_cuda_gemm_packed_elems(N, K));
    flint_cuda_gemm_pack(b.p, w->p, N, K, NULL);
    return b;
}
void down(void *h, const dbuf *b) {
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, b->p, b->bytes, cudaMemcpyDeviceToHost));
}
int guards_ok(const dbuf *b) {
    unsigned char g[2 * GUARD_MAX];
    CK(cudaDeviceSynchronize());
    if (guard == 0) return 1;
    CK(cudaMemcpy(g, b->base, guard, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(g + guard, b->base + guard + b->bytes, guard, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < 2 * guard; i++)
        if (g[i] != 0xFF) return 0;
    return 1;
}
/* Gap columns [n, ld) of rows of elem-byte elements still 0xFF. */
int gaps_ok(const void *h, int rows, int n, int ld, int elem) {
    const unsigned char *p = (const unsigned char *)h;
    for (int r = 0; r < rows; r++)
        for (size_t i = (size_t)r * ld * elem + (size_t)n * elem; i < (size_t)(r + 1) * ld * elem; i++)
            if (p[i] != 0xFF) return 0;
    return 1;
}
