/* Prompt-set loader and prompt rendering (see dataset.h). Lines are split on '\n' only: some
 * prompt sets hold U+2028 inside strings, which other line splitters would break. */
#include "evals/dataset.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/chat.h"
#include "core/json.h"

const char *const flint_dataset_names[] = {"gsm8k", "mt_bench", "humaneval", "mbpp", "spec_bench", "sharegpt", NULL};

#define MAX_FILE_BYTES ((size_t)1 << 30)

void flint_dataset_free(flint_dataset *d) {
    if (!d) return;
    for (int i = 0; i < d->n; i++) {
        flint_dataset_item *it = &d->items[i];
        free(it->id);
        free(it->category);
        for (int t = 0; t < it->n_turns; t++) free(it->turns[t]);
        free(it->turns);
    }
    free(d->items);
    free(d->name);
    free(d->path);
    free(d);
}

/* ==== records ==== */

/* Where a record came from, for messages: "FILE:LINE" (JSONL) or "FILE: record N" (array). */
typedef struct {
    const char *path;
    int line;   /* > 0 for JSONL */
    int record; /* for arrays */
} where;

static int rec_err(flint_err *err, const where *w, const char *fmt, const char *detail) {
    char msg[512];
    snprintf(msg, sizeof msg, fmt, detail ? detail : "");
    if (w->line > 0) return flint_err_set(err, FLINT_ERR_FORMAT, "%s:%d: %s", w->path, w->line, msg);
    return flint_err_set(err, FLINT_ERR_FORMAT, "%s: record %d: %s", w->path, w->record, msg);
}

static int push_turn(flint_dataset_item *it, const char *s) {
    it->turns = flint_xrealloc(it->turns, sizeof(char *) * (size_t)(it->n_turns + 1));
    it->turns[it->n_turns++] = flint_xstrdup(s);
    return 0;
}

static char *id_string(const cJSON *v) {
    char buf[64];
    if (cJSON_IsString(v)) return flint_xstrdup(v->valuestring);
    if (cJSON_IsNumber(v)) {
        if (v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 1e15)
            snprintf(buf, sizeof buf, "%.0f", v->valuedouble);
        else snprintf(buf, sizeof buf, "%.17g", v->valuedouble);
        return flint_xstrdup(buf);
    }
    return NULL;
}

/* One record object -> item. Exactly one of turns / prompt / conversations supplies the turns. */
static int parse_record(const cJSON *o, const where *w, const char *name, int record, flint_dataset_item *it,
                        flint_err *err) {
    memset(it, 0, sizeof *it);
    it->record = record;
    if (!cJSON_IsObject(o)) return rec_err(err, w, "a record must be a JSON object%s", NULL);
    const cJSON *turns = cJSON_GetObjectItemCaseSensitive(o, "turns");
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(o, "prompt");
    const cJSON *conv = cJSON_GetObjectItemCaseSensitive(o, "conversations");
    if (turns) {
        if (!cJSON_IsArray(turns) || cJSON_GetArraySize(turns) < 1)
            return rec_err(err, w, "\"turns\" must be a non-empty list of strings%s", NULL);
        const cJSON *t;
        cJSON_ArrayForEach(t, turns) {
            if (!cJSON_IsString(t)) return rec_err(err, w, "\"turns\" must be a non-empty list of strings%s", NULL);
            push_turn(it, t->valuestring);
        }
    } else if (prompt) {
        if (!cJSON_IsString(prompt)) return rec_err(err, w, "\"prompt\" must be a string%s", NULL);
        push_turn(it, prompt->valuestring);
    } else if (conv) {
        if (!cJSON_IsArray(conv)) return rec_err(err, w, "\"conversations\" must be a list%s", NULL);
        const cJSON *m;
        cJSON_ArrayForEach(m, conv) {
            const cJSON *from = cJSON_GetObjectItemCaseSensitive(m, "from");
            if (!from) from = cJSON_GetObjectItemCaseSensitive(m, "role");
            const cJSON *val = cJSON_GetObjectItemCaseSensitive(m, "value");
            if (!val) val = cJSON_GetObjectItemCaseSensitive(m, "content");
            if (!cJSON_IsString(from) || !cJSON_IsString(val))
                return rec_err(err, w, "each conversation entry needs string \"from\" and \"value\"%s", NULL);
            if (!strcmp(from->valuestring, "human") || !strcmp(from->valuestring, "user"))
                push_turn(it, val->valuestring);
        }
        if (it->n_turns == 0) return rec_err(err, w, "the conversation has no user turn%s", NULL);
    } else {
        return rec_err(err, w, "the record has neither \"turns\" nor \"prompt\"%s", NULL);
    }
    for (int t = 0; t < it->n_turns; t++) {
        const char *s = it->turns[t];
        while (*s && isspace((unsigned char)*s)) s++;
        if (!*s) return rec_err(err, w, "turn %s is empty", t == 0 ? "1" : t == 1 ? "2" : "3+");
    }
    const cJSON *cat = cJSON_GetObjectItemCaseSensitive(o, "category");
    if (cat && !cJSON_IsString(cat) && !cJSON_IsNull(cat))
        return rec_err(err, w, "\"category\" must be a string%s", NULL);
    it->category = flint_xstrdup(cJSON_IsString(cat) && cat->valuestring[0] ? cat->valuestring : name);
    static const char *const id_keys[] = {"id", "question_id", "task_id"};
    for (int k = 0; k < 3 && !it->id; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, id_keys[k]);
        if (v && !(it->id = id_string(v)) && !cJSON_IsNull(v))
            return rec_err(err, w, "\"%s\" must be a string or a number", id_keys[k]);
    }
    if (!it->id) {
        char buf[32];
        snprintf(buf, sizeof buf, "%d", record);
        it->id = flint_xstrdup(buf);
    }
    return 0;
}

static void push_item(flint_dataset *d, int *cap, const flint_dataset_item *it) {
    if (d->n == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        d->items = flint_xrealloc(d->items, sizeof *d->items * (size_t)*cap);
    }
    d->items[d->n++] = *it;
}

static void item_free(flint_dataset_item *it) {
    free(it->id);
    free(it->category);
    for (int t = 0; t < it->n_turns; t++) free(it->turns[t]);
    free(it->turns);
}

flint_dataset *flint_dataset_read(const char *path, const char *name, flint_err *err) {
    size_t len;
    char *text = flint_file_read(path, MAX_FILE_BYTES, &len, err);
    if (!text) return NULL;
    flint_dataset *d = flint_xcalloc(1, sizeof *d);
    d->name = flint_xstrdup(name);
    d->path = flint_xstrdup(path);
    int cap = 0;
    size_t p = 0;
    while (p < len && isspace((unsigned char)text[p])) p++;
    if (p < len && text[p] == '[') {
        /* a JSON array of records (ShareGPT style) */
        where w = {path, 0, 0};
        const char *end = NULL;
        cJSON *arr = cJSON_ParseWithLengthOpts(text, len, &end, 0);
        if (!arr) {
            int line = 1;
            for (const char *c = text; end && c < end; c++) line += *c == '\n';
            flint_err_set(err, FLINT_ERR_FORMAT, "%s:%d: malformed JSON", path, line);
            goto fail;
        }
        const cJSON *o;
        int r = 0;
        cJSON_ArrayForEach(o, arr) {
            flint_dataset_item it;
            w.record = r;
            if (parse_record(o, &w, name, r, &it, err)) {
                item_free(&it);
                cJSON_Delete(arr);
                goto fail;
            }
            push_item(d, &cap, &it);
            r++;
        }
        cJSON_Delete(arr);
    } else {
        int line = 0, record = 0;
        for (size_t a = 0; a < len;) {
            size_t b = a;
            while (b < len && text[b] != '\n') b++;
            line++;
            size_t e = b;
            if (e > a && text[e - 1] == '\r') e--;
            size_t s = a;
            while (s < e && isspace((unsigned char)text[s])) s++;
            if (s < e) { /* blank lines are allowed (e.g. a trailing one) */
                where w = {path, line, 0};
                const char *cend = NULL;
                cJSON *o = cJSON_ParseWithLengthOpts(text + s, e - s, &cend, 0);
                if (!o) {
                    int col = cend ? (int)(cend - (text + a)) + 1 : 1;
                    flint_err_set(err, FLINT_ERR_FORMAT, "%s:%d: malformed JSON (column %d)", path, line, col);
                    goto fail;
                }
                /* trailing garbage after the object on the same line */
                const char *t = cend;
                while (t < text + e && isspace((unsigned char)*t)) t++;
                if (t != text + e) {
                    cJSON_Delete(o);
                    flint_err_set(err, FLINT_ERR_FORMAT, "%s:%d: malformed JSON (text after the record)", path, line);
                    goto fail;
                }
                flint_dataset_item it;
                int rc = parse_record(o, &w, name, record, &it, err);
                cJSON_Delete(o);
                if (rc) {
                    item_free(&it);
                    goto fail;
                }
                push_item(d, &cap, &it);
                record++;
            }
            a = b + 1;
        }
    }
    free(text);
    if (d->n == 0) {
        flint_err_set(err, FLINT_ERR_FORMAT, "%s: no records", path);
        flint_dataset_free(d);
        return NULL;
    }
    return d;
fail:
    free(text);
    flint_dataset_free(d);
    return NULL;
}

/* ==== names ==== */

static int is_path(const char *s) {
    size_t n = strlen(s);
    return strchr(s, '/') || (n > 5 && !strcmp(s + n - 5, ".json")) || (n > 6 && !strcmp(s + n - 6, ".jsonl"));
}

/* The dataset name of a path: its base name without .json / .jsonl. */
static char *base_name(const char *path) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    char *s = flint_xstrdup(b);
    size_t n = strlen(s);
    if (n > 6 && !strcmp(s + n - 6, ".jsonl")) s[n - 6] = 0;
    else if (n > 5 && !strcmp(s + n - 5, ".json")) s[n - 5] = 0;
    return s;
}

flint_dataset *flint_dataset_load(const char *spec, const char *data_dir, flint_err *err) {
    char *what = flint_xstrdup(spec), *category = NULL;
    flint_dataset *d = NULL;
    /* "NAME:CATEGORY", unless the whole spec names an existing file */
    char *colon = strrchr(what, ':');
    if (colon && !flint_file_exists(what)) {
        *colon = 0;
        category = colon + 1;
    }
    if (!what[0]) {
        flint_err_set(err, FLINT_ERR_INVALID, "empty dataset name in '%s'", spec);
        goto done;
    }
    if (is_path(what)) {
        char *name = base_name(what);
        d = flint_dataset_read(what, name, err);
        free(name);
    } else {
        char norm[128];
        snprintf(norm, sizeof norm, "%s", what);
        for (char *c = norm; *c; c++) *c = *c == '-' ? '_' : (char)tolower((unsigned char)*c);
        int known = -1;
        for (int i = 0; flint_dataset_names[i]; i++)
            if (!strcmp(norm, flint_dataset_names[i])) known = i;
        if (known < 0) {
            char list[256] = "";
            for (int i = 0; flint_dataset_names[i]; i++) {
                strcat(list, i ? ", " : "");
                strcat(list, flint_dataset_names[i]);
            }
            flint_err_set(err, FLINT_ERR_INVALID, "unknown dataset '%s' (known: %s; or a path to a .jsonl file)", what,
                          list);
            goto done;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.jsonl", data_dir ? data_dir : "evals/data", flint_dataset_names[known]);
        d = flint_dataset_read(path, flint_dataset_names[known], err);
    }
    if (d && category) {
        int m = 0;
        for (int i = 0; i < d->n; i++) {
            if (!strcmp(d->items[i].category, category)) d->items[m++] = d->items[i];
            else item_free(&d->items[i]);
        }
        int had = d->n;
        d->n = m;
        if (m == 0) {
            flint_err_set(err, FLINT_ERR_INVALID, "dataset %s has no category '%s' (%d records)", d->name, category,
                          had);
            flint_dataset_free(d);
            d = NULL;
        } else {
            size_t l = strlen(d->name) + strlen(category) + 2;
            char *nm = flint_xmalloc(l);
            snprintf(nm, l, "%s:%s", d->name, category);
            free(d->name);
            d->name = nm;
        }
    }
done:
    free(what);
    return d;
}

/* ==== rendering ==== */

int flint_dataset_encode(const flint_tokenizer *tok, const flint_dataset_item *it, int turn, const char *const *answers,
                         int chat_format, int32_t **ids, int *n, flint_err *err) {
    *ids = NULL;
    *n = 0;
    if (turn < 0 || turn >= it->n_turns) return flint_err_set(err, FLINT_ERR_INVALID, "turn %d out of range", turn);
    if (chat_format == FLINT_CHAT_NONE) {
        if (turn != 0) return flint_err_set(err, FLINT_ERR_INVALID, "multi-turn prompts need a chat template");
        return flint_tokenizer_encode(tok, it->turns[0], strlen(it->turns[0]), 1, ids, n, err);
    }
    flint_chat_msg *msgs = flint_xmalloc(sizeof *msgs * (size_t)(2 * turn + 1));
    int nm = 0;
    for (int t = 0; t <= turn; t++) {
        msgs[nm++] = (flint_chat_msg){"user", it->turns[t]};
        if (t < turn) msgs[nm++] = (flint_chat_msg){"assistant", answers[t] ? answers[t] : ""};
    }
    int32_t bos = flint_tokenizer_bos_id(tok), eos = flint_tokenizer_eos_id(tok);
    char *text = flint_chat_render((flint_chat_format)chat_format, msgs, nm, NULL,
                                   bos >= 0 ? flint_tokenizer_token_str(tok, bos) : NULL,
                                   eos >= 0 ? flint_tokenizer_token_str(tok, eos) : NULL, err);
    free(msgs);
    if (!text) return -1;
    int rc = flint_tokenizer_encode(tok, text, strlen(text), 0, ids, n, err);
    free(text);
    return rc;
}
