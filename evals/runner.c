/* The runner (continuous batching of eval prompts over one engine) and the acceptance summaries
 * (see evals_internal.h).
 *
 * Why the engine gets 2 x batch session slots: a finished session's slot is freed at the start of
 * the next engine step, but the next prompt must be added before that step to keep the batch
 * full; the runner itself never has more than `batch` conversations in flight. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/chat.h"
#include "evals/evals_internal.h"
#include "evals/stats.h"

typedef struct slot {
    int prompt; /* index, -1 when free */
    int turn;
    char *text; /* this turn's answer so far (multi-turn only) */
    size_t len;
} slot;

struct flint_runner {
    flint_engine *e;
    flint_run_prompt *p;
    int n, next, active;
    flint_runner_config c;
    int max_sid;
    slot *by_sid; /* engine session id -> slot */
    double busy_ms;
    long steps;
};

static uint64_t fnv(uint64_t h, int32_t t) {
    uint32_t u = (uint32_t)t;
    for (int i = 0; i < 4; i++) {
        h ^= (u >> (8 * i)) & 0xff;
        h *= 0x100000001b3ull;
    }
    return h;
}

flint_runner *flint_runner_new(flint_engine *e, flint_run_prompt *p, int n, const flint_runner_config *c) {
    flint_runner *r = flint_xcalloc(1, sizeof *r);
    r->e = e;
    r->p = p;
    r->n = n;
    r->c = *c;
    r->max_sid = 4 * c->batch + 8;
    r->by_sid = flint_xcalloc((size_t)r->max_sid, sizeof *r->by_sid);
    for (int i = 0; i < r->max_sid; i++) r->by_sid[i].prompt = -1;
    for (int i = 0; i < n; i++) p[i].hash = 0xcbf29ce484222325ull;
    return r;
}

void flint_runner_free(flint_runner *r) {
    if (!r) return;
    for (int i = 0; i < r->max_sid; i++) free(r->by_sid[i].text);
    free(r->by_sid);
    free(r);
}

void flint_run_prompts_free(flint_run_prompt *p, int n) {
    if (!p) return;
    for (int i = 0; i < n; i++) {
        if (p[i].answers)
            for (int t = 0; t < p[i].item->n_turns; t++) free(p[i].answers[t]);
        free(p[i].answers);
    }
    free(p);
}

double flint_runner_busy_ms(const flint_runner *r) { return r->busy_ms; }
long flint_runner_steps(const flint_runner *r) { return r->steps; }

/* Add turn `turn` of prompt i to the engine. Returns 1 when added, 0 when the conversation ends
 * here (the turn does not fit the context), -1 on error. */
static int start_turn(flint_runner *r, int i, int turn, flint_err *err) {
    flint_run_prompt *p = &r->p[i];
    int32_t *ids = NULL;
    int n = 0;
    if (flint_dataset_encode(flint_engine_tokenizer(r->e), p->item, turn, (const char *const *)p->answers,
                             r->c.chat_format, &ids, &n, err))
        return flint_err_prefix(err, "prompt %s: ", p->item->id);
    if (n < 1 || (long)n + r->c.max_tokens > flint_engine_max_model_len(r->e)) {
        free(ids);
        if (turn == 0) p->skipped = 1;
        return 0;
    }
    flint_request_params rp;
    flint_request_params_default(&rp);
    rp.sampling = r->c.sampling;
    rp.sampling.seed = p->seed;
    rp.max_tokens = r->c.max_tokens;
    rp.ignore_eos = r->c.ignore_eos;
    int sid = flint_engine_add(r->e, ids, n, &rp, err);
    free(ids);
    if (sid < 0) return flint_err_prefix(err, "prompt %s: ", p->item->id);
    if (sid >= r->max_sid) return flint_err_set(err, FLINT_ERR_INTERNAL, "session id %d out of range", sid);
    slot *s = &r->by_sid[sid];
    s->prompt = i;
    s->turn = turn;
    s->len = 0;
    if (turn == 0) p->prompt_tokens = n;
    return 1;
}

int flint_runner_step(flint_runner *r, flint_err *err) {
    while (r->active < r->c.batch && r->next < r->n) {
        int i = r->next++;
        if (r->c.multi_turn && r->p[i].item->n_turns > 1 && !r->p[i].answers)
            r->p[i].answers = flint_xcalloc((size_t)r->p[i].item->n_turns, sizeof(char *));
        int rc = start_turn(r, i, 0, err);
        if (rc < 0) return -1;
        r->active += rc;
    }
    if (r->active == 0) return 0;
    /* who takes part in this step: every prompt with a session now */
    int *part = flint_xmalloc(sizeof(int) * (size_t)r->max_sid), n_part = 0;
    for (int sid = 0; sid < r->max_sid; sid++)
        if (r->by_sid[sid].prompt >= 0) part[n_part++] = r->by_sid[sid].prompt;
    const flint_step_event *ev;
    int n_ev;
    double t0 = flint_evals_now_ms();
    if (flint_engine_step(r->e, &ev, &n_ev, err)) {
        free(part);
        return -1;
    }
    double dt = flint_evals_now_ms() - t0;
    r->busy_ms += dt;
    r->steps++;
    for (int k = 0; k < n_part; k++) r->p[part[k]].active_ms += dt;
    free(part);
    for (int k = 0; k < n_ev; k++) {
        if (ev[k].sid < 0 || ev[k].sid >= r->max_sid || r->by_sid[ev[k].sid].prompt < 0) continue;
        slot *s = &r->by_sid[ev[k].sid];
        flint_run_prompt *p = &r->p[s->prompt];
        for (int t = 0; t < ev[k].n_tokens; t++) p->hash = fnv(p->hash, ev[k].tokens[t]);
        p->output_tokens += ev[k].n_tokens;
        int more = p->answers && s->turn + 1 < p->item->n_turns;
        if (more && ev[k].text_len) {
            s->text = flint_xrealloc(s->text, s->len + ev[k].text_len + 1);
            memcpy(s->text + s->len, ev[k].text, ev[k].text_len);
            s->len += ev[k].text_len;
            s->text[s->len] = 0;
        }
        if (ev[k].finish == FLINT_FINISH_NONE) continue;
        flint_spec_stats_add(&p->stats, ev[k].stats);
        p->finish = ev[k].finish;
        p->turns = s->turn + 1;
        int i = s->prompt, turn = s->turn;
        s->prompt = -1;
        if (more) {
            p->answers[turn] = flint_xstrdup(s->len ? s->text : "");
            int rc = start_turn(r, i, turn + 1, err);
            if (rc < 0) return -1;
            if (rc == 1) continue; /* still active */
        }
        r->active--;
    }
    return r->active > 0 || r->next < r->n ? 1 : 0;
}

/* ==== summaries ==== */

double flint_prompt_al(const flint_run_prompt *p) {
    return p->stats.steps > 0 ? 1.0 + (double)p->stats.accepted / (double)p->stats.steps : NAN;
}

void flint_al_summarize(const flint_run_prompt *p, const int *idx, int n, int reps, double level,
                        flint_al_summary *out) {
    memset(out, 0, sizeof *out);
    double *num = flint_xmalloc(sizeof(double) * (size_t)(n + 1));
    double *den = flint_xmalloc(sizeof(double) * (size_t)(n + 1));
    int m = 0;
    double al_sum = 0;
    for (int k = 0; k < n; k++) {
        const flint_run_prompt *q = &p[idx ? idx[k] : k];
        if (q->skipped) {
            out->skipped++;
            continue;
        }
        out->prompts++;
        out->prompt_tokens += q->prompt_tokens;
        out->output_tokens += q->output_tokens;
        out->active_ms += q->active_ms;
        flint_spec_stats_add(&out->stats, &q->stats);
        if (q->stats.steps > 0) {
            out->with_steps++;
            al_sum += flint_prompt_al(q);
        }
        num[m] = (double)q->stats.accepted;
        den[m] = (double)q->stats.steps;
        m++;
    }
    out->al = out->stats.steps ? flint_spec_stats_mean_al(&out->stats) : NAN;
    out->al_prompt_mean = out->with_steps ? al_sum / out->with_steps : NAN;
    out->al_lo = out->al_hi = NAN;
    if (m > 0 && out->stats.steps > 0 &&
        flint_stats_bootstrap_ratio(num, den, m, reps, level, FLINT_EVAL_BOOT_SEED, &out->al_lo, &out->al_hi) == 0) {
        out->al_lo += 1.0;
        out->al_hi += 1.0;
    }
    free(num);
    free(den);
}

double flint_al_uncond(const flint_al_summary *s, int i) {
    return s->stats.steps ? (double)s->stats.accepted_per_pos[i] / (double)s->stats.steps : NAN;
}

double flint_al_cond(const flint_al_summary *s, int i) {
    int64_t prev = i == 0 ? s->stats.steps : s->stats.accepted_per_pos[i - 1];
    return prev ? (double)s->stats.accepted_per_pos[i] / (double)prev : NAN;
}

double flint_al_tokens_per_s_user(const flint_al_summary *s) {
    return s->active_ms > 0 ? s->output_tokens / (s->active_ms / 1e3) : 0;
}

/* NaN and infinities are not JSON: write null. */
static void add_num(cJSON *o, const char *k, double v) {
    cJSON_AddItemToObject(o, k, isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull());
}

/* Round to 12 significant digits: sums and ratios are exact enough, and the JSON stays readable. */
static double r12(double v) {
    if (!isfinite(v) || v == 0) return v;
    char b[40];
    snprintf(b, sizeof b, "%.12g", v);
    return strtod(b, NULL);
}

cJSON *flint_al_summary_json(const flint_al_summary *s, int K, double level) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "prompts", s->prompts);
    cJSON_AddNumberToObject(o, "skipped_prompts", s->skipped);
    cJSON_AddNumberToObject(o, "prompt_tokens", (double)s->prompt_tokens);
    cJSON_AddNumberToObject(o, "output_tokens", (double)s->output_tokens);
    add_num(o, "mean_acceptance_length", r12(s->al));
    cJSON *ci = cJSON_AddArrayToObject(o, "mean_acceptance_length_ci");
    cJSON_AddItemToArray(ci, isfinite(s->al_lo) ? cJSON_CreateNumber(r12(s->al_lo)) : cJSON_CreateNull());
    cJSON_AddItemToArray(ci, isfinite(s->al_hi) ? cJSON_CreateNumber(r12(s->al_hi)) : cJSON_CreateNull());
    add_num(o, "confidence_level", level);
    add_num(o, "mean_acceptance_length_per_prompt", r12(s->al_prompt_mean));
    add_num(o, "draft_acceptance_rate", r12(s->stats.draft_tokens ? flint_spec_stats_acceptance_rate(&s->stats) : NAN));
    cJSON *u = cJSON_AddArrayToObject(o, "acceptance_rate_per_position");
    cJSON *c = cJSON_AddArrayToObject(o, "conditional_acceptance_rate_per_position");
    cJSON *d = cJSON_AddArrayToObject(o, "drafted_per_position");
    for (int i = 0; i < K; i++) {
        double a = flint_al_uncond(s, i), b = flint_al_cond(s, i);
        cJSON_AddItemToArray(u, isfinite(a) ? cJSON_CreateNumber(r12(a)) : cJSON_CreateNull());
        cJSON_AddItemToArray(c, isfinite(b) ? cJSON_CreateNumber(r12(b)) : cJSON_CreateNull());
        cJSON_AddItemToArray(d, cJSON_CreateNumber((double)s->stats.drafted_per_pos[i]));
    }
    cJSON_AddItemToObject(o, "speculative", flint_spec_stats_json(&s->stats, K));
    return o;
}
