/* Reading a drafter's config.json in either checkpoint format and checking it against the target.
 * A wrong layout or tap convention silently collapses acceptance to about one token, so every
 * field that decides them is validated loudly here, and the layout is named in the log. */
#include <stdio.h>
#include <string.h>

#include "core/json.h"
#include "drafter/drafter_internal.h"

static int read_int(const cJSON *o, const char *k, const char *what, int64_t def, int need, int *out, flint_err *err) {
    int64_t v;
    if (need ? flint_json_need_int(o, k, what, &v, err) : flint_json_get_int(o, k, what, def, &v, err)) return -1;
    if (v < -2147483647LL || v > 2147483647LL)
        return flint_err_set(err, FLINT_ERR_FORMAT, "%s: field \"%s\" is out of range", what, k);
    *out = (int)v;
    return 0;
}

static int read_ids(const cJSON *o, const char *k, const char *what, int *ids, int *n, flint_err *err) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, k), *e;
    if (!cJSON_IsArray(a)) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: field \"%s\" must be a list of layer ids", what, k);
    *n = 0;
    cJSON_ArrayForEach(e, a) {
        if (!cJSON_IsNumber(e) || e->valuedouble != (int)e->valuedouble)
            return flint_err_set(err, FLINT_ERR_FORMAT, "%s: \"%s\" holds a non-integer", what, k);
        if (*n == FLINT_DRAFT_MAX_TAPS)
            return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: more than %d taps in \"%s\"", what,
                                 FLINT_DRAFT_MAX_TAPS, k);
        ids[(*n)++] = (int)e->valuedouble;
    }
    if (*n == 0) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: \"%s\" is empty", what, k);
    return 0;
}

/* rope_theta at the top level (transformers v4) or under rope_parameters (v5). */
static int read_rope(const cJSON *o, const char *what, float *theta, flint_err *err) {
    double t;
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(o, "rope_parameters");
    if (cJSON_IsObject(rp) && cJSON_GetObjectItemCaseSensitive(rp, "rope_theta")) {
        if (flint_json_need_double(rp, "rope_theta", what, &t, err)) return -1;
    } else if (flint_json_get_double(o, "rope_theta", what, 10000.0, &t, err)) {
        return -1;
    }
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(o, "rope_scaling");
    if (rs && !cJSON_IsNull(rs)) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
        if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "default"))
            return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: rope_scaling is not supported", what);
    }
    *theta = (float)t;
    return 0;
}

/* The backbone fields, from the top level (DeepSpec) or transformer_layer_config (speculators). */
static int read_backbone(const cJSON *o, const char *what, flint_drafter_config *c, flint_err *err) {
    if (read_int(o, "hidden_size", what, 0, 1, &c->hidden_size, err) ||
        read_int(o, "intermediate_size", what, 0, 1, &c->intermediate_size, err) ||
        read_int(o, "num_hidden_layers", what, 0, 1, &c->n_layers, err) ||
        read_int(o, "num_attention_heads", what, 0, 1, &c->n_heads, err) ||
        read_int(o, "num_key_value_heads", what, c->n_heads, 0, &c->n_kv_heads, err) ||
        read_int(o, "head_dim", what, c->n_heads > 0 ? c->hidden_size / c->n_heads : 0, 0, &c->head_dim, err) ||
        read_int(o, "vocab_size", what, 0, 1, &c->vocab_size, err))
        return -1;
    double eps;
    if (flint_json_get_double(o, "rms_norm_eps", what, 1e-6, &eps, err)) return -1;
    c->rms_norm_eps = (float)eps;
    if (read_rope(o, what, &c->rope_theta, err)) return -1;
    const char *act = flint_json_get_string(o, "hidden_act", what, "silu", err);
    if (!act) return -1;
    if (strcmp(act, "silu")) return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: hidden_act '%s' (only silu)", what, act);
    int bias = 0;
    if (flint_json_get_bool(o, "attention_bias", what, 0, &bias, err)) return -1;
    if (bias) return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: attention_bias is not supported", what);
    if (c->hidden_size < 1 || c->n_layers < 1 || c->n_heads < 1 || c->n_kv_heads < 1 || c->head_dim < 2 ||
        c->head_dim % 2 || c->n_heads % c->n_kv_heads || c->intermediate_size < 1 || c->vocab_size < 1)
        return flint_err_set(err, FLINT_ERR_FORMAT, "%s: inconsistent sizes (hidden %d, layers %d, heads %d/%d, "
                             "head_dim %d)", what, c->hidden_size, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim);
    return 0;
}

static int read_heads(const cJSON *o, const char *what, flint_drafter_config *c, flint_err *err) {
    if (read_int(o, "markov_rank", what, 0, 0, &c->markov_rank, err)) return -1;
    if (c->markov_rank < 0) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: markov_rank is negative", what);
    const char *mt = flint_json_get_string(o, "markov_head_type", what, "vanilla", err);
    if (!mt) return -1;
    if (c->markov_rank > 0 && strcmp(mt, "vanilla"))
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: markov_head_type '%s' (only vanilla)", what, mt);
    if (flint_json_get_bool(o, "enable_confidence_head", what, 0, &c->has_confidence, err) ||
        flint_json_get_bool(o, "confidence_head_with_markov", what, c->markov_rank > 0, &c->confidence_with_markov,
                            err))
        return -1;
    if (c->markov_rank == 0) c->confidence_with_markov = 0;
    return 0;
}

int flint_drafter_config_load(const char *dir, flint_drafter_config *c, flint_err *err) {
    char path[4096];
    memset(c, 0, sizeof *c);
    if (flint_path_join(path, sizeof path, dir, "config.json"))
        return flint_err_set(err, FLINT_ERR_INVALID, "drafter path too long: %s", dir);
    cJSON *j = flint_json_load_file(path, 1 << 22, err);
    if (!j) return -1;
    int rc = -1;
    const cJSON *smt = cJSON_GetObjectItemCaseSensitive(j, "speculators_model_type");
    if (smt) {
        if (!cJSON_IsString(smt) || strcmp(smt->valuestring, "dspark")) {
            flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: speculators_model_type %s%s%s is not supported (dspark)",
                          path, cJSON_IsString(smt) ? "'" : "", cJSON_IsString(smt) ? smt->valuestring : "(not a string)",
                          cJSON_IsString(smt) ? "'" : "");
            goto done;
        }
        c->format = FLINT_DRAFT_FORMAT_SPECULATORS;
        const cJSON *tl = cJSON_GetObjectItemCaseSensitive(j, "transformer_layer_config");
        if (!cJSON_IsObject(tl)) {
            flint_err_set(err, FLINT_ERR_FORMAT, "%s: missing object \"transformer_layer_config\"", path);
            goto done;
        }
        if (read_backbone(tl, path, c, err) || read_heads(j, path, c, err)) goto done;
        int aux[FLINT_DRAFT_MAX_TAPS];
        if (read_ids(j, "aux_hidden_state_layer_ids", path, aux, &c->n_taps, err)) goto done;
        /* speculators counts layer inputs: aux id a is the output of layer a - 1 */
        for (int i = 0; i < c->n_taps; i++) c->tap_layers[i] = aux[i] - 1;
        if (read_int(j, "draft_vocab_size", path, c->vocab_size, 0, &c->draft_vocab_size, err)) goto done;
        int sfa = 0;
        /* absent means the original 1+N fill-in layout (older exports carry no flag) */
        if (flint_json_get_bool(j, "sample_from_anchor", path, 0, &sfa, err)) goto done;
        c->layout = sfa ? FLINT_DRAFT_ANCHOR_FIRST : FLINT_DRAFT_FILL_IN;
    } else {
        const cJSON *arch = cJSON_GetObjectItemCaseSensitive(j, "architectures");
        const cJSON *a0 = cJSON_IsArray(arch) ? cJSON_GetArrayItem(arch, 0) : NULL;
        if (!cJSON_IsString(a0) || strcmp(a0->valuestring, "Qwen3DSparkModel")) {
            flint_err_set(err, FLINT_ERR_UNSUPPORTED,
                          "%s: not a DSpark drafter (architectures %s; expected Qwen3DSparkModel or a speculators "
                          "config with speculators_model_type dspark)", path,
                          cJSON_IsString(a0) ? a0->valuestring : "missing");
            goto done;
        }
        c->format = FLINT_DRAFT_FORMAT_DEEPSPEC;
        if (read_backbone(j, path, c, err) || read_heads(j, path, c, err)) goto done;
        if (read_ids(j, "target_layer_ids", path, c->tap_layers, &c->n_taps, err)) goto done;
        c->draft_vocab_size = c->vocab_size;
        c->layout = FLINT_DRAFT_ANCHOR_FIRST; /* DeepSpec checkpoints carry no flag: always anchor-first */
        int sfa = 1;
        if (flint_json_get_bool(j, "sample_from_anchor", path, 1, &sfa, err)) goto done;
        if (!sfa) c->layout = FLINT_DRAFT_FILL_IN;
    }
    if (read_int(j, "block_size", path, 0, 1, &c->block_size, err) ||
        read_int(j, "mask_token_id", path, 0, 1, &c->mask_token_id, err))
        goto done;
    if (c->block_size < 2 || c->block_size > FLINT_DRAFT_MAX_BLOCK) {
        flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: block_size %d is outside 2..%d", path, c->block_size,
                      FLINT_DRAFT_MAX_BLOCK);
        goto done;
    }
    c->max_draft = c->layout == FLINT_DRAFT_ANCHOR_FIRST ? c->block_size : c->block_size - 1;
    if (c->draft_vocab_size < 1 || c->draft_vocab_size > c->vocab_size) {
        flint_err_set(err, FLINT_ERR_FORMAT, "%s: draft_vocab_size %d is outside 1..%d", path, c->draft_vocab_size,
                      c->vocab_size);
        goto done;
    }
    rc = 0;
done:
    cJSON_Delete(j);
    return rc;
}

int flint_drafter_config_check(const char *dir, const flint_drafter_config *c, const flint_target_config *t,
                               flint_err *err) {
    if (c->hidden_size != t->hidden_size)
        return flint_err_set(err, FLINT_ERR_INVALID, "%s: drafter hidden_size %d != target hidden_size %d", dir,
                             c->hidden_size, t->hidden_size);
    if (c->vocab_size != t->vocab_size)
        return flint_err_set(err, FLINT_ERR_INVALID, "%s: drafter vocab_size %d != target vocab_size %d", dir,
                             c->vocab_size, t->vocab_size);
    if (c->mask_token_id < 0 || c->mask_token_id >= t->vocab_size)
        return flint_err_set(err, FLINT_ERR_INVALID, "%s: mask_token_id %d is outside the target vocabulary (0..%d)",
                             dir, c->mask_token_id, t->vocab_size - 1);
    for (int i = 0; i < c->n_taps; i++) {
        int l = c->tap_layers[i];
        if (l == -1)
            return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: tap layer -1 (the embedding output) is not "
                                 "supported", dir);
        if (l < 0 || l >= t->n_layers - 1)
            return flint_err_set(err, FLINT_ERR_INVALID,
                                 "%s: tap layer %d is outside 0..%d (the target has %d layers; its last layer may "
                                 "not be tapped)%s", dir, l, t->n_layers - 2, t->n_layers,
                                 c->format == FLINT_DRAFT_FORMAT_SPECULATORS
                                     ? " - speculators aux_hidden_state_layer_ids are layer ids + 1" : "");
        if (i > 0 && l <= c->tap_layers[i - 1])
            return flint_err_set(err, FLINT_ERR_INVALID, "%s: tap layers must be strictly increasing", dir);
    }
    return 0;
}
