/*
 * test_cli.c: the seer command-line tool end to end: golden greedy ids through
 * `seer generate --json` (with and without speculation), `seer info`, `seer gen-model`,
 * and clear failures with a non-zero exit on bad flags, files and prompts; names from a
 * hostile file printed escaped, tokens of any length printed whole.
 */
#include "testutil.h"

#include "backend/backend.h"
#include "gguf/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

/* Runs a shell command; captures stdout+stderr into out (NUL-terminated); returns the exit code. */
static int sh(char *out, size_t cap, const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char full[4200];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char buf[1 << 20];

static void test_generate_golden_json(void **state) {
    const char *model = tu_shared_path("models/stories260K.gguf");
    char m[1024];
    snprintf(m, sizeof m, "%s", model);
    const char *specs[] = {"none", "streaming --spec-budget 16", "ngram", "snapkv --spec-budget 24 --spec-window 4"};
    for (int k = 0; k < 4; k++) {
        int rc = sh(buf, sizeof buf,
                    "%s generate -m %s -p 'Lily and Tom' --temp 0 -n 300 --json --backend cpu --spec %s",
                    SEER_CLI, m, specs[k]);
        if (rc != 0)
            fail_msg("rc %d: %s", rc, buf);
        /* golden row "Lily and Tom": prompt 1,317,269,274,287; ids start 382,276,337 and end in BOS */
        assert_non_null(strstr(buf, "\"prompt_ids\":[1,317,269,274,287]"));
        assert_non_null(strstr(buf, "\"generated_ids\":[382,276,337,299,322,265"));
        assert_non_null(strstr(buf, "269,381,272,379,426,342,337,266,267,428,316,386,344,363,328,426,1]"));
        assert_non_null(strstr(buf, "\"text\":\" were playing in the park."));
    }
}

static void test_generate_stream_and_stats(void **state) {
    int rc = sh(buf, sizeof buf, "%s generate -m %s -p 'Once upon a time' --temp 0 -n 20 --spec streaming --spec-budget 8",
                SEER_CLI, tu_shared_path("models/stories260K.gguf"));
    assert_int_equal(rc, 0);
    assert_non_null(strstr(buf, ", there was a little girl named Lily."));
    assert_non_null(strstr(buf, "prefill"));
    assert_non_null(strstr(buf, "decode"));
    assert_non_null(strstr(buf, "tokens per verification"));
}

static void test_bad_input(void **state) {
    char m[1024];
    snprintf(m, sizeof m, "%s", tu_shared_path("models/stories260K.gguf"));
    struct {
        const char *args;
        int rc;
        const char *msg;
    } cases[] = {
        {"generate -m %s -p hi --temp abc", 2, "not a number"},
        {"generate -m %s -p hi --top-p 1.5", 2, "out of range"},
        {"generate -m %s -p hi -n -7", 2, "out of range"},
        {"generate -m %s -p hi --spec magic", 2, "unknown speculation"},
        {"generate -m %s -p hi --spec draft", 2, "--draft-model"},
        {"generate -m %s -p hi --bogus", 2, "unrecognized"},
        {"generate -m %s", 2, "-p PROMPT"},
        {"generate -m %s -p 'Once upon a time there was a girl' --ctx 4", 1, "context"},
        {"generate -m %s -p hi --backend tpu", 2, "not one of"},
        {"generate -m /nonexistent/model.gguf -p hi%.0s", 1, "nonexistent"},
        {"generate -m %s -p hi --spec draft --draft-model /nonexistent.gguf", 1, "draft"},
        {"info %s extra", 2, "unexpected"},
        {"frobnicate %s", 2, "unknown command"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char args[1200];
        snprintf(args, sizeof args, cases[i].args, m);
        int rc = sh(buf, sizeof buf, "%s %s", SEER_CLI, args);
        if (rc != cases[i].rc || !strstr(buf, cases[i].msg))
            fail_msg("'seer %s': rc %d (want %d), output: %s", args, rc, cases[i].rc, buf);
    }
    /* invalid UTF-8 in the prompt */
    const char *bad = tu_tmp_path("bad.txt");
    assert_int_equal(tu_write_file(bad, "ab\xff\xfe", 4), 0);
    int rc = sh(buf, sizeof buf, "%s generate -m %s -f %s", SEER_CLI, m, bad);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(buf, "UTF-8"));
    /* a truncated model file */
    size_t sz;
    uint8_t *data = tu_read_file(m, &sz);
    const char *trunc = tu_tmp_path("trunc.gguf");
    assert_int_equal(tu_write_file(trunc, data, sz / 3), 0);
    free(data);
    rc = sh(buf, sizeof buf, "%s generate -m %s -p hi", SEER_CLI, trunc);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(buf, "loading model"));
}

static void test_info_and_gen_model(void **state) {
    int rc = sh(buf, sizeof buf, "%s info %s", SEER_CLI, tu_shared_path("models/stories260K.gguf"));
    assert_int_equal(rc, 0);
    assert_non_null(strstr(buf, "architecture  llama"));
    assert_non_null(strstr(buf, "8 query, 4 kv"));
    assert_non_null(strstr(buf, "llama, 512 tokens"));
    assert_non_null(strstr(buf, "blk.4.ffn_down.weight"));
    const char *out = tu_tmp_path("g.gguf");
    rc = sh(buf, sizeof buf, "%s gen-model --arch qwen2 --vocab 400 --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 96 --dtype q8_0 -o %s",
            SEER_CLI, out);
    if (rc != 0)
        fail_msg("gen-model: %s", buf);
    rc = sh(buf, sizeof buf, "%s info %s", SEER_CLI, out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(buf, "architecture  qwen2"));
    assert_non_null(strstr(buf, "q8_0"));
    assert_non_null(strstr(buf, "blk.1.attn_q.bias"));
    rc = sh(buf, sizeof buf, "%s generate -m %s -p 'hello world' -n 8 --seed 3 --json", SEER_CLI, out);
    if (rc != 0)
        fail_msg("generate on a generated model: %s", buf);
    rc = sh(buf, sizeof buf, "%s gen-model --heads 3 --dim 64 -o %s", SEER_CLI, out);
    assert_int_not_equal(rc, 0);
}

static void test_small_things(void **state) {
    char m[1024];
    snprintf(m, sizeof m, "%s", tu_shared_path("models/stories260K.gguf"));
    /* -n 0 generates no token */
    int rc = sh(buf, sizeof buf, "%s generate -m %s -p 'Once upon a time' --temp 0 -n 0 --json --backend cpu",
                SEER_CLI, m);
    if (rc != 0 || !strstr(buf, "\"generated_ids\":[]") || !strstr(buf, "\"text\":\"\""))
        fail_msg("-n 0: rc %d: %s", rc, buf);
    rc = sh(buf, sizeof buf, "%s generate -m %s -p 'Once upon a time' --temp 0 -n 1 --json --backend cpu",
            SEER_CLI, m);
    if (rc != 0 || !strstr(buf, "\"generated_ids\":[432]"))
        fail_msg("-n 1: rc %d: %s", rc, buf);
    /* a directory is not a prompt file */
    const char *dir = tu_tmp_path("a-directory");
    mkdir(dir, 0700);
    rc = sh(buf, sizeof buf, "%s generate -m %s -f %s", SEER_CLI, m, dir);
    if (rc != 1 || !strstr(buf, "directory"))
        fail_msg("-f DIR: rc %d: %s", rc, buf);
    /* --backend cuda without a GPU names the missing device (or the missing backend) */
#ifdef SEER_HAVE_CUDA
    const bool no_gpu = !seer_backend_cuda_available();
    const char *want = "no CUDA device was found";
#else
    const bool no_gpu = true;
    const char *want = "no CUDA backend";
#endif
    if (no_gpu) {
        rc = sh(buf, sizeof buf, "%s generate -m %s -p hi --backend cuda", SEER_CLI, m);
        if (rc != 1 || !strstr(buf, want) || strstr(buf, "driver version"))
            fail_msg("--backend cuda: rc %d: %s", rc, buf);
    }
}

/* Copies the GGUF at src to dst with every piece of tokenizer.ggml.tokens that is a normal
 * token (type 1) replaced by piece_len bytes of one letter. */
static void rewrite_vocab(const char *src, const char *dst, size_t piece_len, const char *name) {
    gguf_file *f = NULL;
    ASSERT_OK(gguf_open(src, &f));
    const gguf_value *tok = NULL, *type = NULL;
    ASSERT_OK(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &tok));
    ASSERT_OK(gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_TYPE_COUNT, &type));
    const uint64_t n = tok->arr.n;
    char **pieces = calloc(n, sizeof *pieces);
    assert_non_null(pieces);
    for (uint64_t i = 0; i < n; i++) {
        const gguf_value *t = &tok->arr.items[i];
        const bool normal = type->arr.items[i].i64 == 1 || type->arr.items[i].u64 == 1;
        size_t len = normal ? piece_len : t->str.len;
        pieces[i] = malloc(len + 1);
        assert_non_null(pieces[i]);
        if (normal)
            memset(pieces[i], 'a' + (int)(i % 26), len);
        else
            memcpy(pieces[i], t->str.s, len);
        pieces[i][len] = 0;
    }
    gguf_writer *w = gguf_writer_init();
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const char *k = f->kv[i].key;
        if (!strcmp(k, "tokenizer.ggml.tokens"))
            gguf_writer_set_arr_str(w, k, (const char *const *)pieces, n);
        else if (!strcmp(k, "general.name") && name)
            gguf_writer_set_str(w, k, name);
        else
            ASSERT_OK(gguf_writer_set_value(w, k, &f->kv[i].val));
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        ASSERT_OK(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data));
    }
    ASSERT_OK(gguf_writer_write(w, dst));
    gguf_writer_free(w);
    for (uint64_t i = 0; i < n; i++)
        free(pieces[i]);
    free(pieces);
    gguf_close(f);
}

static void test_long_tokens_and_hostile_names(void **state) {
    const char *base = tu_tmp_path("base.gguf"), *lng = tu_tmp_path("long.gguf");
    int rc = sh(buf, sizeof buf, "%s gen-model --vocab 1000 --dim 32 --layers 1 --heads 2 --kv-heads 2 --ffn 48 -o %s",
                SEER_CLI, base);
    if (rc != 0)
        fail_msg("gen-model: %s", buf);
    /* every normal token is 3000 bytes long, more than any fixed buffer of the tool */
    const size_t piece = 3000;
    rewrite_vocab(base, lng, piece, "evil\x1b]0;owned\x07\x1b[2J\xc2\x9b" "1m");
    rc = sh(buf, sizeof buf, "%s generate -m %s -p 'x' --temp 0 -n 6 --ignore-eos --json", SEER_CLI, lng);
    if (rc != 0)
        fail_msg("generate: %s", buf);
    const char *g = strstr(buf, "\"generated_ids\":[");
    assert_non_null(g);
    g += strlen("\"generated_ids\":[");
    int n_long = 0;
    for (char *e; *g && *g != ']'; g = e + (*e == ',')) {
        long id = strtol(g, &e, 10);
        assert_true(e != g);
        n_long += id >= 259; /* after <unk>, <s>, </s> and the 256 byte tokens */
    }
    assert_true(n_long > 0);
    /* the streamed text holds every long token whole */
    rc = sh(buf, sizeof buf, "%s generate -m %s -p 'x' --temp 0 -n 6 --ignore-eos 2>/dev/null", SEER_CLI, lng);
    assert_int_equal(rc, 0);
    size_t letters = 0;
    for (const char *p = buf; *p; p++)
        letters += *p >= 'a' && *p <= 'z';
    if (letters < (size_t)n_long * piece)
        fail_msg("%zu letters printed for %d tokens of %zu", letters, n_long, piece);

    /* and so does chat's reply (it used fixed buffers of 1 KiB) */
    rc = sh(buf, sizeof buf, "echo hi | %s chat -m %s --chat-template chatml --temp 0 -n 4 2>/dev/null",
            SEER_CLI, lng);
    assert_int_equal(rc, 0);
    letters = 0;
    for (const char *p = buf; *p; p++)
        letters += *p >= 'a' && *p <= 'z';
    if (letters < piece)
        fail_msg("chat printed %zu letters: %.200s", letters, buf);

    /* a name with terminal escapes is printed escaped, by info and in messages */
    rc = sh(buf, sizeof buf, "%s info %s --meta", SEER_CLI, lng);
    assert_int_equal(rc, 0);
    if (!strstr(buf, "name          evil\\x1b]0;owned\\x07\\x1b[2J\\u009b1m"))
        fail_msg("info: %s", buf);
    for (const char *p = buf; *p; p++)
        if (*p == 0x1b || *p == 0x07 || (*p == '\xc2' && p[1] == '\x9b'))
            fail_msg("a control character reached the output at %zu", (size_t)(p - buf));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generate_golden_json),
        cmocka_unit_test(test_generate_stream_and_stats),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_info_and_gen_model),
        cmocka_unit_test(test_small_things),
        cmocka_unit_test(test_long_tokens_and_hostile_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
