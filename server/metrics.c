/* /metrics in the Prometheus text format, and the periodic speculative-decoding log line.
 * Names mirror vLLM's under `flint:` so that dashboards and `vllm bench serve`-style scrapers carry
 * over: counters are declared by their base name and sampled with the `_total` suffix, exactly as
 * the Prometheus client libraries (and so vLLM) expose them. Acceptance length is
 * 1 + rate(accepted) / rate(drafts); per-position rate is per_pos / drafts.
 * Request histograms are kept by the loop thread (it sees every request end); the engine's pooled
 * counters come from the snapshot the engine thread publishes after every step. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "server/server_internal.h"

/* Buckets: vLLM's, extended downwards, since a small model on a CPU answers in microseconds. */
static const double ttft_bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                     0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0};
static const double tpot_bounds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,
                                     0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
static const double e2e_bounds[] = {0.01, 0.025, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0,
                                    20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0};
#define NB(a) ((int)(sizeof(a) / sizeof(a[0])))

/* statuses counted in flint:requests_rejected, in n_rejected order */
static const int rejected_status[8] = {400, 401, 404, 405, 413, 429, 503, 0 /* other */};

void flint_hist_init(flint_hist *h, const double *bounds, int n) {
    FLINT_ASSERT(n <= FLINT_HIST_MAX);
    memset(h, 0, sizeof *h);
    h->bounds = bounds;
    h->n = n;
}

void flint_hist_observe(flint_hist *h, double v) {
    int i = 0;
    while (i < h->n && v > h->bounds[i]) i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

void flint_server_metrics_init(flint_server *s) {
    flint_hist_init(&s->h_ttft, ttft_bounds, NB(ttft_bounds));
    flint_hist_init(&s->h_tpot, tpot_bounds, NB(tpot_bounds));
    flint_hist_init(&s->h_e2e, e2e_bounds, NB(e2e_bounds));
}

void flint_server_metrics_rejected(flint_server *s, int status) {
    int i = 0;
    while (i < 7 && rejected_status[i] != status) i++;
    s->n_rejected[i]++;
}

void flint_server_metrics_job_done(flint_server *s, const flint_server_job *j) {
    int failed = j->status != 0 || j->finish == FLINT_FINISH_CANCELLED;
    s->n_finished[failed ? (j->status ? 0 : 3) : (j->finish == FLINT_FINISH_LENGTH ? 2 : 1)]++;
    s->prompt_tokens_total += j->prompt_tokens;
    s->generation_tokens_total += j->completion_tokens;
    if (failed) return;
    if (j->t_first > 0) flint_hist_observe(&s->h_ttft, j->t_first - j->t_arrival);
    if (j->t_done > 0) flint_hist_observe(&s->h_e2e, j->t_done - j->t_arrival);
    if (j->completion_tokens > 1 && j->t_done > j->t_first && j->t_first > 0)
        flint_hist_observe(&s->h_tpot, (j->t_done - j->t_first) / (j->completion_tokens - 1));
}

/* ==== rendering ==== */

static void head(flint_sbuf *b, const char *name, const char *type, const char *help) {
    flint_sbuf_addf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void gauge(flint_sbuf *b, const char *name, const char *help, double v) {
    head(b, name, "gauge", help);
    flint_sbuf_addf(b, "%s %.17g\n", name, v);
}

static void counter(flint_sbuf *b, const char *name, const char *help, int64_t v) {
    head(b, name, "counter", help);
    flint_sbuf_addf(b, "%s_total %lld\n", name, (long long)v);
}

static void counter_f(flint_sbuf *b, const char *name, const char *help, double v) {
    head(b, name, "counter", help);
    flint_sbuf_addf(b, "%s_total %.9g\n", name, v);
}

static void histogram(flint_sbuf *b, const char *name, const char *help, const flint_hist *h) {
    head(b, name, "histogram", help);
    int64_t cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->counts[i];
        flint_sbuf_addf(b, "%s_bucket{le=\"%g\"} %lld\n", name, h->bounds[i], (long long)cum);
    }
    cum += h->counts[h->n];
    flint_sbuf_addf(b, "%s_bucket{le=\"+Inf\"} %lld\n%s_sum %.9g\n%s_count %lld\n", name, (long long)cum, name,
                    h->sum, name, (long long)h->count);
}

static double resident_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, rss = 0;
    if (!f) return 0;
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
    fclose(f);
    return (double)rss * (double)sysconf(_SC_PAGESIZE);
}

void flint_server_metrics_render(flint_server *s, flint_sbuf *b) {
    flint_engine_snapshot sn;
    flint_server_engine_snapshot(s, &sn);
    const flint_spec_stats *p = &sn.pooled;
    int waiting = s->n_inflight - sn.running;
    head(b, "flint:model_info", "gauge", "The served model and its speculative configuration.");
    flint_sbuf_adds(b, "flint:model_info{model_name=");
    flint_sbuf_add_json_str(b, s->served_name, strlen(s->served_name));
    flint_sbuf_addf(b, ",speculative=\"%s\",num_speculative_tokens=\"%d\",dynamic_draft=\"%s\"} 1\n",
                    s->has_drafter ? "true" : "false", s->K, s->dynamic_draft ? "true" : "false");
    gauge(b, "flint:ready", "1 once the model is loaded and the server accepts requests.", s->ready && !s->draining);
    gauge(b, "flint:num_requests_running", "Requests in the engine (prefilling or decoding).", sn.running);
    gauge(b, "flint:num_requests_waiting", "Requests accepted but not yet in the engine.", waiting > 0 ? waiting : 0);
    gauge(b, "flint:kv_blocks_total", "KV cache blocks in the pool.", sn.kv_total);
    gauge(b, "flint:kv_blocks_used", "KV cache blocks held by requests.", sn.kv_total - sn.kv_free);
    gauge(b, "flint:kv_cache_usage_perc", "Fraction of KV cache blocks in use (0..1).",
          sn.kv_total ? (double)(sn.kv_total - sn.kv_free) / sn.kv_total : 0.0);
    counter(b, "flint:engine_steps", "Engine steps run.", sn.steps);
    counter(b, "flint:engine_forward_steps", "Engine steps that ran a target forward.", (double)sn.host.steps);
    counter_f(b, "flint:engine_step_seconds", "Wall time of the engine steps that ran a target forward.",
            sn.host.wall_ms / 1e3);
    counter_f(b, "flint:engine_host_seconds",
            "The engine's own time in those steps: their wall time less its waits for the GPU (CPU backend: all).",
            sn.host.host_ms / 1e3);
    gauge(b, "flint:device_memory_bytes", "Device memory of the CUDA target (weights, KV pool, scratch; 0 on the CPU).",
          (double)sn.device_bytes);
    gauge(b, "flint:cuda_graphs", "Captured forward graphs held (CUDA).", sn.graphs.n_graphs);
    counter(b, "flint:cuda_graph_captures", "Forward graphs captured since start (CUDA).", sn.graphs.n_captures);
    gauge(b, "flint:cuda_graph_capture_seconds", "Time spent capturing and instantiating graphs since start (CUDA).",
          sn.graphs.capture_s);
    gauge(b, "flint:cuda_graph_memory_bytes",
          "Device memory taken by capturing the graphs held now (free memory before less after; CUDA).",
          (double)sn.graphs.bytes);
    counter(b, "flint:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", sn.prefix_queries);
    counter(b, "flint:prefix_cache_hits", "Prompt tokens whose KV came from the prefix cache.", sn.prefix_hits);
    gauge(b, "flint:prefix_cache_blocks", "KV blocks held by the prefix cache.", sn.prefix_blocks);
    counter(b, "flint:spec_decode_num_drafts", "Verify steps that carried at least one draft token.", p->steps);
    counter(b, "flint:spec_decode_num_draft_tokens", "Draft tokens proposed.", p->draft_tokens);
    counter(b, "flint:spec_decode_num_accepted_tokens", "Draft tokens accepted.", p->accepted);
    head(b, "flint:spec_decode_num_accepted_tokens_per_pos", "counter",
         "Verify steps that accepted at least position+1 draft tokens.");
    for (int i = 0; i < s->K && i < FLINT_MAX_DRAFT; i++)
        flint_sbuf_addf(b, "flint:spec_decode_num_accepted_tokens_per_pos_total{position=\"%d\"} %lld\n", i,
                        (long long)p->accepted_per_pos[i]);
    counter(b, "flint:prompt_tokens", "Prompt tokens of finished requests.", s->prompt_tokens_total);
    counter(b, "flint:generation_tokens", "Generated tokens of finished requests.", s->generation_tokens_total);
    head(b, "flint:requests", "counter", "Requests that reached the engine, by how they ended.");
    static const char *reasons[4] = {"error", "stop", "length", "cancelled"};
    for (int i = 0; i < 4; i++)
        flint_sbuf_addf(b, "flint:requests_total{finish_reason=\"%s\"} %lld\n", reasons[i], (long long)s->n_finished[i]);
    head(b, "flint:requests_rejected", "counter", "Requests refused before reaching the engine, by HTTP status.");
    for (int i = 0; i < 8; i++) {
        if (rejected_status[i]) flint_sbuf_addf(b, "flint:requests_rejected_total{status=\"%d\"}", rejected_status[i]);
        else flint_sbuf_adds(b, "flint:requests_rejected_total{status=\"other\"}");
        flint_sbuf_addf(b, " %lld\n", (long long)s->n_rejected[i]);
    }
    histogram(b, "flint:time_to_first_token_seconds", "Time from arrival to the first generated token.", &s->h_ttft);
    histogram(b, "flint:time_per_output_token_seconds", "Decode time per output token after the first.", &s->h_tpot);
    histogram(b, "flint:e2e_request_latency_seconds", "Time from arrival to the last token.", &s->h_e2e);
    gauge(b, "process_resident_memory_bytes", "Resident memory size in bytes.", resident_bytes());
}

/* vLLM's "SpecDecoding metrics" line over the last interval, plus the batch and KV state. */
void flint_server_metrics_log_tick(flint_server *s) {
    if (s->o.log_interval_s <= 0 || !s->ready) return;
    double now = flint_server_now();
    if (s->t_last_log == 0) s->t_last_log = now;
    double dt = now - s->t_last_log;
    if (dt < s->o.log_interval_s) return;
    flint_engine_snapshot sn;
    flint_server_engine_snapshot(s, &sn);
    flint_spec_stats d = sn.pooled, *l = &s->last_log_stats;
    d.steps -= l->steps;
    d.draft_tokens -= l->draft_tokens;
    d.accepted -= l->accepted;
    for (int i = 0; i < FLINT_MAX_DRAFT; i++) d.accepted_per_pos[i] -= l->accepted_per_pos[i];
    s->last_log_stats = sn.pooled;
    s->t_last_log = now;
    if (sn.running == 0 && s->n_inflight == 0 && d.steps == 0) return; /* idle: stay quiet */
    flint_log_info("engine: %d running, %d waiting, KV %d/%d blocks in use", sn.running,
                   s->n_inflight > sn.running ? s->n_inflight - sn.running : 0, sn.kv_total - sn.kv_free, sn.kv_total);
    if (!s->has_drafter || d.steps == 0) return;
    char pos[256] = "";
    size_t off = 0;
    for (int i = 0; i < s->K && off < sizeof pos - 16; i++)
        off += (size_t)snprintf(pos + off, sizeof pos - off, "%s%.3f", i ? ", " : "",
                                (double)d.accepted_per_pos[i] / (double)d.steps);
    flint_log_info("SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s, Drafted "
                   "throughput: %.2f tokens/s, Accepted: %lld tokens, Drafted: %lld tokens, Per-position acceptance "
                   "rate: %s, Avg Draft acceptance rate: %.1f%%",
                   1.0 + (double)d.accepted / (double)d.steps, d.accepted / dt, d.draft_tokens / dt,
                   (long long)d.accepted, (long long)d.draft_tokens, pos,
                   d.draft_tokens ? 100.0 * (double)d.accepted / (double)d.draft_tokens : 0.0);
}
