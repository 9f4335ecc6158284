/* safetensors files, read through mmap and validated before any tensor is used: the header JSON
 * parses, every entry has a known dtype, a shape and data_offsets, offsets lie inside the data
 * section, entries do not overlap, and shape x dtype size = byte length. A bad file gives an
 * error that names the file and the tensor. A model directory may hold several shards
 * (model.safetensors, or model-0000N-of-0000M.safetensors with or without an index file). */
#ifndef FLINT_CORE_SAFETENSORS_H
#define FLINT_CORE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    FLINT_DT_F32 = 0,
    FLINT_DT_F16,
    FLINT_DT_BF16,
    FLINT_DT_I64,
    FLINT_DT_I32,
    FLINT_DT_U8,
    FLINT_DT_BOOL,
} flint_dtype;

#define FLINT_ST_MAX_DIMS 8

typedef struct flint_tensor_info {
    const char *name;   /* owned by the flint_st */
    const char *file;   /* path of the shard holding it */
    flint_dtype dtype;
    int ndim;
    int64_t shape[FLINT_ST_MAX_DIMS];
    int64_t numel;
    const void *data;   /* inside the mmap; valid until flint_st_close */
    size_t nbytes;
} flint_tensor_info;

typedef struct flint_st flint_st;

size_t flint_dtype_size(flint_dtype dt);
const char *flint_dtype_name(flint_dtype dt);

/* Open one .safetensors file. */
flint_st *flint_st_open(const char *path, flint_err *err);
/* Open every *.safetensors file of a model directory as one set, shards in name order (a tensor
 * name present in two shards is an error). Fails when the directory holds none. When
 * DIR/model.safetensors.index.json exists, the shards are the files its weight_map names (a
 * directory may also hold a consolidated copy of the same weights), and every mapping is checked. */
flint_st *flint_st_open_dir(const char *dir, flint_err *err);
void flint_st_close(flint_st *st);

int flint_st_count(const flint_st *st);
const flint_tensor_info *flint_st_at(const flint_st *st, int i);
const flint_tensor_info *flint_st_find(const flint_st *st, const char *name);
/* A "__metadata__" value (the first shard that has the key), NULL when absent. */
const char *flint_st_meta(const flint_st *st, const char *key);

/* Look up `name` and check its shape equals shape[0..ndim); the error names the tensor, the
 * expected and the found shape. */
const flint_tensor_info *flint_st_expect(const flint_st *st, const char *name, int ndim, const int64_t *shape,
                                         flint_err *err);

/* Convert a float tensor (f32/f16/bf16) to f32; n must equal numel. */
int flint_tensor_to_f32(const flint_tensor_info *t, float *dst, size_t n, flint_err *err);

/* The float tensor `name` (F32, F16 or BF16) of shape [rows][cols] ([rows] when cols == 0),
 * rows [r0, r0 + nr) x columns [c0, c0 + nc) of it converted to f32 into dst [nr][nc]: the whole
 * tensor (r0 = c0 = 0, nr = rows, nc = cols, or nc = 0 for 1-D), or a tensor-parallel shard.
 * Errors name `owner` (the model directory), the tensor and what is wrong. */
int flint_st_load_f32(const flint_st *st, const char *owner, const char *name, int64_t rows, int64_t cols, int64_t r0,
                      int64_t nr, int64_t c0, int64_t nc, float *dst, flint_err *err);

/* Exact conversions used across the project. */
float flint_bf16_to_f32(uint16_t h);
uint16_t flint_f32_to_bf16(float f); /* round to nearest even; NaN stays NaN */
float flint_f16_to_f32(uint16_t h);
uint16_t flint_f32_to_f16(float f);

/* Writer: tensors in the given order, except that wider dtypes go first (a stable sort by element
 * size, as the reference writer orders them), so that every tensor is aligned to its element size
 * without gaps, which the reference reader refuses. Header keys follow the data order with
 * "__metadata__" first, and the header is padded with spaces so the data section is 8-byte aligned:
 * given the reference writer's order, the file is byte-identical to its output. meta_kv holds
 * n_meta (key, value) string pairs, flattened. The file is written beside `path` and renamed. */
typedef struct flint_st_entry {
    const char *name;
    flint_dtype dtype;
    int ndim;
    int64_t shape[FLINT_ST_MAX_DIMS];
    const void *data; /* numel x dtype size bytes */
} flint_st_entry;

int flint_st_write(const char *path, const flint_st_entry *entries, int n, const char *const *meta_kv, int n_meta,
                   flint_err *err);

#ifdef __cplusplus
}
#endif
#endif
