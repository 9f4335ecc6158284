/* CPU kernels of the fp32 reference forward (also usable by the drafter's CPU path). Every output
 * element is reduced in one fixed order: the result for a row never depends on how many rows
 * are computed with it, where it sits in the batch, or on the thread count. That is what makes
 * speculative verification on CPU exactly equal to plain decoding. */
#ifndef FLINT_TARGET_OPS_CPU_H
#define FLINT_TARGET_OPS_CPU_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* sum a[i] * b[i] in flint's fixed order: 8 lanes (i mod 8) over the multiple-of-8 prefix,
 * combined pairwise, then the tail added in index order. */
float flint_ops_dot(const float *a, const float *b, int n);

/* y[i] = y[i] + a * x[i] for i < n: elementwise (a rounded product, then a rounded sum), so any
 * vector width gives the bits of the plain loop; the attention's P V accumulation. */
void flint_ops_axpy(float *y, float a, const float *x, int n);

/* Tests and benchmarks: 0 runs the portable (4-wide) kernels, 1 the 8-wide AVX ones where the CPU
 * has AVX (chosen by default); both give the same bits. Returns the previous choice. */
int flint_ops_set_avx(int on);

/* y[r * ldy + o] (+)= dot(x + r * ldx, w + o * n_in, n_in) for r < n_rows, o < n_out.
 * accumulate: add to y (a residual add) instead of storing. Threads split the outputs. */
/* x[R][H] += in[R][n_in] . w[H][n_in]^T for a projection whose input features are split over
 * tensor-parallel ranks (o_proj over heads, down_proj over intermediate rows): each rank's partial
 * product goes to part[R][H], is summed over the ranks in rank order by tp->all_reduce, then added
 * to x. tp NULL: straight into x. With one rank both give the same bits (matmul adds the finished
 * dot product to y). Returns -1 when the all-reduce failed. */
struct flint_tp_comm;
int flint_ops_row_parallel(float *x, float *part, const float *in, int n_in, const float *w, int R, int H,
                           const struct flint_tp_comm *tp, int n_threads);

void flint_ops_matmul(float *y, int ldy, const float *x, int ldx, const float *w, int n_rows, int n_in,
                      int n_out, int accumulate, int n_threads);

/* The index of the first v[i] (i < n) outside 0..limit-1, or -1 (also for n <= 0): the block-table
 * checks of the target's and the drafter's batch validation, which run every step over every
 * sequence's context (16 entries a loop step, then the plain loop from the first 16 holding one). */
int flint_ops_first_bad_id(const int32_t *v, int n, int32_t limit);

/* y = x * 1/sqrt(mean(x^2) + eps) * w; y may equal x. */
void flint_ops_rmsnorm(float *y, const float *x, const float *w, int n, float eps);

/* NeoX (rotate_half) RoPE on one head in place: pairs (i, i + head_dim / 2). */
void flint_ops_rope(float *x, int head_dim, const float *cos, const float *sin);

/* out[i] = silu(gate[i]) * up[i]. */
void flint_ops_swiglu(float *out, const float *gate, const float *up, int n);

/* cos/sin tables [n_pos][head_dim / 2], computed as Hugging Face does (fp32 inverse frequencies,
 * fp32 angle = pos * inv_freq). */
void flint_ops_rope_table(float *cos, float *sin, int n_pos, int head_dim, float theta);

#ifdef __cplusplus
}
#endif
#endif
