/* `flint bench --load-format dummy --model-shape NAME`: the CUDA target's verify step at a real
 * model's size, with random weights made on the device and a random KV pool (so any context can be
 * timed without a checkpoint or a prefill), against the plain PyTorch decoder of the same shape
 * (tools/torch_baseline.py: static KV cache, SDPA, CUDA graphs) run as a child process in the same
 * invocation, so both sides see the same GPU, clocks and driver.
 *
 * A verify step of q tokens for each of b sequences at context C is one flint_target_forward over
 * b x q rows at positions C..C+q-1 with logits for every row left on the device (what the step's
 * device-side sampler reads): batch upload, the captured graph (or every kernel with --eager), one
 * synchronisation. Per point: median step time, the bytes a step must read (every stored parameter
 * once + the K/V of every row's context) as TB/s, FLOP/s, the floor (larger of bytes / 4.3 TB/s and
 * FLOP / 790 TFLOP/s, the H200 rates in research/perf.md), and the PyTorch time and ratio. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/json.h"
#include "core/log.h"
#include "evals/evals_internal.h"
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

typedef struct gpu_point {
    int b, q;
    double ms, tbs, tflops, floor_ms, torch_ms;
    double allreduce_ms; /* tensor parallel: 2 partial-sum exchanges per layer of the step's rows, timed alone */
} gpu_point;

/* Tensor parallel ranks: every forward runs on all of them at once (their collectives meet). */
typedef struct rank_job {
    flint_target *t;
    flint_target_batch b;
    int rows, reps;
    double ms;
    int what; /* 0 forward, 1 all-reduce timing */
    flint_err err;
    int rc;
} rank_job;

static void *rank_main(void *arg) {
    rank_job *j = arg;
    j->rc = j->what ? flint_target_debug_tp_exchange(j->t, j->rows, j->reps, &j->ms, &j->err)
                    : flint_target_forward(j->t, &j->b, &j->err);
    return NULL;
}

static int on_ranks(flint_target **t, int n, rank_job *jobs, flint_err *err) {
    pthread_t th[64];
    for (int r = 0; r < n; r++) {
        jobs[r].t = t[r];
        if (r && pthread_create(&th[r], NULL, rank_main, &jobs[r]))
            return flint_err_set(err, FLINT_ERR_IO, "bench: cannot start rank %d's thread", r);
    }
    rank_main(&jobs[0]);
    int rc = 0;
    for (int r = 1; r < n; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < n && !rc; r++)
        if (jobs[r].rc) {
            *err = jobs[r].err;
            rc = -1;
        }
    return rc;
}

static void list_str(char *buf, size_t n, const int *v, int k) {
    buf[0] = 0;
    for (int i = 0; i < k; i++) {
        size_t l = strlen(buf);
        snprintf(buf + l, n - l, "%s%d", i ? "," : "", v[i]);
    }
}

/* The PyTorch baseline as a child process; its points are matched by (batch, q). Missing python,
 * torch or a GPU is not an error of the benchmark: the column stays empty with a warning. */
static void run_baseline(const flint_bench_options *o, gpu_point *pts, int n_pts) {
    if (!o->baseline || !strcmp(o->baseline, "none")) return;
    char bl[256], ql[256], json[128], cmd[2048];
    list_str(bl, sizeof bl, o->batch_sizes, o->n_batch);
    list_str(ql, sizeof ql, o->verify_q, o->n_verify_q);
    snprintf(json, sizeof json, "/tmp/flint-bench-torch-%ld.json", (long)getpid());
    snprintf(cmd, sizeof cmd, "python3 '%s' --shape %s --context %d --batch-sizes %s --q %s --replays %d --json %s "
             "> /dev/null 2>&1", o->baseline, o->model_shape, o->context, bl, ql, o->steps < 10 ? 10 : o->steps, json);
    flint_log_info("bench: PyTorch baseline: %s", cmd);
    double t0 = now_s();
    int rc = system(cmd);
    if (rc != 0) {
        flint_log_warn("bench: the PyTorch baseline failed (exit status %d; needs python3, torch and a GPU); "
                       "its column stays empty", rc);
        return;
    }
    flint_err err = {0};
    char *text = flint_file_read(json, 1 << 24, NULL, &err);
    remove(json);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *arr = root ? cJSON_GetObjectItemCaseSensitive(root, "points") : NULL;
    const cJSON *p;
    int matched = 0;
    cJSON_ArrayForEach(p, arr) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(p, "batch"), *q = cJSON_GetObjectItemCaseSensitive(p, "q"),
                    *ms = cJSON_GetObjectItemCaseSensitive(p, "ms");
        if (!cJSON_IsNumber(b) || !cJSON_IsNumber(q) || !cJSON_IsNumber(ms)) continue;
        for (int i = 0; i < n_pts; i++)
            if (pts[i].b == b->valueint && pts[i].q == q->valueint) {
                pts[i].torch_ms = ms->valuedouble;
                matched++;
            }
    }
    cJSON_Delete(root);
    flint_log_info("bench: PyTorch baseline: %d of %d points in %.1f s", matched, n_pts, now_s() - t0);
    if (matched < n_pts) flint_log_warn("bench: the PyTorch baseline gave %d of %d points", matched, n_pts);
}

int flint_bench_gpu_run(const flint_bench_options *o, flint_err *err) {
    int max_b = 1, max_q = 1;
    for (int i = 0; i < o->n_batch; i++) max_b = o->batch_sizes[i] > max_b ? o->batch_sizes[i] : max_b;
    for (int i = 0; i < o->n_verify_q; i++) max_q = o->verify_q[i] > max_q ? o->verify_q[i] : max_q;
    flint_target_options to;
    flint_target_options_default(&to);
    to.device = FLINT_TARGET_CUDA;
    to.dummy_shape = o->model_shape;
    to.max_seqs = max_b;
    to.max_len = o->context + max_q > o->max_model_len ? o->context + max_q : o->max_model_len;
    to.max_rows = max_b * max_q;
    /* a --max-model-len past the run: the forward is sized for it (block tables, attention grids),
     * the pool holds only the blocks the run's sequences use */
    const int used_len = o->context + max_q;
    if (to.max_len > used_len) to.kv_blocks = max_b * ((used_len + to.kv_block_size - 1) / to.kv_block_size);
    to.enforce_eager = o->enforce_eager;
    if (o->cuda_graph_sizes) {
        flint_engine_options probe;
        if (flint_graph_sizes_parse(o->cuda_graph_sizes, &probe, err)) return -1;
        to.n_graph_sizes = probe.n_cuda_graph_sizes;
        memcpy(to.graph_sizes, probe.cuda_graph_sizes, sizeof to.graph_sizes);
    }
    const int n_tp = o->tensor_parallel_size > 1 ? o->tensor_parallel_size : 1;
    flint_tp_comm comms[64];
    flint_target *ranks[64] = {NULL};
    rank_job *jobs = flint_xcalloc((size_t)n_tp, sizeof *jobs);
    int n_comms = 0;
    double t0 = now_s();
    if (n_tp > 1) {
        int devs[64];
        for (int r = 0; r < n_tp; r++) devs[r] = r;
        if (flint_tp_nccl_open_all(n_tp, devs, comms, err)) {
            free(jobs);
            return -1;
        }
        n_comms = n_tp;
    }
    for (int r = 0; r < n_tp; r++) {
        to.tp = n_tp > 1 ? &comms[r] : NULL;
        if (!(ranks[r] = flint_target_open(NULL, &to, err))) break;
        flint_err fe = {0};
        if (flint_target_debug_fill_kv(ranks[r], 7, &fe)) { /* the same K/V values: what they are does not matter */
            *err = fe;
            break;
        }
    }
    flint_target *t = ranks[n_tp - 1] ? ranks[0] : NULL;
    int rc = -1;
    int32_t **tables = NULL, *tok = NULL, *pos = NULL, *seq = NULL, *rows = NULL;
    double *times = NULL;
    gpu_point *pts = flint_xcalloc((size_t)(o->n_batch * o->n_verify_q), sizeof *pts);
    int n_pts = 0;
    if (!t) goto done;
    const flint_target_config *c = flint_target_get_config(t);
    const double open_s = now_s() - t0;
    int bsz = flint_target_kv_block_size(t), per = (to.max_len + bsz - 1) / bsz, per_used = (used_len + bsz - 1) / bsz;
    double H = c->hidden_size, I = c->intermediate_size, V = c->vocab_size, L = c->n_layers;
    double qd = (double)c->n_heads * c->head_dim, kvd = (double)c->n_kv_heads * c->head_dim;
    double mm_params = L * ((qd + 2 * kvd) * H + H * qd + 3 * I * H) + V * H; /* every matmul weight a step reads */
    tables = flint_xmalloc(sizeof(int32_t *) * (size_t)max_b);
    for (int s = 0; s < max_b; s++) {
        tables[s] = flint_xmalloc(sizeof(int32_t) * (size_t)per);
        for (int k = 0; k < per; k++) tables[s][k] = s * per_used + (k < per_used ? k : per_used - 1);
    }
    int R = max_b * max_q;
    tok = flint_xmalloc(sizeof(int32_t) * R), pos = flint_xmalloc(sizeof(int32_t) * R);
    seq = flint_xmalloc(sizeof(int32_t) * R), rows = flint_xmalloc(sizeof(int32_t) * R);
    times = flint_xmalloc(sizeof(double) * (size_t)o->steps);
    for (int bi = 0; bi < o->n_batch; bi++)
        for (int qi = 0; qi < o->n_verify_q; qi++) {
            int B = o->batch_sizes[bi], q = o->verify_q[qi], n = B * q;
            for (int r = 0; r < n; r++) {
                tok[r] = (int32_t)((r * 7919u + 13u) % (unsigned)c->vocab_size);
                seq[r] = r / q;
                pos[r] = o->context + r % q;
                rows[r] = r;
            }
            flint_target_batch b = {.n_rows = n, .tokens = tok, .pos = pos, .row_seq = seq, .n_seqs = max_b,
                                    .block_tables = (const int32_t *const *)tables, .n_logit_rows = n,
                                    .logit_rows = rows, .logits_on_device = 1};
            for (int r = 0; r < n_tp; r++) jobs[r].b = b, jobs[r].what = 0;
            for (int w = 0; w < o->warmup; w++)
                if (on_ranks(ranks, n_tp, jobs, err)) goto done;
            for (int k = 0; k < o->steps; k++) {
                double a = now_s();
                if (on_ranks(ranks, n_tp, jobs, err)) goto done;
                times[k] = now_s() - a;
            }
            qsort(times, (size_t)o->steps, sizeof(double), cmp_d);
            gpu_point *p = &pts[n_pts++];
            p->b = B, p->q = q;
            p->ms = 1e3 * times[o->steps / 2];
            double kv_bytes = (double)B * (o->context + q) * L * 2 * kvd * 2;
            double bytes = (mm_params + (c->tie_word_embeddings ? 0 : V * H)) * 2 + kv_bytes;
            double flops = 2 * mm_params * n + L * 4.0 * n * (o->context + q) * qd;
            p->floor_ms = 1e3 * (bytes / 4.3e12 > flops / 790e12 ? bytes / 4.3e12 : flops / 790e12);
            p->tbs = bytes / (p->ms * 1e-3) / 1e12;
            p->tflops = flops / (p->ms * 1e-3) / 1e12;
            p->torch_ms = NAN;
            p->allreduce_ms = NAN;
            if (n_tp > 1) {
                for (int r = 0; r < n_tp; r++) jobs[r].what = 1, jobs[r].rows = n, jobs[r].reps = 20;
                if (on_ranks(ranks, n_tp, jobs, err)) goto done;
                p->allreduce_ms = jobs[0].ms * 2 * c->n_layers;
            }
            flint_log_info("bench: b = %d, q = %d: %.3f ms (%.2f x floor)", B, q, p->ms, p->ms / p->floor_ms);
        }
    flint_target_graph_info gi;
    flint_target_graph_stats(t, &gi);
    size_t dev_bytes = flint_target_device_bytes(t);
    for (int r = 0; r < n_tp; r++) flint_target_close(ranks[r]), ranks[r] = NULL;
    t = NULL;
    run_baseline(o, pts, n_pts);

    printf("# %s, random weights, context %d, max_len %d; flint: %s, tensor parallel %d, device memory %.2f GiB per "
           "GPU, opened in %.1f s; %ld graphs captured in %.3f s, %.1f MiB\n", o->model_shape, o->context, to.max_len,
           o->enforce_eager ? "eager launches" : "captured graphs", n_tp, (double)dev_bytes / (1u << 30), open_s,
           gi.n_captures, gi.capture_s, (double)gi.bytes / (1u << 20));
    if (n_tp > 1)
        printf("# floors are one GPU's; all-reduce ms = 2 exchanges per layer of the step's partial sums (an NCCL "
               "all-gather + ordered add: exact), timed alone\n");
    printf("%6s %3s %6s %10s %7s %8s %9s %8s %11s %9s%s\n", "batch", "q", "rows", "flint ms", "TB/s", "TFLOP/s",
           "floor ms", "x floor", "PyTorch ms", "x PyTorch", n_tp > 1 ? "  all-reduce ms" : "");
    for (int i = 0; i < n_pts; i++) {
        const gpu_point *p = &pts[i];
        printf("%6d %3d %6d %10.3f %7.2f %8.1f %9.3f %8.2f", p->b, p->q, p->b * p->q, p->ms, p->tbs, p->tflops,
               p->floor_ms, p->ms / p->floor_ms);
        if (isnan(p->torch_ms)) printf(" %11s %9s", "-", "-");
        else printf(" %11.3f %9.2f", p->torch_ms, p->ms / p->torch_ms);
        if (n_tp > 1) printf(" %14.3f", p->allreduce_ms);
        printf("\n");
    }
    if (o->output) {
        cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "points");
        cJSON_AddStringToObject(root, "model_shape", o->model_shape);
        cJSON_AddNumberToObject(root, "context", o->context);
        cJSON_AddBoolToObject(root, "graphs", !o->enforce_eager);
        cJSON_AddNumberToObject(root, "device_bytes", (double)dev_bytes);
        cJSON_AddNumberToObject(root, "tensor_parallel_size", n_tp);
        for (int i = 0; i < n_pts; i++) {
            cJSON *p = cJSON_CreateObject();
            cJSON_AddNumberToObject(p, "batch", pts[i].b);
            cJSON_AddNumberToObject(p, "q", pts[i].q);
            cJSON_AddNumberToObject(p, "ms", pts[i].ms);
            cJSON_AddNumberToObject(p, "floor_ms", pts[i].floor_ms);
            cJSON_AddNumberToObject(p, "tb_per_s", pts[i].tbs);
            cJSON_AddNumberToObject(p, "tflop_per_s", pts[i].tflops);
            if (!isnan(pts[i].torch_ms)) cJSON_AddNumberToObject(p, "torch_ms", pts[i].torch_ms);
            if (!isnan(pts[i].allreduce_ms)) cJSON_AddNumberToObject(p, "allreduce_ms", pts[i].allreduce_ms);
            cJSON_AddItemToArray(arr, p);
        }
        int w = flint_evals_write_json(o->output, root, err);
        cJSON_Delete(root);
        if (w) goto done;
    }
    rc = 0;
done:
    for (int r = 0; r < n_tp; r++) flint_target_close(ranks[r]);
    for (int r = 0; r < n_comms; r++) flint_tp_nccl_close(&comms[r]);
    free(jobs);
    if (tables)
        for (int s = 0; s < max_b; s++) free(tables[s]);
    free(tables), free(tok), free(pos), free(seq), free(rows), free(times), free(pts);
    return rc;
}
