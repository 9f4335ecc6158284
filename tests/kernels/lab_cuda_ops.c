/* The CUDA kernel labs: the tensor-core GEMM's tilings and the attention at qwen3-8b's shapes,
 * timed against the HBM floor (llm.c's dev/cuda habit: reference and checks in test_cuda_ops.c,
 * timings here). Split from test_cuda_ops.c (session 17) to keep both under ~1500 lines. */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "target/ops_cuda.h"
#include "cuda_check.h"
#include "kernels/lab_cuda_ops.h"

/* ==== Labs: timings, not assertions ==== */

/* Weights rotate over copies that together exceed the L2 several times, so every launch reads
 * its weights from HBM. Bytes = weights + x + y; the floor is bytes / 4.3 TB/s (the copy rate
 * measured on this H200, research/perf.md). Kernels: the CUDA-core GEMM (row-major W), then every
 * tiling of the tensor-core GEMM (variant -1 = flint_cuda_gemm, 0.. = flint_cuda_gemm_tc_variant,
 * packed W); the shapes are qwen3-8b's projections (qkv, o, gate|up, down) and a 4096-square
 * reference. */
static double time_gemm(int variant, float *y, const uint16_t *x, const unsigned char *w, size_t wbytes, int copies,
                        int M, int N, int K) {
    const int reps = 20;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < reps + 3; i++) {
        if (i == 3) CK(cudaEventRecord(e0, NULL));
        const uint16_t *wi = (const uint16_t *)(w + (i % copies) * wbytes);
        if (variant == -2) flint_cuda_gemm_tc(y, N, x, K, wi, M, N, K, 0, NULL); /* the dispatch */
        else if (variant < 0) flint_cuda_gemm(y, N, x, K, wi, M, N, K, 0, NULL);
        else flint_cuda_gemm_tc_variant(y, N, x, K, wi, M, N, K, 0, variant, NULL);
    }
    CK(cudaEventRecord(e1, NULL));
    CK(cudaEventSynchronize(e1));
    float ms_total = 0;
    CK(cudaEventElapsedTime(&ms_total, e0, e1));
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return 1000.0 * ms_total / reps;
}

/* Rotating copies of one random W [N][K]: row-major (raw) and packed; *copies of each; and a
 * random x of m_max rows with room for y. */
typedef struct lab_w {
    unsigned char *raw, *packed;
    size_t raw_bytes, packed_bytes;
    int copies;
    uint16_t *x;
    float *y;
} lab_w;

static lab_w lab_w_make(int N, int K, int m_max) {
    lab_w l;
    uint16_t *xh = xmalloc(sizeof(uint16_t) * m_max * K);
    rand_bf16(xh, NULL, (size_t)m_max * K, -1, 1);
    CK(cudaMalloc((void **)&l.x, sizeof(uint16_t) * m_max * K));
    CK(cudaMalloc((void **)&l.y, sizeof(float) * m_max * N));
    CK(cudaMemcpy(l.x, xh, sizeof(uint16_t) * m_max * K, cudaMemcpyHostToDevice));
    free(xh);
    l.raw_bytes = (size_t)N * K * 2;
    l.packed_bytes = flint_cuda_gemm_packed_elems(N, K) * 2;
    l.copies = (int)((1024u << 20) / l.packed_bytes);
    if (l.copies < 3) l.copies = 3;
    uint16_t *wh = xmalloc(l.raw_bytes);
    rand_bf16(wh, NULL, (size_t)N * K, -1, 1);
    CK(cudaMalloc((void **)&l.raw, l.raw_bytes * l.copies));
    CK(cudaMalloc((void **)&l.packed, l.packed_bytes * l.copies));
    for (int c = 0; c < l.copies; c++) {
        CK(cudaMemcpy(l.raw + c * l.raw_bytes, wh, l.raw_bytes, cudaMemcpyHostToDevice));
        flint_cuda_gemm_pack((uint16_t *)(l.packed + c * l.packed_bytes), (const uint16_t *)(l.raw + c * l.raw_bytes),
                             N, K, NULL);
    }
    CK(cudaDeviceSynchronize());
    free(wh);
    return l;
}

static void lab_w_free(lab_w *l) {
    CK(cudaFree(l->raw));
    CK(cudaFree(l->packed));
    CK(cudaFree(l->x));
    CK(cudaFree(l->y));
}

void lab_gemm(void) {
    const int shapes[][2] = {{4096, 4096}, {6144, 4096}, {24576, 4096}, {4096, 12288}};
    const int ms[] = {1, 8, 16, 32, 64, 128, 256, 512};
    const int n_var = flint_cuda_gemm_tc_variants();
    printf("\ngemm lab: y[M,N] = x[M,K] W[N,K]^T, bf16 in, fp32 out; weights rotate over copies > L2\n");
    printf("%-16s %5s %6s %6s %10s %7s %8s %8s\n", "kernel", "M", "N", "K", "us/launch", "TB/s", "TFLOP/s",
           "x floor");
    for (int s = 0; s < 4; s++) {
        const int N = shapes[s][0], K = shapes[s][1];
        lab_w lw = lab_w_make(N, K, 512);
        uint16_t *x = lw.x;
        float *y = lw.y;
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
            const int M = ms[mi];
            for (int v = -1; v < n_var; v++) {
                if (v < 0 && M > 8) continue; /* the CUDA-core kernel: only the small-M reference point */
                const char *name = v < 0 ? "cuda-core" : flint_cuda_gemm_tc_variant(NULL, 0, NULL, 0, NULL, 0, 0, 0,
                                                                                     0, v, NULL);
                double us = v < 0 ? time_gemm(v, y, x, lw.raw, lw.raw_bytes, lw.copies, M, N, K)
                                  : time_gemm(v, y, x, lw.packed, lw.packed_bytes, lw.copies, M, N, K);
                double bytes = (double)lw.raw_bytes + (double)M * K * 2 + (double)M * N * 4;
                double flops = 2.0 * M * N * K;
                printf("%-16s %5d %6d %6d %10.1f %7.2f %8.1f %8.2f\n", name, M, N, K, us, bytes / us * 1e-6,
                       flops / us * 1e-6, us / (bytes / 4.3e6));
            }
        }
        lab_w_free(&lw);
    }
}

/* The small-M GEMM's programmatic dependent launch (flint_cuda_gemm_configure: each launch may
 * start during the previous one's tail) on the variants flint_cuda_gemm_tc picks at M = 1, 8, 16
 * and 32, over the same rotating (packed) weights. */
void lab_gemm_small(void) {
    const int shapes[][2] = {{4096, 4096}, {6144, 4096}, {24576, 4096}, {4096, 12288}};
    const int ms[] = {1, 8, 16, 32};
    printf("\ngemm small-M lab: the register path, packed weights, programmatic dependent launch off / on\n");
    printf("%5s %6s %6s %4s %10s %7s %8s\n", "M", "N", "K", "pdl", "us/launch", "TB/s", "x floor");
    for (int s = 0; s < 4; s++) {
        const int N = shapes[s][0], K = shapes[s][1];
        lab_w lw = lab_w_make(N, K, 32);
        for (int mi = 0; mi < 4; mi++)
            for (int pdl = 0; pdl < 2; pdl++) {
                const int M = ms[mi], v = M <= 8 ? 0 : M <= 16 ? 1 : 2;
                flint_cuda_gemm_configure(pdl, -1, -1);
                double us = time_gemm(v, lw.y, lw.x, lw.packed, lw.packed_bytes, lw.copies, M, N, K);
                double bytes = (double)lw.raw_bytes + (double)M * K * 2 + (double)M * N * 4;
                printf("%5d %6d %6d %4d %10.1f %7.2f %8.2f\n", M, N, K, pdl, us, bytes / us * 1e-6,
                       us / (bytes / 4.3e6));
            }
        lab_w_free(&lw);
    }
    flint_cuda_gemm_configure(1, 1, -1); /* the default */
}

/* us per launch of a->n_rows rows after 3 warm-up launches, the launches rotating over `sets`
 * row-to-sequence maps (dseq + set * n_rows) so that a small batch's K/V is not still in L2. */
static double time_attention(flint_cuda_attn *a, const int32_t *dseq, int sets, int reps, cudaEvent_t e0,
                             cudaEvent_t e1) {
    for (int i = 0; i < 3; i++) {
        a->row_seq = dseq + (size_t)(i % sets) * a->n_rows;
        flint_cuda_attention(a, NULL);
    }
    CK(cudaEventRecord(e0, NULL));
    for (int i = 0; i < reps; i++) {
        a->row_seq = dseq + (size_t)(i % sets) * a->n_rows;
        flint_cuda_attention(a, NULL);
    }
    CK(cudaEventRecord(e1, NULL));
    CK(cudaEventSynchronize(e1));
    float ms_total = 0;
    CK(cudaEventElapsedTime(&ms_total, e0, e1));
    return 1000.0 * ms_total / reps;
}

/* Attention at qwen3-8b's shape (32 q heads, 8 KV heads, d 128, paged blocks of 16 at shuffled
 * places), one layer: batch x q rows at contexts 1024, 1032 and 4096 (decode q = 1; verify q = 8,
 * the 8 rows consecutive in one sequence, the last at ctx - 1; 1032 is what `flint bench
 * --context 1024` verifies, a ninth chunk of 8 positions), then a prefill run of one sequence. The
 * floor counts the K/V of the batch once (each sequence's K + V, bf16) at 4.3 TB/s; launches rotate
 * over the 64 sequences so that a small batch's K/V is not still in L2 (batch 64 at 1024 is 268 MB). */
void lab_attention(void) {
    const int n_heads = 32, n_kv = 8, hd = 128, bs = 16, reps = 20, max_b = 64, max_ctx = 4096, max_rows = 512;
    const int ctxs[] = {1024, 1032, 4096}, batches[] = {1, 8, 32, 64}, qs[] = {1, 8}, prefills[] = {1024, 4096};
    printf("\nattention lab: qwen3-8b layer (32/8 heads, d 128), paged bs %d; floor = K+V bytes / 4.3 TB/s\n", bs);
    printf("%-8s %6s %4s %6s %6s %11s %8s %8s %11s\n", "case", "batch", "q", "rows", "ctx", "us/layer", "GB/s", "x floor",
           "no hint us");
    const int bt_stride = max_ctx / bs, n_blocks = max_b * bt_stride;
    const size_t n = (size_t)n_blocks * bs * n_kv * hd;
    int32_t *bt = xmalloc(sizeof(int32_t) * n_blocks);
    for (int i = 0; i < n_blocks; i++) bt[i] = i;
    shuffle(bt, n_blocks);
    uint16_t *kvh = xmalloc(sizeof(uint16_t) * n);
    const size_t n_rand = (size_t)1 << 20; /* the values do not change the timing: one random MB, repeated */
    rand_bf16(kvh, NULL, n_rand, -1, 1);
    for (size_t i = n_rand; i < n; i++) kvh[i] = kvh[i % n_rand];
    const int q_rows = max_ctx > max_rows ? max_ctx : max_rows; /* the prefill run has max_ctx rows */
    float *qh = xmalloc(sizeof(float) * (size_t)q_rows * n_heads * hd);
    rand_f32(qh, (size_t)q_rows * n_heads * hd, -1, 1);
    uint16_t *k, *v, *out;
    float *q, *scr;
    int32_t *dbt, *dpos, *dseq;
    CK(cudaMalloc((void **)&k, sizeof(uint16_t) * n));
    CK(cudaMalloc((void **)&v, sizeof(uint16_t) * n));
    CK(cudaMemcpy(k, kvh, sizeof(uint16_t) * n, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(v, kvh, sizeof(uint16_t) * n, cudaMemcpyHostToDevice));
    CK(cudaMalloc((void **)&q, sizeof(float) * (size_t)q_rows * n_heads * hd));
    CK(cudaMemcpy(q, qh, sizeof(float) * (size_t)q_rows * n_heads * hd, cudaMemcpyHostToDevice));
    CK(cudaMalloc((void **)&out, sizeof(uint16_t) * (size_t)q_rows * n_heads * hd));
    /* (the prefill runs, up to max_ctx rows, take the fused kernel: they write no partials) */
    const size_t scr_f = flint_cuda_attn_scratch_floats(max_rows, n_heads, n_kv, hd, max_ctx);
    CK(cudaMalloc((void **)&scr, sizeof(float) * scr_f));
    CK(cudaMalloc((void **)&dbt, sizeof(int32_t) * n_blocks));
    CK(cudaMemcpy(dbt, bt, sizeof(int32_t) * n_blocks, cudaMemcpyHostToDevice));
    CK(cudaMalloc((void **)&dpos, sizeof(int32_t) * q_rows));
    CK(cudaMalloc((void **)&dseq, sizeof(int32_t) * 64 * 8 * 2 + sizeof(int32_t) * q_rows));
    int32_t *pos = xmalloc(sizeof(int32_t) * q_rows), *seq = xmalloc(sizeof(int32_t) * (64 * 8 * 2 + q_rows));
    flint_cuda_attn a = {0};
    a.q = q;
    a.ldq = n_heads * hd;
    a.out = out;
    a.ldo = n_heads * hd;
    a.k_cache = k;
    a.v_cache = v;
    a.block_tables = dbt;
    a.bt_stride = bt_stride;
    a.pos = dpos;
    a.n_heads = n_heads;
    a.n_kv_heads = n_kv;
    a.head_dim = hd;
    a.block_size = bs;
    a.scratch = scr;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int ci = 0; ci < 3; ci++)
        for (int bi = 0; bi < 4; bi++)
            for (int qi = 0; qi < 2; qi++) {
                const int ctx = ctxs[ci], B = batches[bi], Q = qs[qi], R = B * Q, sets = max_b / B;
                for (int i = 0; i < B; i++)
                    for (int j = 0; j < Q; j++) pos[i * Q + j] = ctx - Q + j;
                for (int st = 0; st < sets; st++) /* set st: sequences st * B .. st * B + B - 1 */
                    for (int i = 0; i < B; i++)
                        for (int j = 0; j < Q; j++) seq[st * R + i * Q + j] = st * B + i;
                CK(cudaMemcpy(dpos, pos, sizeof(int32_t) * R, cudaMemcpyHostToDevice));
                CK(cudaMemcpy(dseq, seq, sizeof(int32_t) * R * sets, cudaMemcpyHostToDevice));
                a.n_rows = R;
                a.max_ctx = ctx;
                double us_h[2];
                for (int hint = 0; hint < 2; hint++) { /* no window hint, then the forward's (rows per sequence) */
                    a.rows_per_seq = hint ? Q : 0;
                    us_h[hint] = time_attention(&a, dseq, sets, reps, e0, e1);
                }
                a.rows_per_seq = 0;
                const double us = us_h[1], bytes = 2.0 * B * ctx * n_kv * hd * 2;
                printf("%-8s %6d %4d %6d %6d %11.1f %8.0f %8.2f %11.1f\n", Q == 1 ? "decode" : "verify", B, Q, R, ctx,
                       us, bytes / us * 1e-3, us / (bytes / 4.3e6), us_h[0]);
            }
    /* batch 1 at context 1024 with the grid sized for a server's max_len (a captured forward takes
     * the model's context: 32 splits where 9 have chunks), the lab side of session 31's finding
     * (b1 q 8 4.53 ms in the graph at the tight max_len, 4.67 from 4096 up; 4.59 with session 32's
     * m-tile sharing by the context's own chunks) */
    {
        const int mls[] = {1024, 2048, 4096, 40960};
        float *scr_ml;
        CK(cudaMalloc((void **)&scr_ml, sizeof(float) * flint_cuda_attn_scratch_floats(8, n_heads, n_kv, hd, 40960)));
        for (int qi = 0; qi < 2; qi++)
            for (int mi = 0; mi < 4; mi++) {
                const int Q = qs[qi], ctx = 1024, sets = max_b;
                for (int j = 0; j < Q; j++) pos[j] = ctx - Q + j;
                for (int st = 0; st < sets; st++)
                    for (int j = 0; j < Q; j++) seq[st * Q + j] = st;
                CK(cudaMemcpy(dpos, pos, sizeof(int32_t) * Q, cudaMemcpyHostToDevice));
                CK(cudaMemcpy(dseq, seq, sizeof(int32_t) * Q * sets, cudaMemcpyHostToDevice));
                flint_cuda_attn b = a;
                b.n_rows = Q;
                b.max_ctx = mls[mi];
                b.rows_per_seq = Q;
                b.scratch = scr_ml;
                const double us = time_attention(&b, dseq, sets, reps, e0, e1), bytes = 2.0 * ctx * n_kv * hd * 2;
                char name[16];
                snprintf(name, sizeof name, "ml%d", mls[mi]);
                printf("%-8s %6d %4d %6d %6d %11.1f %8.0f %8.2f %11s\n", name, 1, Q, Q, ctx, us, bytes / us * 1e-3,
                       us / (bytes / 4.3e6), "-");
            }
        CK(cudaFree(scr_ml));
    }
    /* drafter blocks (block mode): batch x 8 rows, each block attending to its sequence's ctx cached
     * positions and its own 8 rows (fp32 K/V, read from a separate buffer) */
    {
        const int B = 8, ld_blk = 2 * n_kv * hd, dbs[] = {1, 8, 64};
        float *bkv;
        CK(cudaMalloc((void **)&bkv, sizeof(float) * (size_t)max_b * B * ld_blk));
        CK(cudaMemset(bkv, 0, sizeof(float) * (size_t)max_b * B * ld_blk));
        for (int bi = 0; bi < 3; bi++) {
            const int Bn = dbs[bi], R = Bn * B, ctx = 1024, sets = max_b / Bn;
            for (int i = 0; i < Bn; i++)
                for (int j = 0; j < B; j++) pos[i * B + j] = ctx + j;
            for (int st = 0; st < sets; st++)
                for (int i = 0; i < Bn; i++)
                    for (int j = 0; j < B; j++) seq[st * R + i * B + j] = st * Bn + i;
            CK(cudaMemcpy(dpos, pos, sizeof(int32_t) * R, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dseq, seq, sizeof(int32_t) * R * sets, cudaMemcpyHostToDevice));
            flint_cuda_attn b = a;
            b.n_rows = R;
            b.max_ctx = ctx + B;
            b.rows_per_seq = 0;
            b.blk_rows = B;
            b.blk_k = bkv;
            b.blk_v = bkv + n_kv * hd;
            b.ld_blk = ld_blk;
            const double us = time_attention(&b, dseq, sets, reps, e0, e1), bytes = 2.0 * Bn * ctx * n_kv * hd * 2;
            printf("%-8s %6d %4d %6d %6d %11.1f %8.0f %8.2f %11s\n", "draft", Bn, B, R, ctx, us, bytes / us * 1e-3,
                   us / (bytes / 4.3e6), "-");
        }
        CK(cudaFree(bkv));
    }
    /* prefill: rows 0..P-1 of one sequence; TFLOP/s counts q.k and p.v over the causal triangle; with
     * the forward's hint (rows per sequence capped at 8: the prefetching fused kernel, its planes
     * sized for 8 rows) and, last column, without */
    for (int pi = 0; pi < 2; pi++) {
        const int P = prefills[pi];
        for (int j = 0; j < P; j++) pos[j] = j, seq[j] = 0;
        CK(cudaMemcpy(dpos, pos, sizeof(int32_t) * P, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dseq, seq, sizeof(int32_t) * P, cudaMemcpyHostToDevice));
        a.row_seq = dseq;
        a.n_rows = P;
        a.max_ctx = P;
        double us_h[2];
        for (int hint = 0; hint < 2; hint++) {
            a.rows_per_seq = hint ? 8 : 0;
            flint_cuda_attention(&a, NULL);
            CK(cudaEventRecord(e0, NULL));
            const int pr = 5;
            for (int i = 0; i < pr; i++) flint_cuda_attention(&a, NULL);
            CK(cudaEventRecord(e1, NULL));
            CK(cudaEventSynchronize(e1));
            float ms_total = 0;
            CK(cudaEventElapsedTime(&ms_total, e0, e1));
            us_h[hint] = 1000.0 * ms_total / pr;
        }
        a.rows_per_seq = 0;
        const double us = us_h[1], flops = 4.0 * hd * n_heads * ((double)P * (P + 1) / 2);
        printf("%-8s %6d %4d %6d %6d %11.1f %8s %8s %11.1f  %.1f TFLOP/s\n", "prefill", 1, P, P, P, us, "-", "-",
               us_h[0], flops / us * 1e-6);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaFree(k));
    CK(cudaFree(v));
    CK(cudaFree(q));
    CK(cudaFree(out));
    CK(cudaFree(scr));
    CK(cudaFree(dbt));
    CK(cudaFree(dpos));
    CK(cudaFree(dseq));
    free(bt), free(kvh), free(qh), free(pos), free(seq);
}

/* The MLP's gate-up GEMM at qwen3-8b's shape (I 12288, K 4096) through the dispatcher: the GEMM
 * alone (fp32 [M][2 I]), the GEMM then the swiglu kernel, and flint_cuda_gemm_tc_glu (the weights'
 * rows interleaved; the bytes are the same). Weights rotate past the L2, 20 launches each. */
void lab_glu(void) {
    const int I = 12288, N = 2 * I, K = 4096, ms[] = {1, 8, 16, 32, 64, 128, 256, 512};
    lab_w lw = lab_w_make(N, K, 512);
    float *gu;
    uint16_t *act;
    CK(cudaMalloc((void **)&gu, sizeof(float) * 512 * N));
    CK(cudaMalloc((void **)&act, sizeof(uint16_t) * 512 * I));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    printf("\ngate-up lab: I %d, K %d, us per launch (weights rotate over copies > L2)\n", I, K);
    printf("%5s %10s %14s %10s %8s\n", "M", "gemm", "gemm+swiglu", "glu", "saved");
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
        const int M = ms[mi], reps = 20;
        double us[3];
        for (int mode = 0; mode < 3; mode++) {
            for (int i = 0; i < reps + 3; i++) {
                if (i == 3) CK(cudaEventRecord(e0, NULL));
                const uint16_t *wi = (const uint16_t *)(lw.packed + (i % lw.copies) * lw.packed_bytes);
                if (mode < 2) flint_cuda_gemm_tc(gu, N, lw.x, K, wi, M, N, K, 0, NULL);
                if (mode == 1) flint_cuda_swiglu(act, I, gu, N, M, I, NULL);
                if (mode == 2) flint_cuda_gemm_tc_glu(act, I, lw.x, K, wi, M, I, K, NULL);
            }
            CK(cudaEventRecord(e1, NULL));
            CK(cudaEventSynchronize(e1));
            float ms_total = 0;
            CK(cudaEventElapsedTime(&ms_total, e0, e1));
            us[mode] = 1000.0 * ms_total / reps;
        }
        printf("%5d %10.1f %14.1f %10.1f %7.1f%%\n", M, us[0], us[1], us[2], 100.0 * (us[1] - us[2]) / us[1]);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaFree(gu));
    CK(cudaFree(act));
    lab_w_free(&lw);
}

/* The warpgroup tilings (tcw) and the dispatch at 96..512 rows, qwen3-8b's projections and LM head:
 * which tiling a grid of so many tiles wants. Two rounds, the tilings in turn within each. (Session
 * 25 compared a one-block-a-tile tiling here, branch wip/gemm-tcs: docs/benchmarks.md.) */
void lab_gemm_large(void) {
    const int shapes[][2] = {{4096, 4096}, {6144, 4096}, {24576, 4096}, {4096, 12288}, {151936, 4096}};
    const int ms[] = {96, 128, 192, 256, 384, 512};
    const int n_var = flint_cuda_gemm_tc_variants();
    printf("\ngemm large-M lab: warpgroup tilings and the dispatch, us per launch (TFLOP/s), weights past L2\n");
    for (int s = 0; s < 5; s++) {
        const int N = shapes[s][0], K = shapes[s][1];
        lab_w lw = lab_w_make(N, K, 512);
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
            const int M = ms[mi];
            for (int round = 0; round < 2; round++)
                for (int v = -2; v < n_var; v++) {
                    if (v == -1) continue; /* the CUDA-core GEMM */
                    const char *name = v == -2 ? "dispatch" : flint_cuda_gemm_tc_variant(NULL, 0, NULL, 0, NULL, 0, 0,
                                                                                        0, 0, v, NULL);
                    if (v >= 0 && strncmp(name, "tcw", 3) && strncmp(name, "tss", 3)) continue;
                    const double us = time_gemm(v, lw.y, lw.x, lw.packed, lw.packed_bytes, lw.copies, M, N, K);
                    printf("large %-22s r%d M %4d N %6d K %5d %9.1f us %6.1f TFLOP/s\n", name, round, M, N, K, us,
                           2.0 * M * N * K / us * 1e-6);
                }
        }
        lab_w_free(&lw);
    }
}

/* One tiling (variant) at one shape, weights rotating past the L2: for a profiler. */
void lab_gemm_one(int variant, int M, int N, int K) {
    lab_w lw = lab_w_make(N, K, M);
    const double us = time_gemm(variant, lw.y, lw.x, lw.packed, lw.packed_bytes, lw.copies, M, N, K);
    printf("%s M %d N %d K %d: %.1f us, %.1f TFLOP/s\n",
           flint_cuda_gemm_tc_variant(NULL, 0, NULL, 0, NULL, 0, 0, 0, 0, variant, NULL), M, N, K, us,
           2.0 * M * N * K / us * 1e-6);
    lab_w_free(&lw);
}
