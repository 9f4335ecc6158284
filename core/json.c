/* JSON files and typed field access over cJSON (see json.h). */
#include "json.h"

#include "sbuf.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

char *flint_file_read(const char *path, size_t max_bytes, size_t *len_out, flint_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        flint_err_set(err, FLINT_ERR_IO, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        flint_err_set(err, FLINT_ERR_IO, "%s: not a regular file", path);
        return NULL;
    }
    if ((size_t)st.st_size > max_bytes) {
        fclose(f);
        flint_err_set(err, FLINT_ERR_FORMAT, "%s: file is %lld bytes, more than the %zu allowed", path,
                      (long long)st.st_size, max_bytes);
        return NULL;
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        fclose(f);
        flint_err_set(err, FLINT_ERR_NOMEM, "%s: cannot allocate %zu bytes", path, n);
        return NULL;
    }
    if (fread(buf, 1, n, f) != n) {
        free(buf);
        fclose(f);
        flint_err_set(err, FLINT_ERR_IO, "%s: read failed", path);
        return NULL;
    }
    fclose(f);
    buf[n] = 0;
    if (len_out) *len_out = n;
    return buf;
}

int flint_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int flint_path_join(char *out, size_t cap, const char *dir, const char *name) {
    int n = snprintf(out, cap, "%s/%s", dir, name);
    return (n < 0 || (size_t)n >= cap) ? -1 : 0;
}

cJSON *flint_json_load_file(const char *path, size_t max_bytes, flint_err *err) {
    size_t len = 0;
    char *text = flint_file_read(path, max_bytes, &len, err);
    if (!text) return NULL;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!j) {
        size_t off = end ? (size_t)(end - text) : 0;
        int line = 1, col = 1;
        for (size_t i = 0; i < off && i < len; i++) {
            if (text[i] == '\n') line++, col = 1;
            else col++;
        }
        flint_err_set(err, FLINT_ERR_FORMAT, "%s: invalid JSON near line %d, column %d", path, line, col);
    }
    free(text);
    return j;
}

static const cJSON *field(const cJSON *obj, const char *key) {
    return cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
}

int flint_json_get_int(const cJSON *obj, const char *key, const char *what, int64_t def, int64_t *out,
                       flint_err *err) {
    const cJSON *v = field(obj, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 9.0e15)
        return flint_err_set(err, FLINT_ERR_FORMAT, "%s: field \"%s\" must be an integer", what, key);
    *out = (int64_t)v->valuedouble;
    return 0;
}

int flint_json_need_int(const cJSON *obj, const char *key, const char *what, int64_t *out, flint_err *err) {
    if (!field(obj, key)) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: missing field \"%s\"", what, key);
    return flint_json_get_int(obj, key, what, 0, out, err);
}

int flint_json_get_double(const cJSON *obj, const char *key, const char *what, double def, double *out,
                          flint_err *err) {
    const cJSON *v = field(obj, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v))
        return flint_err_set(err, FLINT_ERR_FORMAT, "%s: field \"%s\" must be a number", what, key);
    *out = v->valuedouble;
    return 0;
}

int flint_json_need_double(const cJSON *obj, const char *key, const char *what, double *out, flint_err *err) {
    if (!field(obj, key)) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: missing field \"%s\"", what, key);
    return flint_json_get_double(obj, key, what, 0, out, err);
}

int flint_json_get_bool(const cJSON *obj, const char *key, const char *what, int def, int *out, flint_err *err) {
    const cJSON *v = field(obj, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(v))
        return flint_err_set(err, FLINT_ERR_FORMAT, "%s: field \"%s\" must be true or false", what, key);
    *out = cJSON_IsTrue(v);
    return 0;
}

const char *flint_json_get_string(const cJSON *obj, const char *key, const char *what, const char *def,
                                  flint_err *err) {
    const cJSON *v = field(obj, key);
    if (!v || cJSON_IsNull(v)) return def;
    if (!cJSON_IsString(v)) {
        flint_err_set(err, FLINT_ERR_FORMAT, "%s: field \"%s\" must be a string", what, key);
        return NULL;
    }
    return v->valuestring;
}

/* ==== Python-compatible serialisation ==== */

typedef flint_sbuf pybuf;
static void pb_put(pybuf *b, const char *s, size_t n) { flint_sbuf_add(b, s, n); }
static void pb_str(pybuf *b, const char *s) { flint_sbuf_adds(b, s); }

static void pb_quoted(pybuf *b, const char *s) {
    pb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        switch (*p) {
        case '"': pb_put(b, "\\\"", 2); break;
        case '\\': pb_put(b, "\\\\", 2); break;
        case '\n': pb_put(b, "\\n", 2); break;
        case '\r': pb_put(b, "\\r", 2); break;
        case '\t': pb_put(b, "\\t", 2); break;
        case '\b': pb_put(b, "\\b", 2); break;
        case '\f': pb_put(b, "\\f", 2); break;
        default:
            if (*p < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", *p);
                pb_put(b, esc, 6);
            } else {
                pb_put(b, (const char *)p, 1);
            }
        }
    }
    pb_put(b, "\"", 1);
}

static void pb_number(pybuf *b, double d) {
    char t[64];
    if (d == floor(d) && fabs(d) < 1e16) {
        snprintf(t, sizeof t, "%.0f", d);
    } else if (!isfinite(d)) {
        snprintf(t, sizeof t, "%s", d != d ? "NaN" : d > 0 ? "Infinity" : "-Infinity");
    } else {
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(t, sizeof t, "%.*g", prec, d);
            if (strtod(t, NULL) == d) break;
        }
        /* Python writes 1e-05 as 1e-05 and 1.5e+20 as 1.5e+20, as %g does */
    }
    pb_str(b, t);
}

static void pb_value(pybuf *b, const cJSON *v) {
    if (cJSON_IsNull(v) || !v) pb_str(b, "null");
    else if (cJSON_IsTrue(v)) pb_str(b, "true");
    else if (cJSON_IsFalse(v)) pb_str(b, "false");
    else if (cJSON_IsNumber(v)) pb_number(b, v->valuedouble);
    else if (cJSON_IsString(v)) pb_quoted(b, v->valuestring);
    else if (cJSON_IsArray(v)) {
        pb_put(b, "[", 1);
        const cJSON *e;
        int first = 1;
        cJSON_ArrayForEach(e, v) {
            if (!first) pb_put(b, ", ", 2);
            first = 0;
            pb_value(b, e);
        }
        pb_put(b, "]", 1);
    } else if (cJSON_IsObject(v)) {
        pb_put(b, "{", 1);
        const cJSON *e;
        int first = 1;
        cJSON_ArrayForEach(e, v) {
            if (!first) pb_put(b, ", ", 2);
            first = 0;
            pb_quoted(b, e->string);
            pb_put(b, ": ", 2);
            pb_value(b, e);
        }
        pb_put(b, "}", 1);
    } else {
        pb_str(b, "null");
    }
}

char *flint_json_dumps_py(const cJSON *v) {
    pybuf b = {0};
    pb_value(&b, v);
    if (!b.p) pb_put(&b, "", 0);
    return b.p;
}
