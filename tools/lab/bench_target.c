/* Lab: the CUDA target forward at real sizes, with random weights made on the device
 * (--load-format dummy shapes of target/config.c) and a random KV pool, so a verify step of
 * q tokens per sequence at a given context can be timed without a checkpoint or a prefill.
 * Prints, per (batch, q): median step time, what it read (weights + the KV of every row's
 * context) as TB/s, FLOP/s, and the ratio to the larger of the memory floor (4.3 TB/s) and
 * the bf16 compute floor (790 TFLOP/s). A step here is flint_target_forward: batch upload, every
 * layer, LM head over all rows (logits left on the device), one synchronisation; not a captured
 * graph. Built with CUDA; run on the GPU machine (tools/device/engine_tests.sh).
 *   bench_target [--shape qwen3-8b] [--context 1024] [--batch-sizes 1,8,32,64] [--q 1,8] [--reps 10] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "target/target.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int parse_list(const char *s, int *out, int cap) {
    int n = 0;
    while (*s && n < cap) {
        out[n++] = atoi(s);
        const char *c = strchr(s, ',');
        if (!c) break;
        s = c + 1;
    }
    return n;
}

int main(int argc, char **argv) {
    const char *shape = "qwen3-8b";
    int context = 1024, reps = 10, bs[16] = {1, 8, 32, 64}, qs[16] = {1, 8}, n_b = 4, n_q = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--shape")) shape = argv[i + 1];
        else if (!strcmp(argv[i], "--context")) context = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch-sizes")) n_b = parse_list(argv[i + 1], bs, 16);
        else if (!strcmp(argv[i], "--q")) n_q = parse_list(argv[i + 1], qs, 16);
        else {
            fprintf(stderr, "bench_target: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    int max_b = 1, max_q = 1;
    for (int i = 0; i < n_b; i++) max_b = bs[i] > max_b ? bs[i] : max_b;
    for (int i = 0; i < n_q; i++) max_q = qs[i] > max_q ? qs[i] : max_q;
    flint_target_options o;
    flint_target_options_default(&o);
    o.device = FLINT_TARGET_CUDA;
    o.dummy_shape = shape;
    o.max_seqs = max_b;
    o.max_len = context + max_q;
    o.max_rows = max_b * max_q;
    flint_err err = {0};
    double t0 = now_s();
    flint_target *t = flint_target_open(NULL, &o, &err);
    if (!t) {
        fprintf(stderr, "bench_target: %s\n", err.msg);
        return 1;
    }
    if (flint_target_debug_fill_kv(t, 7, &err)) {
        fprintf(stderr, "bench_target: %s\n", err.msg);
        return 1;
    }
    const flint_target_config *c = flint_target_get_config(t);
    int bsz = flint_target_kv_block_size(t), per = (o.max_len + bsz - 1) / bsz;
    double H = c->hidden_size, I = c->intermediate_size, V = c->vocab_size, L = c->n_layers;
    double qd = (double)c->n_heads * c->head_dim, kvd = (double)c->n_kv_heads * c->head_dim;
    double layer_params = (qd + 2 * kvd) * H + H * qd + 3 * I * H;
    double mm_params = L * layer_params + V * H; /* every matmul weight a step reads (embedding gather aside) */
    printf("bench_target: %s (%.2fB matmul parameters), context %d, opened with random weights in %.1f s; device "
           "memory %.1f GiB\n", shape, mm_params / 1e9, context, now_s() - t0,
           (double)flint_target_device_bytes(t) / (1u << 30));
    int32_t **tables = malloc(sizeof(int32_t *) * (size_t)max_b);
    for (int s = 0; s < max_b; s++) {
        tables[s] = malloc(sizeof(int32_t) * (size_t)per);
        for (int k = 0; k < per; k++) tables[s][k] = s * per + k;
    }
    int R = max_b * max_q;
    int32_t *tok = malloc(sizeof(int32_t) * R), *pos = malloc(sizeof(int32_t) * R), *seq = malloc(sizeof(int32_t) * R),
            *rows = malloc(sizeof(int32_t) * R);
    double *times = malloc(sizeof(double) * (size_t)(reps > 0 ? reps : 1));
    printf("%6s %3s %6s %10s %8s %9s %9s %9s\n", "batch", "q", "rows", "median ms", "TB/s", "TFLOP/s", "floor ms",
           "x floor");
    for (int bi = 0; bi < n_b; bi++)
        for (int qi = 0; qi < n_q; qi++) {
            int B = bs[bi], q = qs[qi], n = B * q;
            for (int r = 0; r < n; r++) {
                tok[r] = (int32_t)((r * 7919u + 13u) % (unsigned)c->vocab_size);
                seq[r] = r / q;
                pos[r] = context + r % q;
                rows[r] = r;
            }
            flint_target_batch b = {n, tok, pos, seq, max_b, (const int32_t *const *)tables, n, rows, NULL, 0, NULL,
                                    NULL, 1};
            for (int w = 0; w < 3; w++)
                if (flint_target_forward(t, &b, &err)) {
                    fprintf(stderr, "bench_target: %s\n", err.msg);
                    return 1;
                }
            for (int k = 0; k < reps; k++) {
                double a = now_s();
                flint_target_forward(t, &b, &err);
                times[k] = now_s() - a;
            }
            qsort(times, (size_t)reps, sizeof(double), cmp_d);
            double ms = 1e3 * times[reps / 2];
            double kv_bytes = (double)B * (context + q) * L * 2 * kvd * 2;
            /* every stored parameter once (the embedding table too, as the floors count it) */
            double bytes = (mm_params + (c->tie_word_embeddings ? 0 : V * H)) * 2 + kv_bytes;
            double flops = 2 * mm_params * n + L * 4.0 * n * (context + q) * qd;
            double floor_ms = 1e3 * (bytes / 4.3e12 > flops / 790e12 ? bytes / 4.3e12 : flops / 790e12);
            printf("%6d %3d %6d %10.3f %8.2f %9.1f %9.3f %9.2f\n", B, q, n, ms, bytes / (ms * 1e-3) / 1e12,
                   flops / (ms * 1e-3) / 1e12, floor_ms, ms / floor_ms);
            fflush(stdout);
        }
    flint_target_close(t);
    return 0;
}
