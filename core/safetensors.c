/* safetensors reader and writer (see safetensors.h).
 *
 * Why it exists: every checkpoint flint loads (target, drafter, converted llama2.c models) is a
 * safetensors file, and a model file is untrusted input. Each shard is mmapped read-only and its
 * whole header is validated before a single tensor pointer is handed out, so a truncated download
 * or a hand-edited header fails at open time with the file and the tensor named, instead of as a
 * SIGBUS or a garbage forward pass later.
 *
 * File layout (github.com/huggingface/safetensors, "format" section): u64 little-endian N, then N
 * bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}},
 * then the data section; offsets are relative to the start of the data section. */
#include "safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json.h"

/* The reference implementation refuses headers over 100 MB; so do we, so that a random file whose
 * first 8 bytes happen to be huge is not read as a JSON header. */
#define ST_MAX_HEADER 100000000ull
/* Integers in the header arrive as doubles through cJSON; above 2^53 they are no longer exact. */
#define ST_MAX_JSON_INT 9007199254740992.0

typedef struct shard {
    char *path;
    void *map;
    size_t size;
} shard;

struct flint_st {
    char *what;              /* the file or directory the set was opened from, for messages */
    shard *shards;
    int n_shards;
    flint_tensor_info *t;    /* shard order, then data-offset order inside a shard */
    int n, cap;
    int *by_name;            /* indices into t sorted by name, for flint_st_find */
    char **meta;             /* "__metadata__" key/value pairs of every shard, in file order */
    int n_meta;
};

/* ==== dtypes and exact float conversions ==== */

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    [FLINT_DT_F32] = {"F32", 4}, [FLINT_DT_F16] = {"F16", 2}, [FLINT_DT_BF16] = {"BF16", 2},
    [FLINT_DT_I64] = {"I64", 8}, [FLINT_DT_I32] = {"I32", 4}, [FLINT_DT_U8] = {"U8", 1},
    [FLINT_DT_BOOL] = {"BOOL", 1},
};
#define N_DTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

size_t flint_dtype_size(flint_dtype dt) { return (int)dt >= 0 && (int)dt < N_DTYPES ? dtypes[dt].size : 0; }

const char *flint_dtype_name(flint_dtype dt) {
    return (int)dt >= 0 && (int)dt < N_DTYPES ? dtypes[dt].name : "?";
}

static int dtype_parse(const char *s, flint_dtype *out) {
    for (int i = 0; i < N_DTYPES; i++)
        if (strcmp(s, dtypes[i].name) == 0) {
            *out = (flint_dtype)i;
            return 0;
        }
    return -1;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float flint_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t flint_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    /* Rounding a NaN could carry into the exponent and make it Inf; keep sign and the top payload
     * bits and force the quiet bit so the result is still a NaN. */
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even; overflow lands on Inf */
    return (uint16_t)(u >> 16);
}

float flint_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13)); /* Inf, NaN with payload */
    if (exp == 0) {
        /* zero or subnormal: man x 2^-24, exact in f32 */
        float v = (float)man * 0x1p-24f;
        return bits_f32(sign | f32_bits(v));
    }
    return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t flint_f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* quiet NaN */
    /* 65520 is halfway between 65504 (odd mantissa) and 65536: ties-to-even goes to Inf */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) { /* normal in f16: rebias the exponent, round 13 mantissa bits away */
        uint32_t r = a - 0x38000000u;
        r += 0xfffu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    if (a < 0x33000000u) return sign; /* below half the smallest subnormal (exactly half ties to 0) */
    /* f16 subnormal: result = round(value / 2^-24); value = m x 2^(e-150) */
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..24 */
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) r++; /* r == 0x400 is the smallest normal: right */
    return (uint16_t)(sign | r);
}

/* ==== messages ==== */

static void fmt_shape(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, cap - o, "[");
    for (int i = 0; i < ndim && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

/* ==== reading ==== */

static int json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0) || d > ST_MAX_JSON_INT || d != floor(d)) return -1;
    *out = (uint64_t)d;
    return 0;
}

static int push_tensor(flint_st *st, flint_tensor_info *ti) {
    if (st->n == st->cap) {
        int cap = st->cap ? st->cap * 2 : 64;
        flint_tensor_info *t = realloc(st->t, (size_t)cap * sizeof *t);
        if (!t) return -1;
        st->t = t;
        st->cap = cap;
    }
    st->t[st->n++] = *ti;
    return 0;
}

static int cmp_offset(const void *a, const void *b) {
    const flint_tensor_info *x = a, *y = b;
    const char *px = x->data, *py = y->data;
    if (px != py) return px < py ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* Validate one header entry and append it. `data`/`dsize` are the shard's data section. */
static int parse_entry(flint_st *st, const char *path, const cJSON *e, const char *data, uint64_t dsize,
                       flint_err *err) {
    const char *name = e->string;
    if (!cJSON_IsObject(e))
        return flint_err_set(err, FLINT_ERR_FORMAT, "%s: tensor '%s': header entry is not a JSON object", path,
                             name);
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(jd))
        return flint_err_set(err, FLINT_ERR_FORMAT, "%s: tensor '%s': missing or non-string \"dtype\"", path, name);
    flint_tensor_info ti;
    memset(&ti, 0, sizeof ti);
    if (dtype_parse(jd->valuestring, &ti.dtype) != 0)
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED,
                             "%s: tensor '%s': unknown dtype '%s' (flint reads F32, F16, BF16, I64, I32, U8, BOOL)",
                             path, name, jd->valuestring);
    int nd = cJSON_IsArray(js) ? cJSON_GetArraySize(js) : -1;
    if (nd < 0 || nd > FLINT_ST_MAX_DIMS)
        return flint_err_set(err, FLINT_ERR_FORMAT,
                             "%s: tensor '%s': \"shape\" must be an array of at most %d non-negative integers",
                             path, name, FLINT_ST_MAX_DIMS);
    ti.ndim = nd;
    uint64_t numel = 1;
    for (int i = 0; i < nd; i++) {
        uint64_t d;
        if (json_uint(cJSON_GetArrayItem(js, i), &d) != 0)
            return flint_err_set(err, FLINT_ERR_FORMAT,
                                 "%s: tensor '%s': \"shape\" must be an array of non-negative integers "
                                 "(dimension %d is not)",
                                 path, name, i);
        ti.shape[i] = (int64_t)d;
        if (d != 0 && numel > (uint64_t)INT64_MAX / d)
            return flint_err_set(err, FLINT_ERR_FORMAT, "%s: tensor '%s': shape overflows 64 bits", path, name);
        numel *= d;
    }
    size_t es = dtypes[ti.dtype].size;
    if (numel > (uint64_t)INT64_MAX / es)
        return flint_err_set(err, FLINT_ERR_FORMAT, "%s: tensor '%s': shape x dtype size overflows 64 bits", path,
                             name);
    uint64_t need = numel * es, b, en;
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2 || json_uint(cJSON_GetArrayItem(jo, 0), &b) != 0 ||
        json_uint(cJSON_GetArrayItem(jo, 1), &en) != 0)
        return flint_err_set(err, FLINT_ERR_FORMAT,
                             "%s: tensor '%s': \"data_offsets\" must be [begin, end], two non-negative integers",
                             path, name);
    char sh[256];
    fmt_shape(sh, sizeof sh, nd, ti.shape);
    if (b > en)
        return flint_err_set(err, FLINT_ERR_FORMAT, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                             "] are reversed (begin > end)", path, name, b, en);
    if (en - b != need)
        return flint_err_set(err, FLINT_ERR_FORMAT,
                             "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] but shape %s x %s needs %" PRIu64
                             " bytes",
                             path, name, b, en, sh, dtypes[ti.dtype].name, need);
    if (en > dsize)
        return flint_err_set(err, FLINT_ERR_FORMAT,
                             "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] run past the end of the "
                             "%" PRIu64 "-byte data section (truncated file?)",
                             path, name, b, en, dsize);
    ti.numel = (int64_t)numel;
    ti.nbytes = (size_t)need;
    ti.data = data + b;
    ti.file = path;
    ti.name = strdup(name);
    if (!ti.name || push_tensor(st, &ti) != 0) {
        free((char *)ti.name);
        return flint_err_set(err, FLINT_ERR_NOMEM, "%s: out of memory reading the header", path);
    }
    return 0;
}

static int parse_metadata(flint_st *st, const char *path, const cJSON *m, flint_err *err) {
    if (!cJSON_IsObject(m))
        return flint_err_set(err, FLINT_ERR_FORMAT, "%s: \"__metadata__\" must be an object of strings", path);
    for (const cJSON *kv = m->child; kv; kv = kv->next) {
        if (!cJSON_IsString(kv))
            return flint_err_set(err, FLINT_ERR_FORMAT, "%s: \"__metadata__\" value of '%s' is not a string", path,
                                 kv->string);
        char **mm = realloc(st->meta, (size_t)(st->n_meta + 1) * 2 * sizeof *mm);
        if (!mm) return flint_err_set(err, FLINT_ERR_NOMEM, "%s: out of memory", path);
        st->meta = mm;
        mm[2 * st->n_meta] = strdup(kv->string);
        mm[2 * st->n_meta + 1] = strdup(kv->valuestring);
        st->n_meta++;
        if (!mm[2 * st->n_meta - 2] || !mm[2 * st->n_meta - 1])
            return flint_err_set(err, FLINT_ERR_NOMEM, "%s: out of memory", path);
    }
    return 0;
}

/* Map one file and append its validated tensors to st. On failure st still owns whatever was
 * mapped; the caller closes it. */
static int load_shard(flint_st *st, const char *path, flint_err *err) {
    shard *sh = realloc(st->shards, (size_t)(st->n_shards + 1) * sizeof *sh);
    if (!sh) return flint_err_set(err, FLINT_ERR_NOMEM, "%s: out of memory", path);
    st->shards = sh;
    shard *s = &st->shards[st->n_shards];
    memset(s, 0, sizeof *s);
    s->path = strdup(path);
    if (!s->path) return flint_err_set(err, FLINT_ERR_NOMEM, "%s: out of memory", path);
    st->n_shards++;
    path = s->path; /* tensor infos point at this copy; the caller's buffer may be reused */

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return flint_err_set(err, FLINT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return flint_err_set(err, FLINT_ERR_IO, "%s: not a regular file", path);
    }
    if (sb.st_size < 8) {
        close(fd);
        return flint_err_set(err, FLINT_ERR_FORMAT,
                             "%s: file is %lld bytes, too short for a safetensors file (8-byte header length, "
                             "then a JSON header)",
                             path, (long long)sb.st_size);
    }
    void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED) return flint_err_set(err, FLINT_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
    s->map = map;
    s->size = (size_t)sb.st_size;

    const unsigned char *p = map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | p[i];
    uint64_t avail = (uint64_t)s->size - 8;
    if (hlen < 2)
        return flint_err_set(err, FLINT_ERR_FORMAT, "%s: header length %" PRIu64 " is too small for a JSON object",
                             path, hlen);
    if (hlen > ST_MAX_HEADER)
        return flint_err_set(err, FLINT_ERR_FORMAT,
                             "%s: header length %" PRIu64 " exceeds the %llu-byte limit (not a safetensors file?)",
                             path, hlen, ST_MAX_HEADER);
    if (hlen > avail)
        return flint_err_set(err, FLINT_ERR_FORMAT,
                             "%s: header length %" PRIu64 " but only %" PRIu64 " bytes follow the length field "
                             "(truncated file?)",
                             path, hlen, avail);
    const char *hdr = (const char *)p + 8;
    const char *endp = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(hdr, (size_t)hlen, &endp, 0);
    if (!j) {
        size_t off = endp && endp >= hdr ? (size_t)(endp - hdr) : 0;
        return flint_err_set(err, FLINT_ERR_FORMAT, "%s: header is not valid JSON (near byte %zu of %" PRIu64 ")",
                             path, off, hlen);
    }
    /* cJSON stops at the end of the first value; anything but the reference writer's space padding
     * after it means a corrupt header */
    for (const char *q = endp; q && q < hdr + hlen; q++)
        if (*q != ' ' && *q != '\t' && *q != '\r' && *q != '\n' && *q != 0) {
            cJSON_Delete(j);
            return flint_err_set(err, FLINT_ERR_FORMAT, "%s: header has bytes after its JSON object", path);
        }
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return flint_err_set(err, FLINT_ERR_FORMAT, "%s: header JSON is not an object", path);
    }
    const char *data = hdr + hlen;
    uint64_t dsize = avail - hlen;
    int first = st->n;
    for (const cJSON *e = j->child; e; e = e->next) {
        int rc = strcmp(e->string, "__metadata__") == 0 ? parse_metadata(st, path, e, err)
                                                         : parse_entry(st, path, e, data, dsize, err);
        if (rc != 0) {
            cJSON_Delete(j);
            return -1;
        }
    }
    cJSON_Delete(j);

    /* Overlap check: sorted by begin, each tensor must end before the next begins. Empty tensors
     * occupy no bytes and overlap nothing. */
    int cnt = st->n - first;
    if (cnt > 1) qsort(st->t + first, (size_t)cnt, sizeof *st->t, cmp_offset);
    const flint_tensor_info *prev = NULL;
    for (int i = first; i < st->n; i++) {
        const flint_tensor_info *cur = &st->t[i];
        if (cur->nbytes == 0) continue;
        if (prev && (const char *)cur->data < (const char *)prev->data + prev->nbytes) {
            size_t pb = (size_t)((const char *)prev->data - data), cb = (size_t)((const char *)cur->data - data);
            return flint_err_set(err, FLINT_ERR_FORMAT,
                                 "%s: tensors '%s' [%zu, %zu] and '%s' [%zu, %zu] overlap in the data section", path,
                                 prev->name, pb, pb + prev->nbytes, cur->name, cb, cb + cur->nbytes);
        }
        prev = cur;
    }
    return 0;
}

/* qsort has no context argument in C11, so sort (key, index) pairs rather than reach the set
 * through a global: two threads may open models at once. */
typedef struct name_idx {
    const char *name;
    int idx;
} name_idx;

static int cmp_name_idx(const void *a, const void *b) {
    const name_idx *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->idx > y->idx) - (x->idx < y->idx);
}

/* Build the name index and refuse duplicate names (within one header or across shards). */
static int finish(flint_st *st, flint_err *err) {
    st->by_name = malloc((size_t)(st->n ? st->n : 1) * sizeof *st->by_name);
    name_idx *ni = malloc((size_t)(st->n ? st->n : 1) * sizeof *ni);
    if (!st->by_name || !ni) {
        free(ni);
        return flint_err_set(err, FLINT_ERR_NOMEM, "%s: out of memory", st->what);
    }
    for (int i = 0; i < st->n; i++) ni[i] = (name_idx){st->t[i].name, i};
    if (st->n > 1) qsort(ni, (size_t)st->n, sizeof *ni, cmp_name_idx);
    for (int i = 0; i < st->n; i++) st->by_name[i] = ni[i].idx;
    free(ni);
    for (int i = 1; i < st->n; i++) {
        const flint_tensor_info *a = &st->t[st->by_name[i - 1]], *b = &st->t[st->by_name[i]];
        if (strcmp(a->name, b->name) != 0) continue;
        if (a->file == b->file)
            return flint_err_set(err, FLINT_ERR_FORMAT, "%s: tensor '%s' appears twice in the header", a->file,
                                 a->name);
        return flint_err_set(err, FLINT_ERR_FORMAT, "%s: tensor '%s' is in two shards, %s and %s", st->what, a->name,
                             a->file, b->file);
    }
    return 0;
}

static flint_st *st_new(const char *what, flint_err *err) {
    flint_st *st = calloc(1, sizeof *st);
    if (st) st->what = strdup(what);
    if (!st || !st->what) {
        free(st);
        flint_err_set(err, FLINT_ERR_NOMEM, "%s: out of memory", what);
        return NULL;
    }
    return st;
}

flint_st *flint_st_open(const char *path, flint_err *err) {
    flint_st *st = st_new(path, err);
    if (!st) return NULL;
    if (load_shard(st, path, err) != 0 || finish(st, err) != 0) {
        flint_st_close(st);
        return NULL;
    }
    return st;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void free_names(char **names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

static int add_name(char ***names, int *n, const char *s) {
    char **nn = realloc(*names, (size_t)(*n + 1) * sizeof **names);
    if (!nn) return -1;
    *names = nn;
    if (!(nn[*n] = strdup(s))) return -1;
    (*n)++;
    return 0;
}

/* With an index file the shard list comes from its weight_map: a directory may also hold a
 * consolidated copy of the same weights (Mistral ships consolidated.safetensors beside
 * model-0000N-of-0000M.safetensors), which opening every *.safetensors would refuse as duplicates. */
static int shards_from_index(const char *dir, const char *index_path, char ***names, int *n, cJSON **index,
                             flint_err *err) {
    cJSON *j = flint_json_load_file(index_path, 1u << 30, err);
    if (!j) return -1;
    *index = j;
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(j, "weight_map");
    if (!cJSON_IsObject(wm))
        return flint_err_set(err, FLINT_ERR_FORMAT, "%s: missing \"weight_map\" object", index_path);
    for (const cJSON *e = wm->child; e; e = e->next) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/'))
            return flint_err_set(err, FLINT_ERR_FORMAT, "%s: weight_map entry '%s' must name a file in %s",
                                 index_path, e->string, dir);
        int seen = 0;
        for (int i = 0; i < *n && !seen; i++) seen = strcmp((*names)[i], e->valuestring) == 0;
        if (!seen && add_name(names, n, e->valuestring) != 0)
            return flint_err_set(err, FLINT_ERR_NOMEM, "%s: out of memory", index_path);
    }
    if (*n == 0) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: weight_map names no shards", index_path);
    return 0;
}

static int shards_from_listing(const char *dir, char ***names, int *n, flint_err *err) {
    DIR *d = opendir(dir);
    if (!d) return flint_err_set(err, FLINT_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
    static const char ext[] = ".safetensors";
    size_t el = sizeof ext - 1;
    struct dirent *de;
    char path[4096];
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l <= el || strcmp(de->d_name + l - el, ext) != 0) continue;
        struct stat sb;
        if (flint_path_join(path, sizeof path, dir, de->d_name) != 0 || stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
            continue;
        if (add_name(names, n, de->d_name) != 0) {
            closedir(d);
            return flint_err_set(err, FLINT_ERR_NOMEM, "%s: out of memory", dir);
        }
    }
    closedir(d);
    if (*n == 0) return flint_err_set(err, FLINT_ERR_IO, "%s: no *.safetensors files in the directory", dir);
    return 0;
}

flint_st *flint_st_open_dir(const char *dir, flint_err *err) {
    char path[4096], index_path[4096];
    if (flint_path_join(index_path, sizeof index_path, dir, "model.safetensors.index.json") != 0) {
        flint_err_set(err, FLINT_ERR_INVALID, "%s: path too long", dir);
        return NULL;
    }
    flint_st *st = st_new(dir, err);
    if (!st) return NULL;
    char **names = NULL;
    int n = 0;
    cJSON *index = NULL;
    int use_index = flint_file_exists(index_path);
    int rc = use_index ? shards_from_index(dir, index_path, &names, &n, &index, err)
                       : shards_from_listing(dir, &names, &n, err);
    if (rc == 0 && n > 1) qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 0; rc == 0 && i < n; i++) {
        if (flint_path_join(path, sizeof path, dir, names[i]) != 0)
            rc = flint_err_set(err, FLINT_ERR_INVALID, "%s: path too long", dir);
        else
            rc = load_shard(st, path, err);
    }
    if (rc == 0) rc = finish(st, err);
    /* the index and the shards must agree, or a tensor would silently come from the wrong file */
    if (rc == 0 && use_index) {
        const cJSON *wm = cJSON_GetObjectItemCaseSensitive(index, "weight_map");
        for (const cJSON *e = wm->child; rc == 0 && e; e = e->next) {
            const flint_tensor_info *t = flint_st_find(st, e->string);
            const char *base = t ? strrchr(t->file, '/') : NULL;
            base = base ? base + 1 : (t ? t->file : NULL);
            if (!t || strcmp(base, e->valuestring) != 0)
                rc = flint_err_set(err, FLINT_ERR_FORMAT, "%s: tensor '%s' is mapped to %s, which does not hold it",
                                   index_path, e->string, e->valuestring);
        }
    }
    cJSON_Delete(index);
    free_names(names, n);
    if (rc != 0) {
        flint_st_close(st);
        return NULL;
    }
    return st;
}

void flint_st_close(flint_st *st) {
    if (!st) return;
    for (int i = 0; i < st->n; i++) free((char *)st->t[i].name);
    for (int i = 0; i < st->n_shards; i++) {
        if (st->shards[i].map) munmap(st->shards[i].map, st->shards[i].size);
        free(st->shards[i].path);
    }
    for (int i = 0; i < 2 * st->n_meta; i++) free(st->meta[i]);
    free(st->meta);
    free(st->shards);
    free(st->t);
    free(st->by_name);
    free(st->what);
    free(st);
}

int flint_st_count(const flint_st *st) { return st->n; }

const flint_tensor_info *flint_st_at(const flint_st *st, int i) {
    return i >= 0 && i < st->n ? &st->t[i] : NULL;
}

const flint_tensor_info *flint_st_find(const flint_st *st, const char *name) {
    int lo = 0, hi = st->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const flint_tensor_info *t = &st->t[st->by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0) return t;
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

const char *flint_st_meta(const flint_st *st, const char *key) {
    for (int i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta[2 * i], key) == 0) return st->meta[2 * i + 1];
    return NULL;
}

const flint_tensor_info *flint_st_expect(const flint_st *st, const char *name, int ndim, const int64_t *shape,
                                         flint_err *err) {
    const flint_tensor_info *t = flint_st_find(st, name);
    if (!t) {
        flint_err_set(err, FLINT_ERR_FORMAT, "%s: tensor '%s' is missing", st->what, name);
        return NULL;
    }
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (!same) {
        char want[256], got[256];
        fmt_shape(want, sizeof want, ndim, shape);
        fmt_shape(got, sizeof got, t->ndim, t->shape);
        flint_err_set(err, FLINT_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s", t->file, name, got, want);
        return NULL;
    }
    return t;
}

/* Source bytes may sit at any alignment (another writer need not pad its header to 8), hence the
 * memcpy loads. */
int flint_tensor_to_f32(const flint_tensor_info *t, float *dst, size_t n, flint_err *err) {
    if (n != (size_t)t->numel)
        return flint_err_set(err, FLINT_ERR_INVALID, "%s: tensor '%s': converting %" PRId64 " elements into a %zu-float buffer",
                             t->file, t->name, t->numel, n);
    const unsigned char *s = t->data;
    switch (t->dtype) {
    case FLINT_DT_F32:
        if (n) memcpy(dst, s, n * 4);
        return 0;
    case FLINT_DT_F16:
    case FLINT_DT_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = t->dtype == FLINT_DT_F16 ? flint_f16_to_f32(h) : flint_bf16_to_f32(h);
        }
        return 0;
    default:
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: tensor '%s' is %s, not a float tensor (F32, F16, BF16)",
                             t->file, t->name, flint_dtype_name(t->dtype));
    }
}

int flint_st_load_f32(const flint_st *st, const char *owner, const char *name, int64_t rows, int64_t cols, int64_t r0,
                      int64_t nr, int64_t c0, int64_t nc, float *dst, flint_err *err) {
    const flint_tensor_info *ti = flint_st_find(st, name);
    if (!ti) return flint_err_set(err, FLINT_ERR_FORMAT, "%s: tensor '%s' is missing from the safetensors files", owner,
                                  name);
    if (ti->dtype != FLINT_DT_F32 && ti->dtype != FLINT_DT_F16 && ti->dtype != FLINT_DT_BF16)
        return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s; only F32, F16 and BF16 are "
                             "supported", ti->file, name, flint_dtype_name(ti->dtype));
    int64_t shape[2] = {rows, cols};
    if (!flint_st_expect(st, name, cols ? 2 : 1, shape, err)) return -1;
    if (!cols) cols = 1, c0 = 0, nc = 1;
    FLINT_ASSERT(r0 >= 0 && nr >= 0 && r0 + nr <= rows && c0 >= 0 && nc >= 0 && c0 + nc <= cols);
    if (c0 == 0 && nc == cols) { /* whole rows: one contiguous run */
        flint_tensor_info part = *ti;
        part.data = (const unsigned char *)ti->data + (size_t)r0 * (size_t)cols * (ti->dtype == FLINT_DT_F32 ? 4 : 2);
        part.numel = nr * cols;
        return flint_tensor_to_f32(&part, dst, (size_t)part.numel, err);
    }
    size_t es = ti->dtype == FLINT_DT_F32 ? 4 : 2;
    for (int64_t i = 0; i < nr; i++) {
        flint_tensor_info part = *ti;
        part.data = (const unsigned char *)ti->data + ((size_t)(r0 + i) * (size_t)cols + (size_t)c0) * es;
        part.numel = nc;
        if (flint_tensor_to_f32(&part, dst + (size_t)i * (size_t)nc, (size_t)nc, err)) return -1;
    }
    return 0;
}

/* ==== writing ==== */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_json_str(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *q = (const unsigned char *)s; *q; q++) {
        char esc[8];
        if (*q == '"' || *q == '\\') {
            esc[0] = '\\', esc[1] = (char)*q;
            sb_put(b, esc, 2);
        } else if (*q < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *q);
            sb_put(b, esc, 6);
        } else {
            sb_put(b, (const char *)q, 1);
        }
    }
    sb_put(b, "\"", 1);
}

typedef struct wkey {
    size_t size;
    int idx;
} wkey;

static int cmp_write_order(const void *a, const void *b) {
    const wkey *x = a, *y = b;
    if (x->size != y->size) return x->size > y->size ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx); /* stable: keep the caller's order */
}

static int write_all(FILE *f, const void *p, size_t n) { return n == 0 || fwrite(p, 1, n, f) == n ? 0 : -1; }

int flint_st_write(const char *path, const flint_st_entry *entries, int n, const char *const *meta_kv, int n_meta,
                   flint_err *err) {
    if (n < 0 || n_meta < 0) return flint_err_set(err, FLINT_ERR_INVALID, "%s: negative tensor count", path);
    uint64_t *nbytes = calloc((size_t)n + 1, sizeof *nbytes);
    int *order = calloc((size_t)n + 1, sizeof *order);
    sbuf h = {0};
    char tmp[4200];
    FILE *f = NULL;
    int rc = -1;
    if (!nbytes || !order) {
        flint_err_set(err, FLINT_ERR_NOMEM, "%s: out of memory", path);
        goto out;
    }
    for (int i = 0; i < n; i++) {
        const flint_st_entry *e = &entries[i];
        if (!e->name || !e->name[0] || strcmp(e->name, "__metadata__") == 0) {
            flint_err_set(err, FLINT_ERR_INVALID, "%s: tensor %d has an empty or reserved name", path, i);
            goto out;
        }
        if ((int)e->dtype < 0 || (int)e->dtype >= N_DTYPES || e->ndim < 0 || e->ndim > FLINT_ST_MAX_DIMS) {
            flint_err_set(err, FLINT_ERR_INVALID, "%s: tensor '%s': bad dtype or rank", path, e->name);
            goto out;
        }
        uint64_t numel = 1;
        for (int d = 0; d < e->ndim; d++) {
            if (e->shape[d] < 0 || (e->shape[d] && numel > (uint64_t)INT64_MAX / (uint64_t)e->shape[d])) {
                flint_err_set(err, FLINT_ERR_INVALID, "%s: tensor '%s': bad shape", path, e->name);
                goto out;
            }
            numel *= (uint64_t)e->shape[d];
        }
        if (numel > (uint64_t)INT64_MAX / 8) {
            flint_err_set(err, FLINT_ERR_INVALID, "%s: tensor '%s': too large", path, e->name);
            goto out;
        }
        nbytes[i] = numel * dtypes[e->dtype].size;
        if (nbytes[i] && !e->data) {
            flint_err_set(err, FLINT_ERR_INVALID, "%s: tensor '%s': no data", path, e->name);
            goto out;
        }
        for (int k = 0; k < i; k++)
            if (strcmp(entries[k].name, e->name) == 0) {
                flint_err_set(err, FLINT_ERR_INVALID, "%s: tensor '%s' given twice", path, e->name);
                goto out;
            }
        order[i] = i;
    }
    for (int i = 0; i < 2 * n_meta; i++)
        if (!meta_kv[i]) {
            flint_err_set(err, FLINT_ERR_INVALID, "%s: metadata entry %d is NULL", path, i / 2);
            goto out;
        }
    /* Wider dtypes first, like the reference writer: with no padding between tensors (its
     * reader refuses gaps) this keeps every tensor aligned to its element size. */
    wkey *keys = malloc(((size_t)n + 1) * sizeof *keys);
    if (!keys) {
        flint_err_set(err, FLINT_ERR_NOMEM, "%s: out of memory", path);
        goto out;
    }
    for (int i = 0; i < n; i++) keys[i] = (wkey){dtypes[entries[i].dtype].size, i};
    if (n > 1) qsort(keys, (size_t)n, sizeof *keys, cmp_write_order);
    for (int i = 0; i < n; i++) order[i] = keys[i].idx;
    free(keys);

    sb_str(&h, "{");
    if (n_meta > 0) {
        sb_str(&h, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i) sb_str(&h, ",");
            sb_json_str(&h, meta_kv[2 * i]);
            sb_str(&h, ":");
            sb_json_str(&h, meta_kv[2 * i + 1]);
        }
        sb_str(&h, "}");
        if (n) sb_str(&h, ",");
    }
    uint64_t off = 0;
    for (int k = 0; k < n; k++) {
        const flint_st_entry *e = &entries[order[k]];
        char num[64];
        if (k) sb_str(&h, ",");
        sb_json_str(&h, e->name);
        sb_str(&h, ":{\"dtype\":\"");
        sb_str(&h, dtypes[e->dtype].name);
        sb_str(&h, "\",\"shape\":[");
        for (int d = 0; d < e->ndim; d++) {
            snprintf(num, sizeof num, "%s%" PRId64, d ? "," : "", e->shape[d]);
            sb_str(&h, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off, off + nbytes[order[k]]);
        sb_str(&h, num);
        off += nbytes[order[k]];
    }
    sb_str(&h, "}");
    while (!h.oom && h.n % 8) sb_str(&h, " "); /* data section starts 8-aligned, as the reference pads */
    if (h.oom) {
        flint_err_set(err, FLINT_ERR_NOMEM, "%s: out of memory building the header", path);
        goto out;
    }

    /* write beside the target and rename, so a failed write never leaves a half file under the
     * real name */
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        flint_err_set(err, FLINT_ERR_INVALID, "%s: path too long", path);
        goto out;
    }
    f = fopen(tmp, "wb");
    if (!f) {
        flint_err_set(err, FLINT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        goto out;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.n >> (8 * i));
    int bad = write_all(f, len8, 8) || write_all(f, h.p, h.n);
    for (int k = 0; !bad && k < n; k++) bad = write_all(f, entries[order[k]].data, (size_t)nbytes[order[k]]);
    if (fclose(f) != 0) bad = 1;
    f = NULL;
    if (bad) {
        flint_err_set(err, FLINT_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
        unlink(tmp);
        goto out;
    }
    if (rename(tmp, path) != 0) {
        flint_err_set(err, FLINT_ERR_IO, "%s: cannot rename %s into place: %s", path, tmp, strerror(errno));
        unlink(tmp);
        goto out;
    }
    rc = 0;
out:
    if (f) fclose(f);
    free(h.p);
    free(nbytes);
    free(order);
    return rc;
}
