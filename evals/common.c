/* Setup and output helpers shared by the eval, ab and bench commands (see evals_internal.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/chat.h"
#include "evals/evals_internal.h"

double flint_evals_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int flint_evals_load_datasets(const char *const *specs, int n_specs, const char *data_dir, flint_dataset ***out,
                              int *n, flint_err *err) {
    flint_dataset **ds = NULL;
    int m = 0;
    for (int i = 0; i < n_specs; i++) {
        char *copy = flint_xstrdup(specs[i]), *save = NULL;
        for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            flint_dataset *d = flint_dataset_load(tok, data_dir, err);
            if (!d) {
                free(copy);
                for (int k = 0; k < m; k++) flint_dataset_free(ds[k]);
                free(ds);
                return -1;
            }
            ds = flint_xrealloc(ds, sizeof *ds * (size_t)(m + 1));
            ds[m++] = d;
        }
        free(copy);
    }
    if (m == 0) {
        free(ds);
        return flint_err_set(err, FLINT_ERR_INVALID, "no dataset given");
    }
    *out = ds;
    *n = m;
    return 0;
}

flint_run_prompt *flint_evals_make_prompts(flint_dataset **ds, int n_ds, int num_prompts, uint64_t seed, int *n) {
    int total = 0;
    for (int d = 0; d < n_ds; d++) total += num_prompts && num_prompts < ds[d]->n ? num_prompts : ds[d]->n;
    flint_run_prompt *p = flint_xcalloc((size_t)total, sizeof *p);
    int k = 0;
    for (int d = 0; d < n_ds; d++) {
        int m = num_prompts && num_prompts < ds[d]->n ? num_prompts : ds[d]->n;
        for (int i = 0; i < m; i++, k++) {
            p[k].item = &ds[d]->items[i];
            p[k].dataset = d;
            p[k].seed = seed + (uint64_t)ds[d]->items[i].record;
        }
    }
    *n = total;
    return p;
}

int flint_evals_engine_options(flint_engine_options *eo, const char *model_dir, const char *spec_config,
                               const char *default_drafter, const char *drafter_override, char **owned,
                               flint_err *err) {
    *owned = NULL;
    eo->model_dir = model_dir;
    cJSON *j = NULL;
    if (spec_config) {
        j = cJSON_Parse(spec_config);
        if (!j || !cJSON_IsObject(j)) {
            cJSON_Delete(j);
            return flint_err_set(err, FLINT_ERR_INVALID, "--speculative-config is not a JSON object: %s", spec_config);
        }
    } else {
        /* the default: the embedded drafter, K = 7, probabilistic drafts */
        j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "num_speculative_tokens", 7);
    }
    if (drafter_override) {
        if (cJSON_GetObjectItemCaseSensitive(j, "model")) {
            cJSON_Delete(j);
            return flint_err_set(err, FLINT_ERR_INVALID, "--speculative-config must not name a \"model\" here: the "
                                 "drafters come from --drafter-a and --drafter-b");
        }
        cJSON_AddStringToObject(j, "model", drafter_override);
    } else if (!cJSON_GetObjectItemCaseSensitive(j, "model")) {
        if (spec_config) {
            cJSON_Delete(j);
            return flint_err_set(err, FLINT_ERR_INVALID, "speculative config: \"model\" (the drafter directory) is "
                                 "required");
        }
        cJSON_AddStringToObject(j, "model", default_drafter ? default_drafter : "");
    }
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    int rc = flint_spec_config_parse(s, eo, owned, err);
    free(s);
    /* acceptance length is measured at the fixed K unless the config asks for dynamic lengths
     * (the engine's default turns them on with a confidence head) */
    if (eo->dynamic_draft < 0) eo->dynamic_draft = 0;
    return rc;
}

int flint_evals_chat_format(const flint_engine *e, int chat, const char *forced, int *format, flint_err *err) {
    *format = FLINT_CHAT_NONE;
    const flint_tokenizer *tok = flint_engine_tokenizer(e);
    if (!tok) return flint_err_set(err, FLINT_ERR_INVALID, "the model has no tokenizer.json: evals need text prompts");
    if (!chat) return 0;
    flint_chat_format f = flint_chat_detect(flint_tokenizer_chat_template(tok));
    if (forced && flint_chat_parse_format(forced, &f))
        return flint_err_set(err, FLINT_ERR_INVALID, "unknown chat template '%s' (chatml, qwen3, llama3, llama2)",
                             forced);
    if (f == FLINT_CHAT_NONE)
        return flint_err_set(err, FLINT_ERR_INVALID, "the model has no chat template flint knows; pass --no-chat "
                             "(raw prompts) or --chat-template NAME");
    *format = f;
    return 0;
}

int flint_evals_write_text(const char *path, const char *text, flint_err *err) {
    FILE *f = fopen(path, "w");
    if (!f) return flint_err_set(err, FLINT_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    int ok = fputs(text, f) >= 0;
    ok &= fclose(f) == 0;
    return ok ? 0 : flint_err_set(err, FLINT_ERR_IO, "writing %s failed", path);
}

int flint_evals_write_json(const char *path, const cJSON *j, flint_err *err) {
    char *s = cJSON_Print(j);
    size_t n = strlen(s);
    char *t = flint_xmalloc(n + 2);
    memcpy(t, s, n);
    t[n] = '\n';
    t[n + 1] = 0;
    free(s);
    int rc = flint_evals_write_text(path, t, err);
    free(t);
    return rc;
}

char *flint_evals_sibling(const char *path, const char *ext) {
    size_t n = strlen(path), e = strlen(ext);
    char *s = flint_xmalloc(n + e + 1);
    memcpy(s, path, n + 1);
    if (n > 5 && !strcmp(s + n - 5, ".json")) s[n - 5] = 0;
    strcat(s, ext);
    return s;
}

char *flint_evals_basename(const char *path) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--; /* "dir/" names dir */
    size_t a = n;
    while (a > 0 && path[a - 1] != '/') a--;
    char *s = flint_xmalloc(n - a + 1);
    memcpy(s, path + a, n - a);
    s[n - a] = 0;
    return s;
}

const char *flint_evals_fmt(char *buf, size_t cap, double v, int decimals) {
    if (isfinite(v)) snprintf(buf, cap, "%.*f", decimals, v);
    else snprintf(buf, cap, "-");
    return buf;
}
