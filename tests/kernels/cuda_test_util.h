/* Helpers of the CUDA kernel tests and labs (cuda_test_util.c): random inputs from one seeded
 * stream (fresh each run unless the seed is fixed), a checked malloc, and device buffers with
 * 0xFF guard bytes around them (0xFF.. is NaN as fp32 and bf16, so an unwritten output shows). */
#ifndef FLINT_TESTS_CUDA_TEST_UTIL_H
#define FLINT_TESTS_CUDA_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

void test_rng_seed(uint64_t seed);
int irand(int n); /* uniform in 0..n-1 */
/* n bf16 values uniform in [lo, hi); f (optional) gets the same values as fp32 */
void rand_bf16(uint16_t *h, float *f, size_t n, float lo, float hi);
void rand_f32(float *f, size_t n, float lo, float hi);
void shuffle(int *a, int n);
void *xmalloc(size_t n);

#define GUARD_MAX 256
typedef struct {
    unsigned char *base;
    void *p; /* base + guard */
    size_t bytes;
} dbuf;
void dbuf_guard_set(size_t bytes); /* guard bytes of later buffers: GUARD_MAX, or 0 (--quick: memcheck) */
dbuf dnew(size_t bytes);           /* filled with 0xFF */
dbuf dnew_up(const void *h, size_t bytes);
void dfree(dbuf *b);
dbuf dpack(const dbuf *w, int N, int K); /* a row-major bf16 W [N][K], packed for the tensor-core GEMM */
void down(void *h, const dbuf *b);       /* after a device sync */
int guards_ok(const dbuf *b);
int gaps_ok(const void *h, int rows, int n, int ld, int elem); /* gap columns [n, ld) still 0xFF */

#endif
