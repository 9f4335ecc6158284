/* evals/dataset: the shipped prompt sets load with their documented record counts, turns and
 * categories; names, aliases and NAME:CATEGORY resolve; JSONL quirks (blank lines, CRLF, U+2028
 * inside strings) are read; every malformed record is an error naming the file and the line; a
 * ShareGPT JSON array is read; prompts render through a chat template with earlier answers in
 * place. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/chat.h"
#include "core/tokenizer.h"
#include "evals/dataset.h"
#include "test.h"

#define DATA FLINT_SOURCE_DIR "/evals/data"

static char tmpdir[256];

static const char *write_tmp(const char *name, const char *text) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
    return path;
}

static int n_categories(const flint_dataset *d) {
    int n = 0;
    for (int i = 0; i < d->n; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++) seen = !strcmp(d->items[j].category, d->items[i].category);
        n += !seen;
    }
    return n;
}

static void test_shipped(void) {
    struct {
        const char *name;
        int n, turns0, cats;
    } want[] = {{"gsm8k", 1319, 1, 1},     {"mt_bench", 80, 2, 8},    {"humaneval", 164, 1, 1},
                {"mbpp", 257, 1, 1},       {"spec_bench", 480, 2, 13}, {"sharegpt", 500, 1, 1}};
    flint_err err = {0};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        flint_dataset *d = flint_dataset_load(want[i].name, DATA, &err);
        CHECKF(d != NULL, "%s: %s", want[i].name, err.msg);
        if (!d) continue;
        CHECKF(d->n == want[i].n, "%s: %d records", want[i].name, d->n);
        CHECKF(d->items[0].n_turns == want[i].turns0, "%s: %d turns", want[i].name, d->items[0].n_turns);
        CHECKF(n_categories(d) == want[i].cats, "%s: %d categories", want[i].name, n_categories(d));
        CHECK(d->items[0].record == 0 && d->items[d->n - 1].record == d->n - 1);
        flint_dataset_free(d);
    }
    flint_dataset *d = flint_dataset_load("mt-bench", DATA, &err);
    CHECK(d && !strcmp(d->name, "mt_bench") && !strcmp(d->items[0].id, "81") &&
          !strcmp(d->items[0].category, "writing"));
    flint_dataset_free(d);
    d = flint_dataset_load("spec_bench:translation", DATA, &err);
    CHECKF(d && d->n == 80 && !strcmp(d->name, "spec_bench:translation"), "%s", err.msg);
    /* a filtered item keeps its record number in the file (its seed offset) */
    CHECK(d && d->items[0].record == 80);
    flint_dataset_free(d);
    d = flint_dataset_load("humaneval", DATA, &err);
    CHECK(d && !strcmp(d->items[0].id, "HumanEval/0") && strstr(d->items[0].turns[0], "has_close_elements"));
    flint_dataset_free(d);

    CHECK(flint_dataset_load("gsm9k", DATA, &err) == NULL && err.code == FLINT_ERR_INVALID &&
          strstr(err.msg, "unknown dataset 'gsm9k'") && strstr(err.msg, "spec_bench"));
    CHECK(flint_dataset_load("spec_bench:poetry", DATA, &err) == NULL && strstr(err.msg, "no category 'poetry'"));
    CHECK(flint_dataset_load("gsm8k", "/nonexistent", &err) == NULL && err.code == FLINT_ERR_IO);
}

static void test_files(void) {
    flint_err err = {0};
    /* blank lines, CRLF, a U+2028 inside a string, numbers as ids, prompt records */
    const char *p = write_tmp("good.jsonl",
                              "{\"turns\": [\"a\\u2028b\", \"second\"], \"category\": \"x\", \"id\": 7}\r\n"
                              "\n"
                              "{\"prompt\": \"raw \xe2\x80\xa8 text\", \"question_id\": \"q2\"}\n"
                              "   \n"
                              "{\"turns\": [\"third\"], \"task_id\": 12.5, \"extra\": [1, 2]}");
    flint_dataset *d = flint_dataset_load(p, NULL, &err);
    CHECKF(d && d->n == 3, "%s", err.msg);
    if (d) {
        CHECK(!strcmp(d->name, "good"));
        CHECK(d->items[0].n_turns == 2 && !strcmp(d->items[0].turns[0], "a\xe2\x80\xa8" "b") &&
              !strcmp(d->items[0].id, "7") && !strcmp(d->items[0].category, "x"));
        CHECK(d->items[1].n_turns == 1 && !strcmp(d->items[1].id, "q2") && !strcmp(d->items[1].category, "good") &&
              strstr(d->items[1].turns[0], "\xe2\x80\xa8"));
        CHECK(!strcmp(d->items[2].id, "12.5") && d->items[2].record == 2);
    }
    flint_dataset_free(d);

    struct {
        const char *text, *want;
    } bad[] = {
        {"{\"turns\": [\"ok\"]}\n{\"turns\": [\"ok\"]}\n{\"turns\": [\"broken\"\n", "bad.jsonl:3: malformed JSON"},
        {"{\"turns\": [\"ok\"]}\n{\"question\": \"no prompt\"}\n", "bad.jsonl:2: the record has neither"},
        {"{\"turns\": [1, 2]}\n", "bad.jsonl:1: \"turns\" must be a non-empty list of strings"},
        {"{\"turns\": []}\n", "bad.jsonl:1: \"turns\" must be"},
        {"{\"prompt\": 5}\n", "bad.jsonl:1: \"prompt\" must be a string"},
        {"\n\n{\"turns\": [\"  \"]}\n", "bad.jsonl:3: turn 1 is empty"},
        {"{\"turns\": [\"ok\"], \"category\": 3}\n", "bad.jsonl:1: \"category\" must be a string"},
        {"{\"turns\": [\"ok\"]} trailing\n", "bad.jsonl:1: malformed JSON (text after the record)"},
        {"[1, 2]\n", "bad.jsonl: record 0: a record must be a JSON object"},
        {"\n\n", "bad.jsonl: no records"},
        {"{\"turns\": [\"ok\"], \"id\": [1]}\n", "bad.jsonl:1: \"id\" must be a string or a number"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p = write_tmp("bad.jsonl", bad[i].text);
        flint_err_clear(&err);
        d = flint_dataset_load(p, NULL, &err);
        CHECKF(d == NULL && err.code == FLINT_ERR_FORMAT && strstr(err.msg, bad[i].want), "case %zu: %s", i, err.msg);
        flint_dataset_free(d);
    }

    /* ShareGPT array: user turns only */
    p = write_tmp("sg.json", "[{\"id\": \"a\", \"conversations\": [{\"from\": \"human\", \"value\": \"hi\"}, "
                             "{\"from\": \"gpt\", \"value\": \"hello\"}, {\"from\": \"human\", \"value\": \"more\"}]},"
                             " {\"id\": \"b\", \"conversations\": [{\"role\": \"user\", \"content\": \"x\"}]}]");
    d = flint_dataset_load(p, NULL, &err);
    CHECKF(d && d->n == 2 && d->items[0].n_turns == 2 && !strcmp(d->items[0].turns[1], "more") &&
           !strcmp(d->items[1].id, "b"), "%s", err.msg);
    flint_dataset_free(d);
    p = write_tmp("sg2.json", "[{\"conversations\": [{\"from\": \"gpt\", \"value\": \"x\"}]}]");
    CHECK(flint_dataset_load(p, NULL, &err) == NULL && strstr(err.msg, "record 0: the conversation has no user turn"));
}

static void test_render(void) {
    flint_err err = {0};
    flint_tokenizer *tok =
        flint_tokenizer_open(FLINT_SOURCE_DIR "/tests/fixtures/tokenizer/gpt2mini/tokenizer.json", &err);
    CHECKF(tok != NULL, "%s", err.msg);
    if (!tok) return;
    char *turns[2] = {"What is two plus two?", "And times three?"};
    flint_dataset_item it = {.id = "1", .category = "c", .n_turns = 2, .turns = turns};
    const char *answers[1] = {"Four."};
    int32_t *ids;
    int n;
    char *text;
    size_t len;
    CHECK(flint_dataset_encode(tok, &it, 1, answers, FLINT_CHAT_CHATML, &ids, &n, &err) == 0);
    CHECK(flint_tokenizer_decode(tok, ids, n, 0, &text, &len, &err) == 0);
    CHECKF(strstr(text, "<|im_start|>user\nWhat is two plus two?<|im_end|>\n<|im_start|>assistant\nFour.<|im_end|>\n"
                        "<|im_start|>user\nAnd times three?<|im_end|>\n<|im_start|>assistant\n") != NULL &&
               !strcmp(text + strlen(text) - strlen("assistant\n"), "assistant\n"),
           "%s", text);
    free(ids);
    free(text);
    /* raw: the first turn with the tokenizer's own special tokens, as a plain encode */
    int32_t *ref;
    int nref;
    CHECK(flint_dataset_encode(tok, &it, 0, NULL, FLINT_CHAT_NONE, &ids, &n, &err) == 0);
    CHECK(flint_tokenizer_encode(tok, turns[0], strlen(turns[0]), 1, &ref, &nref, &err) == 0);
    CHECK(n == nref && !memcmp(ids, ref, sizeof(int32_t) * (size_t)n));
    free(ids);
    free(ref);
    CHECK(flint_dataset_encode(tok, &it, 1, answers, FLINT_CHAT_NONE, &ids, &n, &err) == -1);
    flint_tokenizer_close(tok);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/flint_evals_ds_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    test_shipped();
    test_files();
    test_render();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd)) {}
    return test_report("test_evals_dataset");
}
