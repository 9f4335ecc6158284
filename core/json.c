/* JSON files and typed field access over cJSON (see json.h). */
#include "json.h"

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
