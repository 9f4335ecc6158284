/* config.json of a Hugging Face target model -> flint_target_config. Everything the CPU forward
 * does not implement (RoPE scaling, sliding windows, biases, other activations) is refused here,
 * loudly, so a model never loads and then silently computes something else. Accepts both the
 * transformers 4 spelling (top-level rope_theta, rope_scaling) and the 5 one (rope_parameters). */
#include <stdio.h>
#include <string.h>

#include "core/json.h"
#include "target/target_internal.h"

#define CONFIG_MAX_BYTES (4u << 20)
#define DIM_MAX (1 << 20)   /* any real size is far below; keeps products inside size_t/int */
#define LAYERS_MAX 1024

static int need_pos_int(const cJSON *j, const char *key, const char *what, int max, int *out, flint_err *err) {
    int64_t v;
    if (flint_json_need_int(j, key, what, &v, err)) return -1;
    if (v < 1 || v > max)
        return flint_err_set(err, FLINT_ERR_FORMAT, "%s: \"%s\" is %lld, expected 1..%d", what, key, (long long)v,
                             max);
    *out = (int)v;
    return 0;
}

/* A token id field: absent or null -> -1, an integer in [0, vocab), or (when list_ok) a list. */
static int token_ids(const cJSON *j, const char *key, const char *what, int vocab, int *ids, int cap, int *n,
                     flint_err *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    *n = 0;
    if (!v || cJSON_IsNull(v)) return 0;
    const cJSON *one = v;
    int count = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 1;
    if (count > cap)
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: \"%s\" lists %d ids, at most %d are supported", what,
                             key, count, cap);
    for (int i = 0; i < count; i++) {
        if (cJSON_IsArray(v)) one = cJSON_GetArrayItem(v, i);
        if (!cJSON_IsNumber(one) || one->valuedouble != (double)(int64_t)one->valuedouble)
            return flint_err_set(err, FLINT_ERR_FORMAT, "%s: \"%s\" must be an integer token id or a list of them",
                                 what, key);
        int64_t id = (int64_t)one->valuedouble;
        if (id < 0 || id >= vocab)
            return flint_err_set(err, FLINT_ERR_FORMAT, "%s: \"%s\" holds token id %lld, outside the vocabulary (%d)",
                                 what, key, (long long)id, vocab);
        ids[(*n)++] = (int)id;
    }
    return 0;
}

/* rope_scaling (v4) or rope_parameters (v5): only the plain "default" RoPE is implemented. */
static int check_rope(const cJSON *j, const char *what, double *theta, flint_err *err) {
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
    if (sc && !cJSON_IsNull(sc)) {
        const char *type = NULL;
        if (cJSON_IsObject(sc)) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(sc, "rope_type");
            if (!t) t = cJSON_GetObjectItemCaseSensitive(sc, "type");
            if (cJSON_IsString(t)) type = t->valuestring;
        }
        /* {"rope_type": "default"} is how some exporters spell "no scaling" */
        if (!type || strcmp(type, "default") != 0)
            return flint_err_set(err, FLINT_ERR_UNSUPPORTED,
                                 "%s: rope_scaling (type \"%s\") is not supported; only plain RoPE is implemented",
                                 what, type ? type : "?");
    }
    if (flint_json_get_double(j, "rope_theta", what, 10000.0, theta, err)) return -1;
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(j, "rope_parameters");
    if (rp && !cJSON_IsNull(rp)) {
        char where[4200]; /* what is a path of up to 4 KiB */
        snprintf(where, sizeof where, "%s: rope_parameters", what);
        if (!cJSON_IsObject(rp)) return flint_err_set(err, FLINT_ERR_FORMAT, "%s must be an object", where);
        const char *type = flint_json_get_string(rp, "rope_type", where, "default", err);
        if (!type) return -1;
        if (strcmp(type, "default") != 0)
            return flint_err_set(err, FLINT_ERR_UNSUPPORTED,
                                 "%s: rope_type \"%s\" is not supported; only plain RoPE is implemented", where,
                                 type);
        if (flint_json_get_double(rp, "rope_theta", where, *theta, theta, err)) return -1;
        double prf;
        if (flint_json_get_double(rp, "partial_rotary_factor", where, 1.0, &prf, err)) return -1;
        if (prf != 1.0)
            return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: partial_rotary_factor %g is not supported", where,
                                 prf);
    }
    double prf;
    if (flint_json_get_double(j, "partial_rotary_factor", what, 1.0, &prf, err)) return -1;
    if (prf != 1.0)
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: partial_rotary_factor %g is not supported", what, prf);
    if (!(*theta > 0.0))
        return flint_err_set(err, FLINT_ERR_FORMAT, "%s: rope_theta must be positive (found %g)", what, *theta);
    return 0;
}

static int check_arch(const cJSON *j, const char *what, flint_arch *arch, flint_err *err) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "architectures");
    const char *name = NULL;
    if (a && !cJSON_IsNull(a)) {
        if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) < 1 || !cJSON_IsString(cJSON_GetArrayItem(a, 0)))
            return flint_err_set(err, FLINT_ERR_FORMAT, "%s: \"architectures\" must be a non-empty list of names",
                                 what);
        name = cJSON_GetArrayItem(a, 0)->valuestring;
    } else {
        /* older exports carry only model_type */
        const char *mt = flint_json_get_string(j, "model_type", what, NULL, err);
        if (!mt && err && err->code != FLINT_OK) return -1;
        if (!mt)
            return flint_err_set(err, FLINT_ERR_FORMAT, "%s: neither \"architectures\" nor \"model_type\" is given",
                                 what);
        name = strcmp(mt, "qwen3") == 0 ? "Qwen3ForCausalLM" : strcmp(mt, "llama") == 0 ? "LlamaForCausalLM" : mt;
    }
    if (strcmp(name, "Qwen3ForCausalLM") == 0) *arch = FLINT_ARCH_QWEN3;
    else if (strcmp(name, "LlamaForCausalLM") == 0) *arch = FLINT_ARCH_LLAMA;
    else
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED,
                             "%s: architecture \"%s\" is not supported (supported: Qwen3ForCausalLM, "
                             "LlamaForCausalLM)",
                             what, name);
    return 0;
}

/* Features that would change the math: each must be off. */
static int check_unsupported(const cJSON *j, const char *what, flint_err *err) {
    const char *act = flint_json_get_string(j, "hidden_act", what, "silu", err);
    if (!act) return -1;
    if (strcmp(act, "silu") != 0)
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: hidden_act \"%s\" is not supported (only silu)", what,
                             act);
    static const char *const off[] = {"attention_bias", "mlp_bias", "use_sliding_window"};
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
        int on;
        if (flint_json_get_bool(j, off[i], what, 0, &on, err)) return -1;
        if (on) return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: \"%s\" is true; not supported", what, off[i]);
    }
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(j, "layer_types");
    if (cJSON_IsArray(lt)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, lt) {
            if (!cJSON_IsString(e) || strcmp(e->valuestring, "full_attention") != 0)
                return flint_err_set(err, FLINT_ERR_UNSUPPORTED,
                                     "%s: layer_types holds \"%s\"; only full_attention is supported", what,
                                     cJSON_IsString(e) ? e->valuestring : "?");
        }
    }
    int64_t tp;
    if (flint_json_get_int(j, "pretraining_tp", what, 1, &tp, err)) return -1;
    if (tp != 1) return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: pretraining_tp %lld is not supported", what,
                                      (long long)tp);
    return 0;
}

int flint_target_config_load(const char *dir, flint_target_config *cfg, flint_err *err) {
    char path[4096];
    if (flint_path_join(path, sizeof path, dir, "config.json"))
        return flint_err_set(err, FLINT_ERR_INVALID, "%s: path too long", dir);
    cJSON *j = flint_json_load_file(path, CONFIG_MAX_BYTES, err);
    if (!j) return -1;
    memset(cfg, 0, sizeof *cfg);
    int rc = -1;
    if (!cJSON_IsObject(j)) {
        flint_err_set(err, FLINT_ERR_FORMAT, "%s: expected a JSON object", path);
        goto done;
    }
    if (check_arch(j, path, &cfg->arch, err) || check_unsupported(j, path, err)) goto done;
    if (need_pos_int(j, "vocab_size", path, 1 << 24, &cfg->vocab_size, err) ||
        need_pos_int(j, "hidden_size", path, DIM_MAX, &cfg->hidden_size, err) ||
        need_pos_int(j, "intermediate_size", path, DIM_MAX, &cfg->intermediate_size, err) ||
        need_pos_int(j, "num_hidden_layers", path, LAYERS_MAX, &cfg->n_layers, err) ||
        need_pos_int(j, "num_attention_heads", path, 4096, &cfg->n_heads, err) ||
        need_pos_int(j, "max_position_embeddings", path, 1 << 24, &cfg->max_position_embeddings, err))
        goto done;
    cfg->n_kv_heads = cfg->n_heads;
    if (cJSON_GetObjectItemCaseSensitive(j, "num_key_value_heads") &&
        !cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "num_key_value_heads")) &&
        need_pos_int(j, "num_key_value_heads", path, 4096, &cfg->n_kv_heads, err))
        goto done;
    if (cfg->n_heads % cfg->n_kv_heads != 0) {
        flint_err_set(err, FLINT_ERR_FORMAT,
                      "%s: num_attention_heads (%d) is not a multiple of num_key_value_heads (%d)", path,
                      cfg->n_heads, cfg->n_kv_heads);
        goto done;
    }
    const cJSON *hd = cJSON_GetObjectItemCaseSensitive(j, "head_dim");
    if (hd && !cJSON_IsNull(hd)) {
        if (need_pos_int(j, "head_dim", path, 4096, &cfg->head_dim, err)) goto done;
    } else {
        if (cfg->hidden_size % cfg->n_heads != 0) {
            flint_err_set(err, FLINT_ERR_FORMAT,
                          "%s: hidden_size (%d) is not a multiple of num_attention_heads (%d) and head_dim is "
                          "not given",
                          path, cfg->hidden_size, cfg->n_heads);
            goto done;
        }
        cfg->head_dim = cfg->hidden_size / cfg->n_heads;
    }
    if (cfg->head_dim % 2 != 0) {
        flint_err_set(err, FLINT_ERR_FORMAT, "%s: head_dim %d is odd; RoPE needs an even head_dim", path,
                      cfg->head_dim);
        goto done;
    }
    if ((int64_t)cfg->n_heads * cfg->head_dim > DIM_MAX) {
        flint_err_set(err, FLINT_ERR_FORMAT, "%s: num_attention_heads x head_dim is too large", path);
        goto done;
    }
    double eps, theta;
    if (flint_json_get_double(j, "rms_norm_eps", path, 1e-6, &eps, err) || check_rope(j, path, &theta, err))
        goto done;
    if (!(eps > 0.0 && eps < 1.0)) {
        flint_err_set(err, FLINT_ERR_FORMAT, "%s: rms_norm_eps %g is out of range", path, eps);
        goto done;
    }
    cfg->rms_norm_eps = (float)eps;
    cfg->rope_theta = (float)theta;
    if (flint_json_get_bool(j, "tie_word_embeddings", path, 0, &cfg->tie_word_embeddings, err)) goto done;
    int bos[1], nbos;
    if (token_ids(j, "bos_token_id", path, cfg->vocab_size, bos, 1, &nbos, err)) goto done;
    cfg->bos_token_id = nbos ? bos[0] : -1;
    if (token_ids(j, "eos_token_id", path, cfg->vocab_size, cfg->eos_token_ids, FLINT_MAX_EOS, &cfg->n_eos, err))
        goto done;
    rc = 0;
done:
    cJSON_Delete(j);
    return rc;
}

/* The synthetic shapes of --load-format dummy (issue order 6): real models' configurations, for
 * speed work at real sizes with random weights made on the device. */
int flint_target_shape_config(const char *name, flint_target_config *cfg, flint_err *err) {
    memset(cfg, 0, sizeof *cfg);
    cfg->arch = FLINT_ARCH_QWEN3;
    cfg->vocab_size = 151936;
    cfg->head_dim = 128;
    cfg->max_position_embeddings = 40960;
    cfg->rms_norm_eps = 1e-6f;
    cfg->rope_theta = 1000000.0f;
    cfg->bos_token_id = -1;
    cfg->n_eos = 1;
    cfg->eos_token_ids[0] = 151645;
    if (!strcmp(name, "qwen3-8b")) {
        cfg->hidden_size = 4096, cfg->intermediate_size = 12288, cfg->n_layers = 36;
        cfg->n_heads = 32, cfg->n_kv_heads = 8, cfg->tie_word_embeddings = 0;
    } else if (!strcmp(name, "qwen3-0.6b")) {
        cfg->hidden_size = 1024, cfg->intermediate_size = 3072, cfg->n_layers = 28;
        cfg->n_heads = 16, cfg->n_kv_heads = 8, cfg->tie_word_embeddings = 1;
    } else {
        return flint_err_set(err, FLINT_ERR_INVALID, "unknown model shape '%s' (qwen3-8b, qwen3-0.6b)", name);
    }
    return 0;
}
