/* The engine thread: the only caller of verifier/engine.h (which is single-threaded by design).
 * It loads the model, then runs continuous batching: between two steps it takes the new jobs out
 * of the mutexed inbox, applies cancellations, admits waiting jobs into free engine slots (the
 * engine itself admits them to the KV pool and chunks their prefill), runs one step and publishes
 * what every session emitted into its job under out_mu, then wakes the loop thread once with
 * event_active(). It never blocks on anything but its own inbox while there is no work, so a
 * slow client can only ever make the loop thread's buffers grow, never the batch wait. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "core/log.h"
#include "server/server_internal.h"

void flint_server_wake_loop(flint_server *s) { event_active(s->wake_ev, EV_READ, 0); }

/* ==== publishing (engine thread, under out_mu) ==== */

static void mark_ready(flint_server *s, flint_server_job *j) {
    if (j->on_ready) return;
    j->on_ready = 1;
    j->ready_next = s->ready_head;
    s->ready_head = j;
}

/* A job the engine never ran (refused, cancelled while waiting, engine failure). */
static void finish_unrun(flint_server *s, flint_server_job *j, int status, const char *msg) {
    pthread_mutex_lock(&s->out_mu);
    j->out_done = 1;
    j->out_finish = FLINT_FINISH_CANCELLED;
    j->out_status = status;
    snprintf(j->out_err, sizeof j->out_err, "%.250s", msg ? msg : "");
    j->out_t_done = flint_server_now();
    mark_ready(s, j);
    pthread_mutex_unlock(&s->out_mu);
    /* wake the loop now: the step that may follow can emit no event (e.g. one that only retires
     * finished sessions) and would then leave this answer unsent until the next wake */
    flint_server_wake_loop(s);
}

static void publish_events(flint_server *s, flint_server_job **by_sid, const flint_step_event *ev, int n,
                           int *n_engine) {
    double now = flint_server_now();
    pthread_mutex_lock(&s->out_mu);
    for (int i = 0; i < n; i++) {
        flint_server_job *j = by_sid[ev[i].sid];
        FLINT_ASSERT(j != NULL); /* every live session was added by this thread for a job */
        if (ev[i].text_len) flint_sbuf_add(&j->out_text, ev[i].text, ev[i].text_len);
        if (j->carry_tokens && ev[i].n_tokens)
            flint_tokbuf_push(&j->out_tok, ev[i].n_tokens, ev[i].tokens, j->params.logprobs ? ev[i].logprobs : NULL,
                              ev[i].n_top, ev[i].top_ids, ev[i].top_logprobs);
        j->out_prompt_tokens = ev[i].prompt_tokens;
        j->out_cached_tokens = ev[i].cached_tokens;
        j->out_completion_tokens = ev[i].completion_tokens;
        if (ev[i].n_tokens > 0 && j->out_t_first == 0) j->out_t_first = now;
        if (ev[i].finish != FLINT_FINISH_NONE) {
            j->out_finish = ev[i].finish;
            j->out_stats = *ev[i].stats;
            j->out_done = 1;
            j->out_t_done = now;
            by_sid[ev[i].sid] = NULL; /* the engine frees the slot at the next step */
            (*n_engine)--;
        }
        mark_ready(s, j);
    }
    pthread_mutex_unlock(&s->out_mu);
}

static void publish_snapshot(flint_server *s, int n_waiting, int64_t steps) {
    pthread_mutex_lock(&s->snap_mu);
    s->snap.pooled = *flint_engine_stats(s->engine);
    s->snap.kv_free = flint_engine_kv_blocks_free(s->engine);
    s->snap.kv_total = flint_engine_kv_blocks_total(s->engine);
    s->snap.running = flint_engine_active(s->engine);
    s->snap.waiting = n_waiting;
    s->snap.steps = steps;
    flint_engine_prefix_stats(s->engine, &s->snap.prefix_queries, &s->snap.prefix_hits, &s->snap.prefix_blocks);
    flint_engine_device_stats(s->engine, &s->snap.graphs, &s->snap.device_bytes);
    flint_engine_host_time(s->engine, &s->snap.host);
    pthread_mutex_unlock(&s->snap_mu);
}

void flint_server_engine_snapshot(flint_server *s, flint_engine_snapshot *out) {
    pthread_mutex_lock(&s->snap_mu);
    *out = s->snap;
    pthread_mutex_unlock(&s->snap_mu);
}

/* ==== the thread ==== */

static void *engine_main(void *arg) {
    flint_server *s = arg;
    /* Signals belong to the loop thread (libevent's evsignal); the engine's OpenMP workers inherit
     * this mask. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);

    if (s->o.debug_load_delay_ms > 0) {
        struct timespec ts = {s->o.debug_load_delay_ms / 1000, (long)(s->o.debug_load_delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    flint_err err = {0};
    s->engine = flint_engine_open(&s->eo, &err);
    if (!s->engine) {
        s->load_err = err;
        atomic_store(&s->state, FLINT_SRV_FAILED);
        flint_server_wake_loop(s);
        return NULL;
    }
    /* The facts the loop thread needs, copied here so that it never calls the engine. */
    s->tok = flint_engine_tokenizer(s->engine);
    s->max_model_len = flint_engine_max_model_len(s->engine);
    s->K = flint_engine_num_speculative_tokens(s->engine);
    s->has_drafter = flint_engine_has_drafter(s->engine);
    s->dynamic_draft = flint_engine_dynamic_draft(s->engine);
    s->vocab = flint_engine_vocab_size(s->engine);
    publish_snapshot(s, 0, 0);
    atomic_store(&s->state, FLINT_SRV_READY); /* release: the facts above are visible to the loop */
    flint_server_wake_loop(s);

    int S = s->eo.max_seqs, n_engine = 0, n_waiting = 0, retire = 0, failed = 0;
    int64_t steps = 0;
    flint_server_job **by_sid = flint_xcalloc((size_t)S, sizeof *by_sid);
    flint_server_job *wait_head = NULL, *wait_tail = NULL; /* FIFO in front of the engine's slots */
    for (;;) {
        pthread_mutex_lock(&s->in_mu);
        while (!s->stop_engine && !s->in_head && !wait_head && n_engine == 0 && !retire)
            pthread_cond_wait(&s->in_cv, &s->in_mu);
        if (s->in_head) {
            if (wait_tail) wait_tail->eng_next = s->in_head;
            else wait_head = s->in_head;
            wait_tail = s->in_tail;
            for (flint_server_job *j = s->in_head; j; j = j->eng_next) n_waiting++;
            s->in_head = s->in_tail = NULL;
        }
        int stop = s->stop_engine;
        pthread_mutex_unlock(&s->in_mu);
        /* The loop thread asks us to stop only once nothing is in flight. */
        if (stop && !wait_head && n_engine == 0) break;

        /* cancellations: waiting jobs leave the FIFO; running ones are cancelled in the engine,
         * which frees their slot and KV blocks at the next step */
        for (flint_server_job **pp = &wait_head, *prev = NULL; *pp;) {
            flint_server_job *j = *pp;
            if (atomic_load(&j->cancel) || failed) {
                *pp = j->eng_next;
                if (wait_tail == j) wait_tail = prev;
                n_waiting--;
                finish_unrun(s, j, failed ? 503 : 0, failed ? "the engine failed" : NULL);
                continue;
            }
            prev = j;
            pp = &j->eng_next;
        }
        for (int i = 0; i < S; i++)
            if (by_sid[i] && !by_sid[i]->cancel_sent && atomic_load(&by_sid[i]->cancel)) {
                flint_engine_cancel(s->engine, i);
                by_sid[i]->cancel_sent = 1;
            }
        /* admission into free slots, oldest first */
        while (!failed && wait_head && n_engine < S) {
            flint_server_job *j = wait_head;
            flint_err aerr = {0};
            int sid = flint_engine_add(s->engine, j->prompt, j->n_prompt, &j->params, &aerr);
            if (sid < 0 && aerr.code == FLINT_ERR_NOMEM) { /* a finished slot frees at the next step */
                retire = 1;
                break;
            }
            wait_head = j->eng_next;
            if (!wait_head) wait_tail = NULL;
            n_waiting--;
            if (sid < 0) {
                finish_unrun(s, j, 400, aerr.msg);
                continue;
            }
            FLINT_ASSERT(sid < S && by_sid[sid] == NULL);
            j->sid = sid;
            by_sid[sid] = j;
            n_engine++;
        }
        if (failed || (n_engine == 0 && !retire)) {
            if (!failed) publish_snapshot(s, n_waiting, steps);
            flint_server_wake_loop(s);
            continue;
        }
        const flint_step_event *ev;
        int n_ev = 0;
        if (flint_engine_step(s->engine, &ev, &n_ev, &err)) {
            /* An internal error: the engine must not be used again. Every job gets an error and
             * the loop thread shuts the server down (it reports the message and exits 1). */
            flint_log_error("engine step failed: %s", err.msg);
            s->load_err = err;
            failed = 1;
            for (int i = 0; i < S; i++)
                if (by_sid[i]) {
                    finish_unrun(s, by_sid[i], 500, "internal engine error");
                    by_sid[i] = NULL;
                }
            n_engine = 0;
            retire = 0;
            atomic_store(&s->state, FLINT_SRV_FAILED);
            flint_server_wake_loop(s);
            continue;
        }
        steps++;
        retire = 0;
        for (int i = 0; i < n_ev; i++) retire |= ev[i].finish != FLINT_FINISH_NONE;
        if (n_ev) publish_events(s, by_sid, ev, n_ev, &n_engine);
        publish_snapshot(s, n_waiting, steps);
        if (n_ev) flint_server_wake_loop(s);
    }
    free(by_sid);
    if (!failed) publish_snapshot(s, 0, steps);
    return NULL;
}

int flint_server_engine_start(flint_server *s, flint_err *err) {
    if (pthread_create(&s->thread, NULL, engine_main, s))
        return flint_err_set(err, FLINT_ERR_INTERNAL, "cannot start the engine thread");
    s->thread_started = 1;
    return 0;
}

void flint_server_engine_stop(flint_server *s) {
    if (!s->thread_started) return;
    pthread_mutex_lock(&s->in_mu);
    s->stop_engine = 1;
    pthread_cond_signal(&s->in_cv);
    pthread_mutex_unlock(&s->in_mu);
    pthread_join(s->thread, NULL);
    s->thread_started = 0;
}

void flint_server_engine_submit(flint_server *s, flint_server_job *j) {
    j->eng_next = NULL;
    pthread_mutex_lock(&s->in_mu);
    if (s->in_tail) s->in_tail->eng_next = j;
    else s->in_head = j;
    s->in_tail = j;
    pthread_cond_signal(&s->in_cv);
    pthread_mutex_unlock(&s->in_mu);
}

void flint_server_engine_cancel(flint_server *s, flint_server_job *j, flint_cancel_reason why) {
    if (j->cancel_reason == FLINT_CANCEL_NONE) j->cancel_reason = why;
    atomic_store(&j->cancel, 1);
    pthread_mutex_lock(&s->in_mu); /* wake an idle engine thread so a waiting job leaves at once */
    pthread_cond_signal(&s->in_cv);
    pthread_mutex_unlock(&s->in_mu);
}
