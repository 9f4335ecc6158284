/* Tests for core/safetensors: round trips for every dtype, byte-for-byte agreement with the
 * reference (Python safetensors) writer, exact f16/bf16 conversions, and a clear error, never a
 * crash, for each kind of broken file. Broken files are written into a mkdtemp directory at run
 * time so the repository holds no deliberately corrupt fixtures. */
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/safetensors.h"
#include "test.h"

/* Written by safetensors 0.8.0 (safetensors.torch.save_file, metadata {"format": "pt"}):
 * a.f32 [2,3] = 0,0.5..2.5; b.f16 [3] = 1,-2.5,65504; c.bf16 [2] = 1,-3; d.i64 [2] = -1,2^40;
 * e.i32 [1,2] = 7,-7; f.u8 [3] = 0,128,255; g.bool [2] = true,false; h.scalar [] = 3.25;
 * i.empty [0,4]. */
static const unsigned char py_ref[] = {
    0x40, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7b, 0x22, 0x5f, 0x5f, 0x6d, 0x65, 0x74, 0x61,
    0x64, 0x61, 0x74, 0x61, 0x5f, 0x5f, 0x22, 0x3a, 0x7b, 0x22, 0x66, 0x6f, 0x72, 0x6d, 0x61, 0x74,
    0x22, 0x3a, 0x22, 0x70, 0x74, 0x22, 0x7d, 0x2c, 0x22, 0x64, 0x2e, 0x69, 0x36, 0x34, 0x22, 0x3a,
    0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x49, 0x36, 0x34, 0x22, 0x2c, 0x22,
    0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x32, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61,
    0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x30, 0x2c, 0x31, 0x36, 0x5d,
    0x7d, 0x2c, 0x22, 0x61, 0x2e, 0x66, 0x33, 0x32, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70,
    0x65, 0x22, 0x3a, 0x22, 0x46, 0x33, 0x32, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22,
    0x3a, 0x5b, 0x32, 0x2c, 0x33, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66,
    0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x31, 0x36, 0x2c, 0x34, 0x30, 0x5d, 0x7d, 0x2c, 0x22,
    0x68, 0x2e, 0x73, 0x63, 0x61, 0x6c, 0x61, 0x72, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70,
    0x65, 0x22, 0x3a, 0x22, 0x46, 0x33, 0x32, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22,
    0x3a, 0x5b, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74,
    0x73, 0x22, 0x3a, 0x5b, 0x34, 0x30, 0x2c, 0x34, 0x34, 0x5d, 0x7d, 0x2c, 0x22, 0x69, 0x2e, 0x65,
    0x6d, 0x70, 0x74, 0x79, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22,
    0x46, 0x33, 0x32, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x30, 0x2c,
    0x34, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73,
    0x22, 0x3a, 0x5b, 0x34, 0x34, 0x2c, 0x34, 0x34, 0x5d, 0x7d, 0x2c, 0x22, 0x65, 0x2e, 0x69, 0x33,
    0x32, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x49, 0x33, 0x32,
    0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x31, 0x2c, 0x32, 0x5d, 0x2c,
    0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b,
    0x34, 0x34, 0x2c, 0x35, 0x32, 0x5d, 0x7d, 0x2c, 0x22, 0x63, 0x2e, 0x62, 0x66, 0x31, 0x36, 0x22,
    0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x42, 0x46, 0x31, 0x36, 0x22,
    0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x32, 0x5d, 0x2c, 0x22, 0x64, 0x61,
    0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x35, 0x32, 0x2c,
    0x35, 0x36, 0x5d, 0x7d, 0x2c, 0x22, 0x62, 0x2e, 0x66, 0x31, 0x36, 0x22, 0x3a, 0x7b, 0x22, 0x64,
    0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x46, 0x31, 0x36, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61,
    0x70, 0x65, 0x22, 0x3a, 0x5b, 0x33, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66,
    0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x35, 0x36, 0x2c, 0x36, 0x32, 0x5d, 0x7d, 0x2c,
    0x22, 0x66, 0x2e, 0x75, 0x38, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a,
    0x22, 0x55, 0x38, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x33, 0x5d,
    0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a,
    0x5b, 0x36, 0x32, 0x2c, 0x36, 0x35, 0x5d, 0x7d, 0x2c, 0x22, 0x67, 0x2e, 0x62, 0x6f, 0x6f, 0x6c,
    0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x42, 0x4f, 0x4f, 0x4c,
    0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x32, 0x5d, 0x2c, 0x22, 0x64,
    0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x36, 0x35,
    0x2c, 0x36, 0x37, 0x5d, 0x7d, 0x7d, 0x20, 0x20, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x3f,
    0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0xc0, 0x3f, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x20, 0x40,
    0x00, 0x00, 0x50, 0x40, 0x07, 0x00, 0x00, 0x00, 0xf9, 0xff, 0xff, 0xff, 0x80, 0x3f, 0x40, 0xc0,
    0x00, 0x3c, 0x00, 0xc1, 0xff, 0x7b, 0x00, 0x80, 0xff, 0x01, 0x00,
};

static char tmpdir[] = "/tmp/flint_test_st_XXXXXX";

/* Paths inside the temp dir; each call gets its own buffer (a test makes far fewer than 256). */
static const char *tpath(const char *name) {
    static char buf[256][512];
    static int k;
    char *p = buf[k++ % 256];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    return p;
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    if (n) fwrite(p, 1, n, f);
    fclose(f);
}

/* A file with the given length field, header text and data_len data bytes (0x5a). */
static void write_raw(const char *path, uint64_t hlen_field, const char *header, size_t data_len) {
    size_t hl = strlen(header);
    unsigned char *b = calloc(1, 8 + hl + data_len + 1);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(hlen_field >> (8 * i));
    memcpy(b + 8, header, hl);
    memset(b + 8 + hl, 0x5a, data_len);
    write_bytes(path, b, 8 + hl + data_len);
    free(b);
}

static void write_hdr(const char *path, const char *header, size_t data_len) {
    write_raw(path, strlen(header), header, data_len);
}

/* Opening must fail with a message that names the file and contains every `want` (NULL-ended). */
static void expect_fail_(int line, const char *path, const char *want1, const char *want2, const char *want3) {
    flint_err err = {0};
    flint_st *st = flint_st_open(path, &err);
    CHECKF(st == NULL, "line %d: %s opened", line, path);
    if (st) {
        flint_st_close(st);
        return;
    }
    CHECKF(err.code != FLINT_OK, "line %d: no error code", line);
    CHECKF(strstr(err.msg, path) != NULL, "line %d: message does not name the file: %s", line, err.msg);
    const char *w[3] = {want1, want2, want3};
    for (int i = 0; i < 3; i++)
        if (w[i]) CHECKF(strstr(err.msg, w[i]) != NULL, "line %d: '%s' missing from: %s", line, w[i], err.msg);
}
#define expect_fail(path, a, b, c) expect_fail_(__LINE__, path, a, b, c)

static uint16_t f16_bits_of(double v) { return flint_f32_to_f16((float)v); }

/* ==== round trips ==== */

static void test_round_trip(void) {
    float f32[6] = {0.f, -1.5f, 3.25f, 1e-30f, INFINITY, -0.f};
    uint16_t f16[5] = {0x0000, 0x3c00, 0x8001, 0x7bff, 0xfc00};
    uint16_t bf16[4] = {0x3f80, 0xc040, 0x0001, 0x7f80};
    int64_t i64[3] = {INT64_MIN, -1, INT64_MAX};
    int32_t i32[4] = {INT32_MIN, 0, 1, INT32_MAX};
    uint8_t u8[5] = {0, 1, 127, 128, 255};
    uint8_t bl[3] = {1, 0, 1};
    flint_st_entry e[] = {
        {"bool", FLINT_DT_BOOL, 1, {3}, bl},
        {"model.f32", FLINT_DT_F32, 2, {2, 3}, f32},
        {"f16", FLINT_DT_F16, 1, {5}, f16},
        {"u8", FLINT_DT_U8, 3, {1, 5, 1}, u8},
        {"bf16", FLINT_DT_BF16, 2, {2, 2}, bf16},
        {"i64", FLINT_DT_I64, 1, {3}, i64},
        {"i32", FLINT_DT_I32, 1, {4}, i32},
        {"scalar", FLINT_DT_F32, 0, {0}, f32 + 2},
        {"empty", FLINT_DT_F16, 2, {0, 7}, NULL},
        {"weird \"name\"\\\t\xc3\xa9", FLINT_DT_U8, 1, {1}, u8 + 4},
    };
    int n = (int)(sizeof e / sizeof e[0]);
    const char *meta[] = {"format", "pt", "note", "quote \" and newline \n"};
    flint_err err = {0};
    const char *p = tpath("round.safetensors");
    CHECKF(flint_st_write(p, e, n, meta, 2, &err) == 0, "%s", err.msg);
    flint_st *st = flint_st_open(p, &err);
    CHECKF(st != NULL, "%s", err.msg);
    if (!st) return;
    CHECK(flint_st_count(st) == n);
    for (int i = 0; i < n; i++) {
        const flint_tensor_info *t = flint_st_find(st, e[i].name);
        CHECKF(t != NULL, "%s not found", e[i].name);
        if (!t) continue;
        CHECK(t->dtype == e[i].dtype);
        CHECK(t->ndim == e[i].ndim);
        int64_t numel = 1;
        for (int d = 0; d < e[i].ndim; d++) {
            CHECK(t->shape[d] == e[i].shape[d]);
            numel *= e[i].shape[d];
        }
        CHECK(t->numel == numel);
        CHECK(t->nbytes == (size_t)numel * flint_dtype_size(e[i].dtype));
        CHECK(t->nbytes == 0 || memcmp(t->data, e[i].data, t->nbytes) == 0);
        CHECKF((uintptr_t)t->data % flint_dtype_size(t->dtype) == 0, "%s misaligned", t->name);
        CHECK(strcmp(t->file, p) == 0);
    }
    CHECK(flint_st_meta(st, "format") && strcmp(flint_st_meta(st, "format"), "pt") == 0);
    CHECK(flint_st_meta(st, "note") && strcmp(flint_st_meta(st, "note"), meta[3]) == 0);
    CHECK(flint_st_meta(st, "absent") == NULL);
    CHECK(flint_st_find(st, "nope") == NULL);
    /* wider dtypes first, caller order otherwise */
    CHECK(strcmp(flint_st_at(st, 0)->name, "i64") == 0);
    CHECK(strcmp(flint_st_at(st, 1)->name, "model.f32") == 0);
    CHECK(flint_st_at(st, n) == NULL && flint_st_at(st, -1) == NULL);

    /* to_f32 for every float dtype, and refusal of the others */
    float out[6];
    const flint_tensor_info *t = flint_st_find(st, "f16");
    CHECK(t && flint_tensor_to_f32(t, out, 5, &err) == 0);
    CHECK(out[0] == 0.f && out[1] == 1.f && out[2] == -0x1p-24f && out[3] == 65504.f && out[4] == -INFINITY);
    t = flint_st_find(st, "bf16");
    CHECK(t && flint_tensor_to_f32(t, out, 4, &err) == 0);
    CHECK(out[0] == 1.f && out[1] == -3.f && out[2] == 0x1p-133f && out[3] == INFINITY);
    t = flint_st_find(st, "model.f32");
    CHECK(t && flint_tensor_to_f32(t, out, 6, &err) == 0 && memcmp(out, f32, sizeof f32) == 0);
    CHECK(t && flint_tensor_to_f32(t, out, 5, &err) == -1 && strstr(err.msg, "model.f32"));
    t = flint_st_find(st, "i32");
    CHECK(t && flint_tensor_to_f32(t, out, 4, &err) == -1 && err.code == FLINT_ERR_UNSUPPORTED &&
          strstr(err.msg, "'i32'") && strstr(err.msg, p));
    flint_st_close(st);

    /* writer refuses duplicate and reserved names */
    flint_st_entry dup[2] = {{"x", FLINT_DT_U8, 1, {1}, u8}, {"x", FLINT_DT_U8, 1, {1}, u8}};
    CHECK(flint_st_write(tpath("dup.safetensors"), dup, 2, NULL, 0, &err) == -1 && strstr(err.msg, "'x'"));
    flint_st_entry res[1] = {{"__metadata__", FLINT_DT_U8, 1, {1}, u8}};
    CHECK(flint_st_write(tpath("res.safetensors"), res, 1, NULL, 0, &err) == -1);
    CHECK(access(tpath("dup.safetensors"), F_OK) != 0);

    /* an empty set is a valid file */
    CHECK(flint_st_write(tpath("none.safetensors"), NULL, 0, NULL, 0, &err) == 0);
    st = flint_st_open(tpath("none.safetensors"), &err);
    CHECK(st && flint_st_count(st) == 0);
    flint_st_close(st);
}

/* A file from the reference writer reads back with the right values, and flint writes the same
 * tensors in the same order byte for byte. */
static void test_reference_file(void) {
    const char *p = tpath("py_ref.safetensors");
    write_bytes(p, py_ref, sizeof py_ref);
    flint_err err = {0};
    flint_st *st = flint_st_open(p, &err);
    CHECKF(st != NULL, "%s", err.msg);
    if (!st) return;
    CHECK(flint_st_count(st) == 9);
    CHECK(flint_st_meta(st, "format") && strcmp(flint_st_meta(st, "format"), "pt") == 0);
    float a[6], b[3], c[2], h;
    CHECK(flint_tensor_to_f32(flint_st_find(st, "a.f32"), a, 6, &err) == 0);
    CHECK(a[0] == 0.f && a[5] == 2.5f);
    CHECK(flint_tensor_to_f32(flint_st_find(st, "b.f16"), b, 3, &err) == 0);
    CHECK(b[0] == 1.f && b[1] == -2.5f && b[2] == 65504.f);
    CHECK(flint_tensor_to_f32(flint_st_find(st, "c.bf16"), c, 2, &err) == 0);
    CHECK(c[0] == 1.f && c[1] == -3.f);
    const flint_tensor_info *t = flint_st_find(st, "h.scalar");
    CHECK(t && t->ndim == 0 && t->numel == 1 && flint_tensor_to_f32(t, &h, 1, &err) == 0 && h == 3.25f);
    t = flint_st_find(st, "d.i64");
    int64_t d[2];
    CHECK(t && t->dtype == FLINT_DT_I64);
    if (t) memcpy(d, t->data, 16);
    CHECK(t && d[0] == -1 && d[1] == (int64_t)1 << 40);
    t = flint_st_find(st, "i.empty");
    CHECK(t && t->numel == 0 && t->nbytes == 0 && t->ndim == 2 && t->shape[0] == 0 && t->shape[1] == 4);
    t = flint_st_find(st, "g.bool");
    CHECK(t && t->dtype == FLINT_DT_BOOL && ((const uint8_t *)t->data)[0] == 1);

    /* rewrite in the file's own (reference) order */
    flint_st_entry e[9];
    for (int i = 0; i < flint_st_count(st); i++) {
        const flint_tensor_info *x = flint_st_at(st, i);
        e[i].name = x->name;
        e[i].dtype = x->dtype;
        e[i].ndim = x->ndim;
        memcpy(e[i].shape, x->shape, sizeof e[i].shape);
        e[i].data = x->data;
    }
    const char *meta[] = {"format", "pt"};
    const char *q = tpath("flint_ref.safetensors");
    CHECKF(flint_st_write(q, e, 9, meta, 1, &err) == 0, "%s", err.msg);
    flint_st_close(st);
    FILE *f = fopen(q, "rb");
    unsigned char buf[sizeof py_ref + 16];
    size_t got = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    CHECKF(got == sizeof py_ref && memcmp(buf, py_ref, got) == 0, "flint's file differs from the reference (%zu bytes)",
           got);
}

/* ==== conversions ==== */

static int is_nan16(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }

static void test_f16(void) {
    /* every f16 survives f16 -> f32 -> f16 exactly; NaNs stay NaN */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = flint_f16_to_f32((uint16_t)h);
        uint16_t back = flint_f32_to_f16(f);
        if (is_nan16((uint16_t)h) ? !(isnan(f) && is_nan16(back)) : back != h) bad++;
    }
    CHECKF(bad == 0, "%d f16 values do not round-trip", bad);
    CHECK(flint_f16_to_f32(0x0001) == 0x1p-24f);          /* smallest subnormal */
    CHECK(flint_f16_to_f32(0x03ff) == 1023 * 0x1p-24f);   /* largest subnormal */
    CHECK(flint_f16_to_f32(0x0400) == 0x1p-14f);          /* smallest normal */
    CHECK(flint_f16_to_f32(0x7bff) == 65504.f);
    CHECK(flint_f16_to_f32(0x7c00) == INFINITY && flint_f16_to_f32(0xfc00) == -INFINITY);
    CHECK(isnan(flint_f16_to_f32(0x7e00)) && isnan(flint_f16_to_f32(0x7c01)));
    float nz = flint_f16_to_f32(0x8000);
    CHECK(nz == 0.f && signbit(nz));
    CHECK(flint_f16_to_f32(0x3c00) == 1.f && flint_f16_to_f32(0xc000) == -2.f);

    /* rounding: nearest, ties to even, overflow to Inf, underflow to (signed) zero */
    CHECK(f16_bits_of(65519.0) == 0x7bff);
    CHECK(f16_bits_of(65520.0) == 0x7c00);               /* tie above the largest finite -> Inf */
    CHECK(f16_bits_of(1e9) == 0x7c00 && f16_bits_of(-1e9) == 0xfc00);
    CHECK(flint_f32_to_f16(INFINITY) == 0x7c00);
    CHECK(is_nan16(flint_f32_to_f16(NAN)));
    uint32_t nanbits = 0x7f800001; /* payload only in the low bits: must not become Inf */
    float snan;
    memcpy(&snan, &nanbits, 4);
    CHECK(is_nan16(flint_f32_to_f16(snan)));
    CHECK(f16_bits_of(1.0 + 0x1p-11) == 0x3c00);         /* tie -> even (down) */
    CHECK(f16_bits_of(1.0 + 3 * 0x1p-11) == 0x3c02);     /* tie -> even (up) */
    CHECK(f16_bits_of(0x1p-25) == 0x0000);               /* half the smallest subnormal -> 0 */
    CHECK(f16_bits_of(0x1p-25 * 1.0000002) == 0x0001);
    CHECK(f16_bits_of(3 * 0x1p-25) == 0x0002);           /* 1.5 ulp -> even */
    CHECK(f16_bits_of(1023.5 * 0x1p-24) == 0x0400);      /* subnormal rounds up into the normals */
    CHECK(f16_bits_of(1e-10) == 0x0000 && f16_bits_of(-1e-10) == 0x8000);
    CHECK(flint_f32_to_f16(-0.f) == 0x8000);
    CHECK(flint_f32_to_f16(0x1p-149f) == 0); /* f32 subnormal */

    /* random f32 values: the result is the nearest f16, ties to even */
    uint64_t s = 0x9e3779b97f4a7c15ull;
    bad = 0;
    for (int i = 0; i < 200000; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        uint32_t u = (uint32_t)s;
        u = (u & 0x80000000u) | (0x33000000u + (u & 0x7fffffffu) % (0x477fe000u - 0x33000000u));
        float f;
        memcpy(&f, &u, 4);
        uint16_t h = flint_f32_to_f16(f);
        double v = fabs((double)f), r = fabs((double)flint_f16_to_f32(h));
        uint16_t mag = h & 0x7fff;
        double lo = mag ? fabs((double)flint_f16_to_f32((uint16_t)(mag - 1))) : 0;
        double hi = fabs((double)flint_f16_to_f32((uint16_t)(mag + 1)));
        double err_r = fabs(v - r);
        int ok = (h & 0x8000) == ((u >> 16) & 0x8000) && err_r <= fabs(v - lo) && err_r <= fabs(v - hi);
        if (ok && (err_r == fabs(v - lo) || err_r == fabs(v - hi)) && err_r != 0) ok = (mag & 1) == 0;
        bad += !ok;
    }
    CHECKF(bad == 0, "%d random f32 -> f16 conversions are not nearest-even", bad);
}

static void test_bf16(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = flint_bf16_to_f32((uint16_t)h);
        uint16_t back = flint_f32_to_bf16(f);
        int nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
        if (nan ? !(isnan(f) && isnan(flint_bf16_to_f32(back))) : back != h) bad++;
    }
    CHECKF(bad == 0, "%d bf16 values do not round-trip", bad);
    CHECK(flint_f32_to_bf16(1.f) == 0x3f80);
    CHECK(flint_f32_to_bf16(1.f + 0x1p-8f) == 0x3f80);       /* tie -> even (down) */
    CHECK(flint_f32_to_bf16(1.f + 3 * 0x1p-8f) == 0x3f82);   /* tie -> even (up) */
    CHECK(flint_f32_to_bf16(1.f + 0x1p-8f + 0x1p-20f) == 0x3f81);
    CHECK(flint_f32_to_bf16(3.4028235e38f) == 0x7f80);       /* FLT_MAX rounds to Inf */
    CHECK(flint_f32_to_bf16(-INFINITY) == 0xff80);
    uint32_t nanbits = 0x7f800001;
    float snan;
    memcpy(&snan, &nanbits, 4);
    CHECK(isnan(flint_bf16_to_f32(flint_f32_to_bf16(snan))));
    CHECK(isnan(flint_bf16_to_f32(flint_f32_to_bf16(-NAN))));
    CHECK(flint_f32_to_bf16(0x1p-149f) == 0x0000);           /* f32 subnormal below half a bf16 ulp */
    CHECK(flint_bf16_to_f32(0x0001) == 0x1p-133f);           /* bf16 subnormal */
    CHECK(flint_f32_to_bf16(-0.f) == 0x8000);
}

/* ==== broken files ==== */

static void test_bad_files(void) {
    char big[256];
    expect_fail(tpath("missing.safetensors"), "cannot open", NULL, NULL);
    write_bytes(tpath("empty.safetensors"), "", 0);
    expect_fail(tpath("empty.safetensors"), "too short", NULL, NULL);
    write_bytes(tpath("short.safetensors"), "\x10\x00\x00", 3);
    expect_fail(tpath("short.safetensors"), "too short", NULL, NULL);
    expect_fail(tmpdir, "not a regular file", NULL, NULL);

    write_raw(tpath("hlen_big.safetensors"), 4096, "{}", 0);
    expect_fail(tpath("hlen_big.safetensors"), "header length 4096", "truncated", NULL);
    write_raw(tpath("hlen_huge.safetensors"), 0xffffffffffffull, "{}", 0);
    expect_fail(tpath("hlen_huge.safetensors"), "limit", NULL, NULL);
    write_raw(tpath("hlen_small.safetensors"), 1, "{}", 0);
    expect_fail(tpath("hlen_small.safetensors"), "too small", NULL, NULL);

    write_hdr(tpath("notjson.safetensors"), "{\"a\": {\"dtype\": ", 0);
    expect_fail(tpath("notjson.safetensors"), "not valid JSON", NULL, NULL);
    write_hdr(tpath("array.safetensors"), "[1, 2, 3]", 0);
    expect_fail(tpath("array.safetensors"), "not an object", NULL, NULL);
    write_hdr(tpath("trailing.safetensors"), "{} x", 0);
    expect_fail(tpath("trailing.safetensors"), "after its JSON", NULL, NULL);
    write_hdr(tpath("entry.safetensors"), "{\"w\": 5}", 0);
    expect_fail(tpath("entry.safetensors"), "'w'", "not a JSON object", NULL);

    write_hdr(tpath("dtype.safetensors"), "{\"layer.w\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 16);
    expect_fail(tpath("dtype.safetensors"), "'layer.w'", "unknown dtype 'F64'", NULL);
    write_hdr(tpath("nodtype.safetensors"), "{\"layer.w\":{\"shape\":[2],\"data_offsets\":[0,16]}}", 16);
    expect_fail(tpath("nodtype.safetensors"), "'layer.w'", "dtype", NULL);

    write_hdr(tpath("shape_neg.safetensors"), "{\"q\":{\"dtype\":\"F32\",\"shape\":[2,-1],\"data_offsets\":[0,8]}}", 8);
    expect_fail(tpath("shape_neg.safetensors"), "'q'", "shape", NULL);
    write_hdr(tpath("shape_str.safetensors"), "{\"q\":{\"dtype\":\"F32\",\"shape\":\"2x2\",\"data_offsets\":[0,16]}}",
              16);
    expect_fail(tpath("shape_str.safetensors"), "'q'", "shape", NULL);
    write_hdr(tpath("shape_frac.safetensors"), "{\"q\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 8);
    expect_fail(tpath("shape_frac.safetensors"), "'q'", "shape", NULL);
    write_hdr(tpath("shape_rank.safetensors"),
              "{\"q\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 8);
    expect_fail(tpath("shape_rank.safetensors"), "'q'", "at most 8", NULL);
    snprintf(big, sizeof big,
             "{\"q\":{\"dtype\":\"I64\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}");
    write_hdr(tpath("shape_ovf.safetensors"), big, 8);
    expect_fail(tpath("shape_ovf.safetensors"), "'q'", "overflows", NULL);

    write_hdr(tpath("off_range.safetensors"), "{\"k\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}", 16);
    expect_fail(tpath("off_range.safetensors"), "'k'", "data_offsets [8, 24]", "16-byte data section");
    write_hdr(tpath("off_rev.safetensors"), "{\"k\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,0]}}", 16);
    expect_fail(tpath("off_rev.safetensors"), "'k'", "reversed", NULL);
    write_hdr(tpath("off_bad.safetensors"), "{\"k\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0]}}", 16);
    expect_fail(tpath("off_bad.safetensors"), "'k'", "data_offsets", NULL);
    write_hdr(tpath("off_none.safetensors"), "{\"k\":{\"dtype\":\"F32\",\"shape\":[4]}}", 16);
    expect_fail(tpath("off_none.safetensors"), "'k'", "data_offsets", NULL);

    /* the data section ends early: offsets are consistent, the file is cut */
    write_hdr(tpath("trunc.safetensors"),
              "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"model.norm.weight\":{\"dtype\":\"F32\",\"shape\":[16],\"data_offsets\":[8,72]}}",
              20);
    expect_fail(tpath("trunc.safetensors"), "'model.norm.weight'", "truncated", NULL);

    write_hdr(tpath("overlap.safetensors"),
              "{\"first\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
              "\"second\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
              24);
    expect_fail(tpath("overlap.safetensors"), "'first'", "'second'", "overlap");

    write_hdr(tpath("size.safetensors"),
              "{\"model.layers.0.self_attn.q_proj.weight\":{\"dtype\":\"BF16\",\"shape\":[8,8],"
              "\"data_offsets\":[0,100]}}",
              128);
    expect_fail(tpath("size.safetensors"), "tensor 'model.layers.0.self_attn.q_proj.weight'",
                "data_offsets [0, 100] but shape [8, 8] x BF16 needs 128 bytes", NULL);

    write_hdr(tpath("twice.safetensors"),
              "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
              "\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
              2);
    expect_fail(tpath("twice.safetensors"), "'w'", "twice", NULL);

    write_hdr(tpath("meta.safetensors"), "{\"__metadata__\":{\"format\":1}}", 0);
    expect_fail(tpath("meta.safetensors"), "__metadata__", "'format'", NULL);

    /* valid corner cases: empty header object, zero-size tensors sharing an offset, padding */
    write_hdr(tpath("ok_empty.safetensors"), "{}      ", 0);
    write_hdr(tpath("ok_zero.safetensors"),
              "{\"z1\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
              "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"z2\":{\"dtype\":\"I64\",\"shape\":[3,0],\"data_offsets\":[4,4]}}  ",
              8);
    flint_err err = {0};
    flint_st *st = flint_st_open(tpath("ok_empty.safetensors"), &err);
    CHECKF(st && flint_st_count(st) == 0, "%s", err.msg);
    flint_st_close(st);
    st = flint_st_open(tpath("ok_zero.safetensors"), &err);
    CHECKF(st && flint_st_count(st) == 3, "%s", err.msg);
    flint_st_close(st);
}

static void test_expect(void) {
    float w[6] = {1, 2, 3, 4, 5, 6};
    flint_st_entry e[] = {{"model.embed_tokens.weight", FLINT_DT_F32, 2, {2, 3}, w}};
    flint_err err = {0};
    const char *p = tpath("expect.safetensors");
    CHECK(flint_st_write(p, e, 1, NULL, 0, &err) == 0);
    flint_st *st = flint_st_open(p, &err);
    CHECK(st != NULL);
    if (!st) return;
    int64_t good[2] = {2, 3}, bad[2] = {3, 2};
    CHECK(flint_st_expect(st, "model.embed_tokens.weight", 2, good, &err) != NULL);
    CHECK(flint_st_expect(st, "lm_head.weight", 2, good, &err) == NULL);
    CHECKF(strstr(err.msg, "'lm_head.weight'") && strstr(err.msg, "missing") && strstr(err.msg, p), "%s", err.msg);
    CHECK(flint_st_expect(st, "model.embed_tokens.weight", 2, bad, &err) == NULL);
    CHECKF(strstr(err.msg, "'model.embed_tokens.weight'") && strstr(err.msg, "shape [2, 3], expected [3, 2]") &&
               strstr(err.msg, p),
           "%s", err.msg);
    CHECK(flint_st_expect(st, "model.embed_tokens.weight", 1, good, &err) == NULL);
    CHECKF(strstr(err.msg, "expected [2]"), "%s", err.msg);
    flint_st_close(st);
}

static void mkd(const char *p) { CHECK(mkdir(p, 0755) == 0); }

static void test_dir(void) {
    float a[2] = {1, 2}, b[3] = {3, 4, 5};
    flint_err err = {0};
    char d[512], p[600];
    /* no shards */
    snprintf(d, sizeof d, "%s/empty_dir", tmpdir);
    mkd(d);
    flint_st *st = flint_st_open_dir(d, &err);
    CHECKF(!st && strstr(err.msg, d) && strstr(err.msg, "no *.safetensors"), "%s", err.msg);
    snprintf(p, sizeof p, "%s/nonexistent", tmpdir);
    st = flint_st_open_dir(p, &err);
    CHECKF(!st && strstr(err.msg, p), "%s", err.msg);

    /* two shards merge; a non-safetensors file and a subdirectory are ignored */
    snprintf(d, sizeof d, "%s/sharded", tmpdir);
    mkd(d);
    flint_st_entry e1[] = {{"model.layers.1.w", FLINT_DT_F32, 1, {3}, b}};
    flint_st_entry e0[] = {{"model.layers.0.w", FLINT_DT_F32, 1, {2}, a}, {"model.norm.weight", FLINT_DT_F32, 1, {1}, a}};
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", d);
    CHECK(flint_st_write(p, e1, 1, NULL, 0, &err) == 0);
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", d);
    CHECK(flint_st_write(p, e0, 2, NULL, 0, &err) == 0);
    snprintf(p, sizeof p, "%s/config.json", d);
    write_bytes(p, "{}", 2);
    snprintf(p, sizeof p, "%s/sub.safetensors", d);
    mkd(p);
    st = flint_st_open_dir(d, &err);
    CHECKF(st != NULL, "%s", err.msg);
    if (st) {
        CHECK(flint_st_count(st) == 3);
        CHECK(strcmp(flint_st_at(st, 0)->name, "model.layers.0.w") == 0); /* shards in name order */
        CHECK(strcmp(flint_st_at(st, 2)->name, "model.layers.1.w") == 0);
        const flint_tensor_info *t = flint_st_find(st, "model.layers.1.w");
        CHECK(t && strstr(t->file, "model-00002-of-00002.safetensors") && ((const float *)t->data)[2] == 5.f);
        flint_st_close(st);
    }

    /* a consolidated copy beside the shards: opening everything finds duplicate names... */
    snprintf(p, sizeof p, "%s/consolidated.safetensors", d);
    flint_st_entry all[] = {e0[0], e0[1], e1[0]};
    CHECK(flint_st_write(p, all, 3, NULL, 0, &err) == 0);
    st = flint_st_open_dir(d, &err);
    CHECKF(!st && strstr(err.msg, "two shards") && strstr(err.msg, "consolidated.safetensors") &&
               strstr(err.msg, "model-0000"),
           "%s", err.msg);
    /* ...while the index picks the shards it names */
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", d);
    const char *idx = "{\"metadata\":{},\"weight_map\":{\"model.layers.0.w\":\"model-00001-of-00002.safetensors\","
                      "\"model.norm.weight\":\"model-00001-of-00002.safetensors\","
                      "\"model.layers.1.w\":\"model-00002-of-00002.safetensors\"}}";
    write_bytes(p, idx, strlen(idx));
    st = flint_st_open_dir(d, &err);
    CHECKF(st && flint_st_count(st) == 3, "%s", err.msg);
    flint_st_close(st);
    /* an index that maps a tensor to the wrong shard */
    const char *idx_bad = "{\"weight_map\":{\"model.layers.0.w\":\"model-00002-of-00002.safetensors\","
                          "\"model.layers.1.w\":\"model-00002-of-00002.safetensors\"}}";
    write_bytes(p, idx_bad, strlen(idx_bad));
    st = flint_st_open_dir(d, &err);
    CHECKF(!st && strstr(err.msg, "'model.layers.0.w'") && strstr(err.msg, "index.json"), "%s", err.msg);
    const char *idx_missing = "{\"weight_map\":{\"x\":\"model-00009-of-00009.safetensors\"}}";
    write_bytes(p, idx_missing, strlen(idx_missing));
    st = flint_st_open_dir(d, &err);
    CHECKF(!st && strstr(err.msg, "model-00009-of-00009.safetensors"), "%s", err.msg);

    /* a broken shard names itself */
    snprintf(d, sizeof d, "%s/broken", tmpdir);
    mkd(d);
    snprintf(p, sizeof p, "%s/a.safetensors", d);
    CHECK(flint_st_write(p, e1, 1, NULL, 0, &err) == 0);
    snprintf(p, sizeof p, "%s/b.safetensors", d);
    write_hdr(p, "{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 4);
    st = flint_st_open_dir(d, &err);
    CHECKF(!st && strstr(err.msg, p) && strstr(err.msg, "'x'"), "%s", err.msg);
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip();
    test_reference_file();
    test_f16();
    test_bf16();
    test_bad_files();
    test_expect();
    test_dir();
    if (!test_failed) nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    else fprintf(stderr, "files kept in %s\n", tmpdir);
    return test_report("test_safetensors");
}
