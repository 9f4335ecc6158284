/* JSON files (config.json, tokenizer.json, tokenizer_config.json, request bodies) through cJSON,
 * with errors that name the file and the field. */
#ifndef FLINT_CORE_JSON_H
#define FLINT_CORE_JSON_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Read a whole file (NUL-terminated). Files over max_bytes are refused. Caller frees. */
char *flint_file_read(const char *path, size_t max_bytes, size_t *len_out, flint_err *err);
int flint_file_exists(const char *path);
/* path_join writes "dir/name" into out (cap bytes); returns -1 when it does not fit. */
int flint_path_join(char *out, size_t cap, const char *dir, const char *name);

/* Parse a JSON file. A syntax error names the file, line and column. Caller cJSON_Delete()s. */
cJSON *flint_json_load_file(const char *path, size_t max_bytes, flint_err *err);

/* Typed field access. `what` names the object in messages (usually a file path).
 * get_* with a default: absent -> default, present with the wrong type -> error.
 * need_*: absent -> error. */
int flint_json_need_int(const cJSON *obj, const char *key, const char *what, int64_t *out, flint_err *err);
int flint_json_get_int(const cJSON *obj, const char *key, const char *what, int64_t def, int64_t *out,
                       flint_err *err);
int flint_json_need_double(const cJSON *obj, const char *key, const char *what, double *out, flint_err *err);
int flint_json_get_double(const cJSON *obj, const char *key, const char *what, double def, double *out,
                          flint_err *err);
int flint_json_get_bool(const cJSON *obj, const char *key, const char *what, int def, int *out, flint_err *err);
/* Returns the string (owned by obj) or def; NULL with err set when present but not a string. */
const char *flint_json_get_string(const cJSON *obj, const char *key, const char *what, const char *def,
                                  flint_err *err);

/* Serialise like Python's json.dumps(v, ensure_ascii=False) (", " and ": " separators, keys in
 * their order, non-ASCII kept): what Jinja's |tojson gives in Hugging Face chat templates, so
 * rendered prompts match the reference tokens. Numbers print as integers when integral, else in
 * the shortest form that round-trips (Python's repr); "1.0" in the input therefore prints "1"
 * (cJSON keeps no int/float distinction). malloc'd. */
char *flint_json_dumps_py(const cJSON *v);

#ifdef __cplusplus
}
#endif
#endif
