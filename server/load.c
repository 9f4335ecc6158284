/* `flint load` (see load.h): prompts, the schedule (closed loop or Poisson arrivals), per-request
 * checks and statistics, /metrics deltas for acceptance, and the report. Metric definitions follow
 * `vllm bench serve`: TTFT = first token - send; TPOT = (e2e - TTFT) / (tokens - 1), requests of
 * one token excluded; ITL = every gap between chunks that carried tokens; per-token ITL spreads
 * each gap over the tokens of its chunk (from the running usage counts the server sends with
 * stream_options.continuous_usage_stats), so multi-token speculative chunks are not mistaken for
 * slow single tokens; goodput = requests per second that met every given SLO. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <dirent.h>
#include <netdb.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <event2/event.h>
#include <event2/http.h>

#include "core/json.h"
#include "core/log.h"
#include "server/load_internal.h"

#ifndef FLINT_EVALS_DATA_DIR
#define FLINT_EVALS_DATA_DIR "evals/data"
#endif
#ifndef FLINT_SHARED_DATA_DIR
#define FLINT_SHARED_DATA_DIR "../shared/data"
#endif

void flint_load_options_default(flint_load_options *o) {
    memset(o, 0, sizeof *o);
    o->url = "http://127.0.0.1:8000";
    o->dataset = "sharegpt";
    o->data_dir = FLINT_EVALS_DATA_DIR;
    o->endpoint = "chat";
    o->concurrency = 16;
    o->duration_s = 60;
    o->max_tokens = 128;
    o->stream = 1;
    o->timeout_s = 600;
}

/* ==== prompts ==== */

/* The prompt of one record: a string, ShareGPT's first human turn, Spec-Bench's first turn, or a
 * "prompt" / "question" / "instruction" / "text" field. */
static const char *record_prompt(const cJSON *it) {
    if (cJSON_IsString(it)) return it->valuestring;
    if (!cJSON_IsObject(it)) return NULL;
    const cJSON *conv = cJSON_GetObjectItemCaseSensitive(it, "conversations"), *m;
    if (cJSON_IsArray(conv))
        cJSON_ArrayForEach(m, conv) {
            const cJSON *from = cJSON_GetObjectItemCaseSensitive(m, "from");
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, "value");
            if (cJSON_IsString(from) && cJSON_IsString(v) &&
                (!strcmp(from->valuestring, "human") || !strcmp(from->valuestring, "user")))
                return v->valuestring;
        }
    const cJSON *turns = cJSON_GetObjectItemCaseSensitive(it, "turns");
    if (cJSON_IsArray(turns) && cJSON_IsString(turns->child)) return turns->child->valuestring;
    static const char *keys[] = {"prompt", "question", "instruction", "text"};
    for (int i = 0; i < 4; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(it, keys[i]);
        if (cJSON_IsString(v)) return v->valuestring;
    }
    return NULL;
}

static void add_prompt(lrun *r, const char *p) {
    if (!p || !p[0]) return;
    if (r->o->max_prompt_chars > 0 && (int)strlen(p) > r->o->max_prompt_chars) return;
    r->prompts = flint_xrealloc(r->prompts, sizeof(char *) * (size_t)(r->n_prompts + 1));
    r->prompts[r->n_prompts++] = flint_xstrdup(p);
}

static int load_prompts(lrun *r, const char *path, flint_err *err) {
    size_t len;
    char *text = flint_file_read(path, (size_t)1 << 30, &len, err);
    if (!text) return -1;
    const char *p = text;
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') p++;
    if (*p == '[') { /* one JSON array */
        cJSON *j = cJSON_Parse(p);
        if (!j) {
            free(text);
            return flint_err_set(err, FLINT_ERR_FORMAT, "%s: not valid JSON", path);
        }
        const cJSON *it;
        cJSON_ArrayForEach(it, j) add_prompt(r, record_prompt(it));
        cJSON_Delete(j);
    } else { /* JSON lines */
        for (char *line = text, *next; line && *line; line = next) {
            next = strchr(line, '\n');
            if (next) *next++ = 0;
            if (!line[0] || line[0] == '\r') continue;
            cJSON *j = cJSON_Parse(line);
            if (j) add_prompt(r, record_prompt(j));
            cJSON_Delete(j);
        }
    }
    free(text);
    if (r->n_prompts == 0) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: no usable prompts", path);
    return 0;
}

/* A directory holding a prompt set: Spec-Bench's question.jsonl, else the first .json/.jsonl. */
static int pick_in_dir(const char *dir, char *out, size_t cap) {
    char p[4096];
    if (!flint_path_join(p, sizeof p, dir, "question.jsonl") && flint_file_exists(p)) {
        snprintf(out, cap, "%s", p);
        return 0;
    }
    DIR *d = opendir(dir);
    if (!d) return -1;
    char best[1024] = "";
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t n = strlen(de->d_name);
        int ok = (n > 5 && !strcmp(de->d_name + n - 5, ".json")) || (n > 6 && !strcmp(de->d_name + n - 6, ".jsonl"));
        if (ok && (!best[0] || strcmp(de->d_name, best) < 0)) snprintf(best, sizeof best, "%s", de->d_name);
    }
    closedir(d);
    if (!best[0]) return -1;
    snprintf(out, cap, "%s/%s", dir, best);
    return 0;
}

static int resolve_dataset(const flint_load_options *o, char *out, size_t cap, flint_err *err) {
    if (flint_file_exists(o->dataset) && !pick_in_dir(o->dataset, out, cap)) return 0; /* a directory */
    if (flint_file_exists(o->dataset)) {
        snprintf(out, cap, "%s", o->dataset);
        return 0;
    }
    const char *dirs[2] = {o->data_dir, FLINT_SHARED_DATA_DIR};
    for (int i = 0; i < 2; i++) {
        if (!dirs[i]) continue;
        char p[4096];
        static const char *ext[] = {".json", ".jsonl"};
        for (int k = 0; k < 2; k++) {
            snprintf(p, sizeof p, "%s/%s%s", dirs[i], o->dataset, ext[k]);
            if (flint_file_exists(p)) {
                snprintf(out, cap, "%s", p);
                return 0;
            }
        }
        snprintf(p, sizeof p, "%s/%s", dirs[i], o->dataset);
        if (!pick_in_dir(p, out, cap)) return 0;
    }
    return flint_err_set(err, FLINT_ERR_IO, "dataset '%s' not found (a file, or a name under %s)", o->dataset,
                         o->data_dir ? o->data_dir : "?");
}

/* ==== requests ==== */

lreq *flint_load_next_request(lrun *r) {
    const flint_load_options *o = r->o;
    if (r->stopping || (o->num_requests > 0 && r->issued >= o->num_requests)) return NULL;
    lreq *q = flint_xcalloc(1, sizeof *q);
    q->idx = r->issued++;
    q->prompt_idx = q->idx % r->n_prompts;
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "model", r->model);
    if (!strcmp(o->endpoint, "chat")) {
        cJSON *ms = cJSON_AddArrayToObject(b, "messages");
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", r->prompts[q->prompt_idx]);
        cJSON_AddItemToArray(ms, m);
    } else {
        cJSON_AddStringToObject(b, "prompt", r->prompts[q->prompt_idx]);
    }
    cJSON_AddNumberToObject(b, "max_tokens", o->max_tokens);
    cJSON_AddNumberToObject(b, "temperature", o->temperature);
    cJSON_AddNumberToObject(b, "seed", (double)(o->seed + (uint64_t)q->idx));
    if (o->ignore_eos) cJSON_AddBoolToObject(b, "ignore_eos", 1);
    if (o->stream) {
        cJSON_AddBoolToObject(b, "stream", 1);
        cJSON *so = cJSON_AddObjectToObject(b, "stream_options");
        cJSON_AddBoolToObject(so, "include_usage", 1);
        cJSON_AddBoolToObject(so, "continuous_usage_stats", 1);
    }
    q->body = cJSON_PrintUnformatted(b);
    q->body_len = strlen(q->body);
    cJSON_Delete(b);
    r->inflight++;
    return q;
}

static void count_failure(lrun *r, const char *why) {
    char key[96];
    snprintf(key, sizeof key, "%.95s", why);
    for (int i = 0; i < r->n_fail_reasons; i++)
        if (!strcmp(r->fail_reason[i], key)) {
            r->fail_count[i]++;
            return;
        }
    int i = r->n_fail_reasons < 16 ? r->n_fail_reasons++ : 15;
    snprintf(r->fail_reason[i], sizeof r->fail_reason[i], "%s", i == 15 ? "other" : key);
    r->fail_count[i]++;
}

/* The checks a well-formed reply passes; the first failure is kept in q->err. */
static void validate(lrun *r, lreq *q) {
    if (q->err[0]) return;
    if (q->status != 200) {
        snprintf(q->err, sizeof q->err, "HTTP %d: %.150s", q->status, q->raw.p ? q->raw.p : "");
        return;
    }
    if (r->o->stream) {
        if (!q->sse) snprintf(q->err, sizeof q->err, "the reply is not text/event-stream");
        else if (!q->done_seen) snprintf(q->err, sizeof q->err, "the stream has no [DONE]");
        else if (q->n_finish != 1) snprintf(q->err, sizeof q->err, "%d chunks carried a finish_reason", q->n_finish);
        else if (!q->usage_seen) snprintf(q->err, sizeof q->err, "no usage chunk");
        else if (q->last_running != q->completion_tokens)
            snprintf(q->err, sizeof q->err, "running usage %d != final usage %d", q->last_running, q->completion_tokens);
        return;
    }
    cJSON *j = q->raw.p ? cJSON_Parse(q->raw.p) : NULL;
    const cJSON *ch = j ? cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0) : NULL;
    const cJSON *usage = j ? cJSON_GetObjectItemCaseSensitive(j, "usage") : NULL;
    if (!ch || !cJSON_IsObject(usage)) {
        snprintf(q->err, sizeof q->err, "the reply is not a completion object");
    } else {
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(ch, "message");
        const cJSON *t = msg ? cJSON_GetObjectItemCaseSensitive(msg, "content") : cJSON_GetObjectItemCaseSensitive(ch, "text");
        const cJSON *fr = cJSON_GetObjectItemCaseSensitive(ch, "finish_reason");
        if (cJSON_IsString(t)) flint_sbuf_adds(&q->text, t->valuestring);
        if (cJSON_IsString(fr)) snprintf(q->finish, sizeof q->finish, "%s", fr->valuestring);
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(usage, "completion_tokens");
        const cJSON *pt = cJSON_GetObjectItemCaseSensitive(usage, "prompt_tokens");
        q->completion_tokens = cJSON_IsNumber(ct) ? ct->valueint : 0;
        q->prompt_tokens = cJSON_IsNumber(pt) ? pt->valueint : 0;
        q->t_first = q->t_done;
    }
    cJSON_Delete(j);
}

static void save(lrun *r, const lreq *q) {
    if (!r->save) return;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "i", q->idx);
    cJSON_AddNumberToObject(j, "prompt_index", q->prompt_idx);
    cJSON_AddItemToObject(j, "body", cJSON_Parse(q->body));
    cJSON_AddBoolToObject(j, "ok", !q->err[0]);
    if (q->err[0]) cJSON_AddStringToObject(j, "error", q->err);
    cJSON_AddNumberToObject(j, "status", q->status);
    cJSON_AddStringToObject(j, "text", q->text.p ? q->text.p : "");
    cJSON_AddStringToObject(j, "finish_reason", q->finish);
    cJSON_AddNumberToObject(j, "prompt_tokens", q->prompt_tokens);
    cJSON_AddNumberToObject(j, "completion_tokens", q->completion_tokens);
    cJSON_AddNumberToObject(j, "chunks", q->n_chunks);
    cJSON_AddNumberToObject(j, "ttft_ms", q->t_first > 0 ? (q->t_first - q->t_send) * 1e3 : -1);
    cJSON_AddNumberToObject(j, "e2el_ms", (q->t_done - q->t_send) * 1e3);
    char *s = cJSON_PrintUnformatted(j);
    fprintf(r->save, "%s\n", s);
    free(s);
    cJSON_Delete(j);
}

static void maybe_end(lrun *r) {
    int all_sent = r->stopping || (r->o->num_requests > 0 && r->issued >= r->o->num_requests);
    if (all_sent && r->inflight == 0 && r->retrying == 0) {
        if (r->t_end == 0) r->t_end = flint_server_now();
        event_base_loopbreak(r->base);
    }
}

/* A client whose connection failed waits a moment before it tries again, so that a server that
 * went away yields a bounded number of failures rather than a connect storm. */
static void retry_later(evutil_socket_t fd, short what, void *arg) {
    lrun *r = arg;
    r->retrying--;
    flint_load_start_request(r, NULL);
    maybe_end(r);
}

void flint_load_request_done(lrun *r, lconn *c, lreq *q) {
    const flint_load_options *o = r->o;
    int conn_failed = c == NULL && q->err[0];
    q->t_done = flint_server_now();
    r->inflight--;
    validate(r, q);
    if (!q->err[0]) {
        r->completed++;
        double e2e = q->t_done - q->t_send, ttft = q->t_first > 0 ? q->t_first - q->t_send : e2e;
        double tpot = q->completion_tokens > 1 ? (e2e - ttft) / (q->completion_tokens - 1) : -1;
        flint_dvec_push(&r->e2el, e2e);
        flint_dvec_push(&r->ttft, ttft);
        if (tpot >= 0) flint_dvec_push(&r->tpot, tpot);
        for (int i = 0; i < q->itl.n; i++) flint_dvec_push(&r->itl, q->itl.v[i]);
        for (int i = 0; i < q->itl_tok.n; i++) flint_dvec_push(&r->itl_tok, q->itl_tok.v[i]);
        r->out_tokens += q->completion_tokens;
        r->in_tokens += q->prompt_tokens;
        int good = (o->slo_ttft_ms <= 0 || ttft * 1e3 <= o->slo_ttft_ms) &&
                   (o->slo_e2el_ms <= 0 || e2e * 1e3 <= o->slo_e2el_ms) &&
                   (o->slo_tpot_ms <= 0 || (tpot >= 0 ? tpot * 1e3 <= o->slo_tpot_ms : 0));
        r->good += good;
    } else {
        r->failed++;
        count_failure(r, q->err);
        if (r->failed <= 5) flint_log_warn("load: request %d failed: %s", q->idx, q->err);
    }
    save(r, q);
    if (q->timeout_ev) event_free(q->timeout_ev);
    free(q->body);
    flint_sbuf_free(&q->text);
    flint_sbuf_free(&q->raw);
    free(q->itl.v);
    free(q->itl_tok.v);
    free(q);

    if (c && !c->keep_alive) {
        flint_load_conn_close(c);
        c = NULL;
    }
    if (o->request_rate <= 0 && conn_failed && !r->stopping) {
        struct timeval tv = {0, 100000};
        r->retrying++;
        event_base_once(r->base, -1, EV_TIMEOUT, retry_later, r, &tv);
    } else if (o->request_rate <= 0) { /* closed loop: this client sends its next request */
        flint_load_start_request(r, c);
    } else if (r->waiting_arrivals > 0 && !r->stopping) {
        r->waiting_arrivals--;
        flint_load_start_request(r, c);
    } else if (c) {
        c->next_idle = r->idle;
        r->idle = c;
    }
    maybe_end(r);
}

/* ==== schedule ==== */

static double uniform01(uint64_t *st) {
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    return ((*st >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static uint64_t arrival_rng;

static void on_arrival(evutil_socket_t fd, short what, void *arg) {
    lrun *r = arg;
    if (r->stopping) return;
    if (r->o->num_requests > 0 && r->issued + r->waiting_arrivals >= r->o->num_requests) return;
    if (r->inflight < r->o->concurrency) {
        lconn *c = r->idle;
        if (c) r->idle = c->next_idle;
        flint_load_start_request(r, c);
    } else {
        r->waiting_arrivals++;
    }
    double dt = -log(1.0 - uniform01(&arrival_rng)) / r->o->request_rate;
    struct timeval tv = {(time_t)dt, (suseconds_t)((dt - floor(dt)) * 1e6)};
    evtimer_add(r->arrival_ev, &tv);
}

static void on_stop(evutil_socket_t fd, short what, void *arg) {
    lrun *r = arg;
    r->stopping = 1;
    r->waiting_arrivals = 0;
    while (r->idle) {
        lconn *c = r->idle;
        r->idle = c->next_idle;
        flint_load_conn_close(c);
    }
    maybe_end(r);
}

/* ==== /metrics ==== */

static double metric(const char *text, const char *name) {
    size_t n = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (!strncmp(p, name, n) && p[n] == ' ') return strtod(p + n + 1, NULL);
    return 0;
}

static double rss_mb(lrun *r) {
    flint_sbuf b = {0};
    flint_err err = {0};
    double v = flint_load_http_get(r, "/metrics", &b, &err) ? 0 : metric(b.p, "process_resident_memory_bytes") / 1048576.0;
    flint_sbuf_free(&b);
    return v;
}

static void on_rss(evutil_socket_t fd, short what, void *arg) {
    lrun *r = arg;
    double v = rss_mb(r);
    if (v > 0) flint_dvec_push(&r->rss_mb, v);
}

typedef struct spec_counters {
    double drafts, draft_tokens, accepted, per_pos[16];
    int have;
} spec_counters;

static void scrape_spec(lrun *r, spec_counters *sc) {
    flint_sbuf b = {0};
    flint_err err = {0};
    memset(sc, 0, sizeof *sc);
    if (flint_load_http_get(r, "/metrics", &b, &err)) return;
    sc->have = strstr(b.p, "flint:spec_decode_num_drafts") != NULL;
    sc->drafts = metric(b.p, "flint:spec_decode_num_drafts_total");
    sc->draft_tokens = metric(b.p, "flint:spec_decode_num_draft_tokens_total");
    sc->accepted = metric(b.p, "flint:spec_decode_num_accepted_tokens_total");
    for (int i = 0; i < 16; i++) {
        char name[128];
        snprintf(name, sizeof name, "flint:spec_decode_num_accepted_tokens_per_pos_total{position=\"%d\"}", i);
        sc->per_pos[i] = metric(b.p, name);
    }
    flint_sbuf_free(&b);
}

/* ==== report ==== */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const flint_dvec *d, double p) { /* linear interpolation, as numpy */
    if (d->n == 0) return 0;
    double pos = p / 100.0 * (d->n - 1);
    int lo = (int)floor(pos), hi = lo + 1 < d->n ? lo + 1 : lo;
    return d->v[lo] + (d->v[hi] - d->v[lo]) * (pos - lo);
}

static cJSON *dist(flint_dvec *d, const char *label, int quiet) {
    qsort(d->v, (size_t)d->n, sizeof(double), cmp_double);
    double sum = 0;
    for (int i = 0; i < d->n; i++) sum += d->v[i];
    cJSON *j = cJSON_CreateObject();
    double mean = d->n ? sum / d->n * 1e3 : 0;
    cJSON_AddNumberToObject(j, "mean", mean);
    cJSON_AddNumberToObject(j, "p50", pct(d, 50) * 1e3);
    cJSON_AddNumberToObject(j, "p90", pct(d, 90) * 1e3);
    cJSON_AddNumberToObject(j, "p99", pct(d, 99) * 1e3);
    cJSON_AddNumberToObject(j, "n", d->n);
    if (!quiet)
        printf("%-26s mean %9.2f  p50 %9.2f  p90 %9.2f  p99 %9.2f  (n=%d)\n", label, mean, pct(d, 50) * 1e3,
               pct(d, 90) * 1e3, pct(d, 99) * 1e3, d->n);
    return j;
}

static int report(lrun *r, const char *dataset_path, const spec_counters *a, const spec_counters *b, flint_err *err) {
    const flint_load_options *o = r->o;
    int q = o->quiet;
    double dur = r->t_end - r->t_start;
    if (dur <= 0) dur = 1e-9;
    cJSON *j = cJSON_CreateObject();
    char date[64];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    struct utsname un;
    uname(&un);
    cJSON_AddStringToObject(j, "date", date);
    cJSON *m = cJSON_AddObjectToObject(j, "machine");
    cJSON_AddStringToObject(m, "host", un.nodename);
    cJSON_AddStringToObject(m, "system", un.sysname);
    cJSON_AddStringToObject(m, "arch", un.machine);
    cJSON_AddNumberToObject(m, "cpus", (double)sysconf(_SC_NPROCESSORS_ONLN));
    cJSON_AddStringToObject(j, "url", o->url);
    cJSON_AddStringToObject(j, "model", r->model);
    cJSON_AddStringToObject(j, "endpoint", o->endpoint);
    cJSON_AddStringToObject(j, "dataset", dataset_path);
    cJSON_AddNumberToObject(j, "num_prompts", r->n_prompts);
    cJSON_AddNumberToObject(j, "concurrency", o->concurrency);
    cJSON_AddNumberToObject(j, "request_rate", o->request_rate);
    cJSON_AddNumberToObject(j, "max_tokens", o->max_tokens);
    cJSON_AddNumberToObject(j, "temperature", o->temperature);
    cJSON_AddBoolToObject(j, "stream", o->stream);
    cJSON_AddNumberToObject(j, "duration_s", dur);
    cJSON_AddNumberToObject(j, "completed", r->completed);
    cJSON_AddNumberToObject(j, "failed", r->failed);
    cJSON *fr = cJSON_AddObjectToObject(j, "failures");
    for (int i = 0; i < r->n_fail_reasons; i++) cJSON_AddNumberToObject(fr, r->fail_reason[i], r->fail_count[i]);
    cJSON_AddNumberToObject(j, "request_throughput", r->completed / dur);
    cJSON_AddNumberToObject(j, "output_throughput", (double)r->out_tokens / dur);
    cJSON_AddNumberToObject(j, "total_token_throughput", (double)(r->out_tokens + r->in_tokens) / dur);
    cJSON_AddNumberToObject(j, "total_output_tokens", (double)r->out_tokens);
    cJSON_AddNumberToObject(j, "total_input_tokens", (double)r->in_tokens);
    if (!q) {
        printf("============ flint load ============\n");
        printf("%s %s, %s (%d prompts), %s%g, max_tokens %d\n", o->url, o->endpoint, dataset_path, r->n_prompts,
               o->request_rate > 0 ? "rate " : "concurrency ", o->request_rate > 0 ? o->request_rate : o->concurrency,
               o->max_tokens);
        printf("duration %.1f s, completed %d, failed %d\n", dur, r->completed, r->failed);
        for (int i = 0; i < r->n_fail_reasons; i++) printf("  failed: %d x %s\n", r->fail_count[i], r->fail_reason[i]);
        printf("requests %.2f/s, output %.1f tok/s, total %.1f tok/s\n", r->completed / dur, r->out_tokens / dur,
               (r->out_tokens + r->in_tokens) / dur);
        printf("%-26s %9s\n", "(ms)", "");
    }
    cJSON_AddItemToObject(j, "ttft_ms", dist(&r->ttft, "TTFT", q));
    cJSON_AddItemToObject(j, "tpot_ms", dist(&r->tpot, "TPOT", q));
    cJSON_AddItemToObject(j, "itl_ms", dist(&r->itl, "ITL (per chunk)", q));
    cJSON_AddItemToObject(j, "itl_per_token_ms", dist(&r->itl_tok, "ITL (per token)", q));
    cJSON_AddItemToObject(j, "e2el_ms", dist(&r->e2el, "E2E latency", q));
    if (o->slo_ttft_ms > 0 || o->slo_tpot_ms > 0 || o->slo_e2el_ms > 0) {
        cJSON *g = cJSON_AddObjectToObject(j, "goodput");
        cJSON_AddNumberToObject(g, "slo_ttft_ms", o->slo_ttft_ms);
        cJSON_AddNumberToObject(g, "slo_tpot_ms", o->slo_tpot_ms);
        cJSON_AddNumberToObject(g, "slo_e2el_ms", o->slo_e2el_ms);
        cJSON_AddNumberToObject(g, "good_requests", r->good);
        cJSON_AddNumberToObject(g, "requests_per_s", r->good / dur);
        if (!q) printf("goodput %.2f req/s (%d of %d requests met the SLOs)\n", r->good / dur, r->good, r->completed);
    }
    if (a->have && b->have) {
        cJSON *s = cJSON_AddObjectToObject(j, "spec_decode");
        double drafts = b->drafts - a->drafts, dt = b->draft_tokens - a->draft_tokens, acc = b->accepted - a->accepted;
        cJSON_AddNumberToObject(s, "num_drafts", drafts);
        cJSON_AddNumberToObject(s, "num_draft_tokens", dt);
        cJSON_AddNumberToObject(s, "num_accepted_tokens", acc);
        cJSON_AddNumberToObject(s, "acceptance_rate", dt > 0 ? acc / dt : 0);
        cJSON_AddNumberToObject(s, "acceptance_length", drafts > 0 ? 1 + acc / drafts : 0);
        cJSON *pp = cJSON_AddArrayToObject(s, "per_position_acceptance_rate");
        for (int i = 0; i < 16; i++) {
            double v = b->per_pos[i] - a->per_pos[i];
            if (i > 0 && b->per_pos[i] == 0 && a->per_pos[i] == 0 && v == 0 && b->per_pos[i - 1] == 0) break;
            cJSON_AddItemToArray(pp, cJSON_CreateNumber(drafts > 0 ? v / drafts : 0));
        }
        if (!q)
            printf("speculative: %.0f drafts, %.0f draft tokens, %.0f accepted; acceptance rate %.3f, acceptance "
                   "length %.3f\n", drafts, dt, acc, dt > 0 ? acc / dt : 0, drafts > 0 ? 1 + acc / drafts : 0);
    }
    if (r->rss_mb.n) {
        cJSON *rs = cJSON_AddArrayToObject(j, "server_rss_mb");
        for (int i = 0; i < r->rss_mb.n; i++) cJSON_AddItemToArray(rs, cJSON_CreateNumber(r->rss_mb.v[i]));
        if (!q) printf("server RSS %.1f MB -> %.1f MB\n", r->rss_mb.v[0], r->rss_mb.v[r->rss_mb.n - 1]);
    }
    int rc = 0;
    if (o->output) {
        char *s = cJSON_Print(j);
        FILE *f = fopen(o->output, "w");
        if (!f || fputs(s, f) < 0 || fputc('\n', f) < 0) rc = flint_err_set(err, FLINT_ERR_IO, "cannot write %s", o->output);
        if (f) fclose(f);
        free(s);
    }
    cJSON_Delete(j);
    return rc;
}

/* ==== run ==== */

static int setup(lrun *r, flint_err *err) {
    const flint_load_options *o = r->o;
    struct evhttp_uri *u = evhttp_uri_parse(o->url);
    if (!u || !evhttp_uri_get_host(u) || (evhttp_uri_get_scheme(u) && strcmp(evhttp_uri_get_scheme(u), "http"))) {
        if (u) evhttp_uri_free(u);
        return flint_err_set(err, FLINT_ERR_INVALID, "--url must look like http://HOST:PORT (got %s)", o->url);
    }
    snprintf(r->host, sizeof r->host, "%s", evhttp_uri_get_host(u));
    r->port = evhttp_uri_get_port(u) > 0 ? evhttp_uri_get_port(u) : 80;
    evhttp_uri_free(u);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", r->port);
    if (getaddrinfo(r->host, port, &hints, &ai) || !ai)
        return flint_err_set(err, FLINT_ERR_IO, "cannot resolve %s", r->host);
    memcpy(&r->addr, ai->ai_addr, ai->ai_addrlen);
    r->addrlen = ai->ai_addrlen;
    freeaddrinfo(ai);
    if (strcmp(o->endpoint, "chat") && strcmp(o->endpoint, "completions"))
        return flint_err_set(err, FLINT_ERR_INVALID, "--endpoint is chat or completions");
    r->path = !strcmp(o->endpoint, "chat") ? "/v1/chat/completions" : "/v1/completions";
    if (o->model) {
        snprintf(r->model, sizeof r->model, "%s", o->model);
        return 0;
    }
    flint_sbuf b = {0};
    if (flint_load_http_get(r, "/v1/models", &b, err)) {
        flint_sbuf_free(&b);
        return -1;
    }
    cJSON *j = cJSON_Parse(b.p);
    flint_sbuf_free(&b);
    const cJSON *d = j ? cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "data"), 0) : NULL;
    const cJSON *id = d ? cJSON_GetObjectItemCaseSensitive(d, "id") : NULL;
    if (!cJSON_IsString(id)) {
        cJSON_Delete(j);
        return flint_err_set(err, FLINT_ERR_FORMAT, "GET /v1/models did not name a model");
    }
    snprintf(r->model, sizeof r->model, "%s", id->valuestring);
    cJSON_Delete(j);
    return 0;
}

int flint_load_run(const flint_load_options *o, flint_load_result *res, flint_err *err) {
    lrun R, *r = &R;
    memset(r, 0, sizeof R);
    r->o = o;
    memset(res, 0, sizeof *res);
    char dataset_path[4096];
    int rc = -1;
    if (o->concurrency < 1 || o->max_tokens < 1 || o->duration_s <= 0 || o->timeout_s <= 0) {
        flint_err_set(err, FLINT_ERR_INVALID, "concurrency, max_tokens, duration and timeout must be positive");
        return -1;
    }
    if (resolve_dataset(o, dataset_path, sizeof dataset_path, err) || load_prompts(r, dataset_path, err) ||
        setup(r, err))
        goto done;
    if (o->save_requests && !(r->save = fopen(o->save_requests, "w"))) {
        flint_err_set(err, FLINT_ERR_IO, "cannot write %s", o->save_requests);
        goto done;
    }
    spec_counters before, after;
    scrape_spec(r, &before);
    r->base = event_base_new();
    r->stop_ev = evtimer_new(r->base, on_stop, r);
    r->rss_ev = event_new(r->base, -1, EV_PERSIST, on_rss, r);
    struct timeval tv = {(time_t)o->duration_s, (suseconds_t)((o->duration_s - floor(o->duration_s)) * 1e6)};
    evtimer_add(r->stop_ev, &tv);
    struct timeval rss_tv = {5, 0};
    event_add(r->rss_ev, &rss_tv);
    on_rss(-1, 0, r);
    r->t_start = flint_server_now();
    if (o->request_rate > 0) {
        arrival_rng = o->seed * 2654435761u + 1;
        r->arrival_ev = evtimer_new(r->base, on_arrival, r);
        on_arrival(-1, 0, r);
    } else {
        for (int i = 0; i < o->concurrency; i++) flint_load_start_request(r, NULL);
    }
    maybe_end(r);
    if (!(r->t_end > 0)) event_base_dispatch(r->base);
    if (r->t_end == 0) r->t_end = flint_server_now();
    on_rss(-1, 0, r);
    scrape_spec(r, &after);
    res->completed = r->completed;
    res->failed = r->failed;
    rc = report(r, dataset_path, &before, &after, err);
done:
    if (r->save) fclose(r->save);
    while (r->idle) {
        lconn *c = r->idle;
        r->idle = c->next_idle;
        flint_load_conn_close(c);
    }
    if (r->arrival_ev) event_free(r->arrival_ev);
    if (r->stop_ev) event_free(r->stop_ev);
    if (r->rss_ev) event_free(r->rss_ev);
    if (r->base) event_base_free(r->base);
    for (int i = 0; i < r->n_prompts; i++) free(r->prompts[i]);
    free(r->prompts);
    free(r->ttft.v);
    free(r->tpot.v);
    free(r->e2el.v);
    free(r->itl.v);
    free(r->itl_tok.v);
    free(r->rss_mb.v);
    return rc;
}
