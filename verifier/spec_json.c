/* The speculative config of the commands and the server (vLLM's JSON shape) and the statistics
 * object that --json output and usage.speculative share, so both report the same fields. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "verifier/engine.h"

int flint_graph_sizes_parse(const char *list, flint_engine_options *o, flint_err *err) {
    int n = 0;
    const char *p = list;
    for (;;) {
        char *end = NULL;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 65536 || (*end && *end != ','))
            return flint_err_set(err, FLINT_ERR_INVALID, "--cuda-graph-sizes expects ascending row counts in "
                                 "1..65536 separated by commas, e.g. 1,2,4,8 (got '%s')", list);
        if (n == FLINT_TARGET_MAX_GRAPH_SIZES)
            return flint_err_set(err, FLINT_ERR_INVALID, "--cuda-graph-sizes: at most %d sizes",
                                 FLINT_TARGET_MAX_GRAPH_SIZES);
        if (n > 0 && v <= o->cuda_graph_sizes[n - 1])
            return flint_err_set(err, FLINT_ERR_INVALID, "--cuda-graph-sizes must be ascending (%ld after %d)", v,
                                 o->cuda_graph_sizes[n - 1]);
        o->cuda_graph_sizes[n++] = (int)v;
        if (!*end) break;
        p = end + 1;
    }
    o->n_cuda_graph_sizes = n;
    return 0;
}

int flint_spec_config_parse(const char *json, flint_engine_options *o, char **owned, flint_err *err) {
    *owned = NULL;
    cJSON *j = cJSON_Parse(json);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return flint_err_set(err, FLINT_ERR_INVALID, "--speculative-config is not a JSON object: %s", json);
    }
    int rc = -1;
    const cJSON *it;
    cJSON_ArrayForEach(it, j) {
        const char *k = it->string;
        if (!strcmp(k, "model")) {
            if (!cJSON_IsString(it) || !it->valuestring[0]) {
                flint_err_set(err, FLINT_ERR_INVALID, "speculative config: \"model\" must be a directory path");
                goto done;
            }
        } else if (!strcmp(k, "method")) {
            if (!cJSON_IsString(it) || (strcmp(it->valuestring, "dspark") && strcmp(it->valuestring, "dflash"))) {
                flint_err_set(err, FLINT_ERR_UNSUPPORTED, "speculative config: method %s%s%s is not supported (dspark, "
                              "dflash)", cJSON_IsString(it) ? "\"" : "", cJSON_IsString(it) ? it->valuestring : "?",
                              cJSON_IsString(it) ? "\"" : "");
                goto done;
            }
        } else if (!strcmp(k, "num_speculative_tokens")) {
            if (!cJSON_IsNumber(it) || it->valuedouble != (int)it->valuedouble || it->valueint < 1 ||
                it->valueint > FLINT_MAX_DRAFT) {
                flint_err_set(err, FLINT_ERR_INVALID, "speculative config: num_speculative_tokens must be an integer "
                              "in 1..%d", FLINT_MAX_DRAFT);
                goto done;
            }
            o->num_speculative_tokens = it->valueint;
        } else if (!strcmp(k, "draft_sample_method")) {
            if (!cJSON_IsString(it) || (strcmp(it->valuestring, "probabilistic") && strcmp(it->valuestring, "greedy"))) {
                flint_err_set(err, FLINT_ERR_INVALID, "speculative config: draft_sample_method must be \"probabilistic\" "
                              "or \"greedy\"");
                goto done;
            }
            o->draft_greedy = !strcmp(it->valuestring, "greedy");
        } else if (!strcmp(k, "dynamic_draft")) { /* flint: DSpark's confidence-scheduled draft lengths */
            if (!cJSON_IsBool(it)) {
                flint_err_set(err, FLINT_ERR_INVALID, "speculative config: dynamic_draft must be true or false");
                goto done;
            }
            o->dynamic_draft = cJSON_IsTrue(it);
        } else if (!strcmp(k, "dynamic_cost")) { /* flint: the scheduler's cost model, given (reproducible) */
            double v[3] = {0, 0, 0};
            static const char *const names[3] = {"fixed_ms", "row_ms", "draft_ms"};
            const cJSON *c;
            if (!cJSON_IsObject(it)) {
                flint_err_set(err, FLINT_ERR_INVALID, "speculative config: dynamic_cost must be an object "
                              "{\"fixed_ms\", \"row_ms\", \"draft_ms\"}");
                goto done;
            }
            cJSON_ArrayForEach(c, it) {
                int f = 0;
                while (f < 3 && strcmp(c->string, names[f])) f++;
                if (f == 3 || !cJSON_IsNumber(c) || !(c->valuedouble >= 0) || c->valuedouble > 1e9) {
                    flint_err_set(err, FLINT_ERR_INVALID, "speculative config: dynamic_cost.%s: %s", c->string,
                                  f == 3 ? "unknown key (fixed_ms, row_ms, draft_ms)"
                                         : "must be a number of milliseconds in 0..1e9");
                    goto done;
                }
                v[f] = c->valuedouble;
            }
            if (v[0] + v[1] == 0) {
                flint_err_set(err, FLINT_ERR_INVALID, "speculative config: dynamic_cost needs a verify cost "
                              "(fixed_ms or row_ms above 0)");
                goto done;
            }
            o->dyn_fixed_ms = v[0], o->dyn_row_ms = v[1], o->dyn_draft_ms = v[2];
        } else {
            flint_err_set(err, FLINT_ERR_INVALID, "speculative config: unknown key \"%s\"", k);
            goto done;
        }
    }
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "model");
    if (!m) {
        flint_err_set(err, FLINT_ERR_INVALID, "speculative config: \"model\" (the drafter directory) is required");
        goto done;
    }
    *owned = flint_xstrdup(m->valuestring);
    o->drafter_dir = *owned;
    rc = 0;
done:
    cJSON_Delete(j);
    return rc;
}

cJSON *flint_spec_stats_json(const flint_spec_stats *s, int K) {
    if (K > FLINT_MAX_DRAFT) K = FLINT_MAX_DRAFT;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "num_spec_steps", (double)s->steps);
    cJSON_AddNumberToObject(o, "num_draft_tokens", (double)s->draft_tokens);
    cJSON_AddNumberToObject(o, "num_accepted_draft_tokens", (double)s->accepted);
    cJSON_AddNumberToObject(o, "mean_acceptance_length", flint_spec_stats_mean_al(s));
    cJSON_AddNumberToObject(o, "draft_acceptance_rate", flint_spec_stats_acceptance_rate(s));
    cJSON *h = cJSON_AddArrayToObject(o, "acceptance_histogram");
    for (int i = 0; i <= K; i++) cJSON_AddItemToArray(h, cJSON_CreateNumber((double)s->hist[i]));
    cJSON *p = cJSON_AddArrayToObject(o, "accepted_per_position");
    for (int i = 0; i < K; i++) cJSON_AddItemToArray(p, cJSON_CreateNumber((double)s->accepted_per_pos[i]));
    return o;
}
