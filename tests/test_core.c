/* core/: error values, arenas, buffers, JSON file helpers. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/arena.h"
#include "core/buffer.h"
#include "core/json.h"
#include "core/log.h"
#include "test.h"

static void test_err(void) {
    flint_err e = {0};
    CHECK(flint_err_set(&e, FLINT_ERR_IO, "x %d", 3) == -1);
    CHECK(e.code == FLINT_ERR_IO && !strcmp(e.msg, "x 3"));
    flint_err_prefix(&e, "loading %s: ", "a");
    CHECK(!strcmp(e.msg, "loading a: x 3"));
    flint_err_clear(&e);
    CHECK(e.code == FLINT_OK && e.msg[0] == 0);
    CHECK(flint_err_set(NULL, FLINT_ERR_IO, "ignored") == -1);
    flint_log_level lv;
    CHECK(flint_log_parse_level("debug", &lv) == 0 && lv == FLINT_LOG_DEBUG);
    CHECK(flint_log_parse_level("loud", &lv) == -1);
}

static void test_arena(void) {
    flint_arena a;
    CHECK(flint_arena_init(&a, 1000) == 0);
    char *p = flint_arena_alloc(&a, 3, 1);
    float *f = flint_arena_new(&a, float, 10);
    CHECK(((uintptr_t)f & 63) == 0 && (char *)f > p);
    CHECK(a.used <= 1000);
    flint_arena_reset(&a);
    CHECK(a.used == 0);
    flint_arena_free(&a);
}

static void test_buffer(void) {
    flint_err e = {0};
    flint_buf a, b;
    CHECK(flint_buf_alloc(&a, FLINT_DEV_CPU, 0, 64, &e) == 0);
    CHECK(flint_buf_alloc(&b, FLINT_DEV_CPU, 0, 64, &e) == 0);
    char src[16] = "hello, buffers!";
    CHECK(flint_buf_upload(&a, 8, src, 16, &e) == 0);
    CHECK(flint_buf_copy(&b, 0, &a, 8, 16, &e) == 0);
    char dst[16];
    CHECK(flint_buf_download(dst, &b, 0, 16, &e) == 0 && !memcmp(dst, src, 16));
    CHECK(flint_buf_upload(&a, 60, src, 16, &e) == -1 && strstr(e.msg, "out of range"));
    flint_buf_free(&a);
    flint_buf_free(&b);
    if (!flint_cuda_available()) {
        flint_buf c;
        CHECK(flint_buf_alloc(&c, FLINT_DEV_CUDA, 0, 64, &e) == -1);
    }
}

static void test_json(void) {
    char dir[] = "/tmp/flint_core_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/a.json", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"n\": 3, \"x\": 1.5, \"s\": \"str\", \"b\": true, \"bad\": \"7\", \"f\": 2.5}", f);
    fclose(f);
    flint_err e = {0};
    cJSON *j = flint_json_load_file(path, 1 << 20, &e);
    CHECK(j != NULL);
    int64_t n;
    double x;
    int b;
    CHECK(flint_json_need_int(j, "n", path, &n, &e) == 0 && n == 3);
    CHECK(flint_json_get_int(j, "missing", path, 9, &n, &e) == 0 && n == 9);
    CHECK(flint_json_need_int(j, "missing", path, &n, &e) == -1 && strstr(e.msg, "missing"));
    CHECK(flint_json_need_int(j, "bad", path, &n, &e) == -1 && strstr(e.msg, "integer"));
    CHECK(flint_json_need_int(j, "f", path, &n, &e) == -1);
    CHECK(flint_json_need_double(j, "x", path, &x, &e) == 0 && x == 1.5);
    CHECK(flint_json_get_bool(j, "b", path, 0, &b, &e) == 0 && b == 1);
    CHECK(flint_json_get_bool(j, "n", path, 0, &b, &e) == -1);
    CHECK(!strcmp(flint_json_get_string(j, "s", path, NULL, &e), "str"));
    CHECK(flint_json_get_string(j, "n", path, "d", &e) == NULL);
    cJSON_Delete(j);

    f = fopen(path, "w");
    fputs("{\n  \"a\": 1,\n  \"b\": }\n", f);
    fclose(f);
    CHECK(flint_json_load_file(path, 1 << 20, &e) == NULL && strstr(e.msg, "line 3") && strstr(e.msg, path));
    CHECK(flint_json_load_file(path, 4, &e) == NULL && strstr(e.msg, "more than"));
    snprintf(path, sizeof path, "%s/none.json", dir);
    CHECK(flint_json_load_file(path, 1 << 20, &e) == NULL && e.code == FLINT_ERR_IO && strstr(e.msg, "none.json"));
    CHECK(flint_json_load_file(dir, 1 << 20, &e) == NULL && strstr(e.msg, "not a regular file"));
    snprintf(path, sizeof path, "%s/a.json", dir);
    unlink(path);
    rmdir(dir);
}

int main(void) {
    test_err();
    test_arena();
    test_buffer();
    test_json();
    return test_report("test_core");
}
