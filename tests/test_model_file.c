/*
 * test_model_file.c: a loaded model does not depend on its file any more. The file truncated
 * to nothing, or rewritten in place with other bytes, under a loaded model: generation still
 * gives the same greedy ids and the tokenizer the same tokens, without a fault (the weights
 * were a mapping of the file, and a truncated file's pages faulted with SIGBUS). Also the
 * reader's own side: a seer_gguf_file_open file read after its file changed, and seer_gguf_drop_tensor_data.
 * Not for the GGUF format itself (test_gguf.c).
 */
#include "testutil.h"

#include "gguf/gguf.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A copy of stories260K at a fresh temp path; its size in *size. */
static const char *copy_model(const char *name, size_t *size) {
    uint8_t *buf = tu_read_file(tu_data_path("models/stories260K.gguf"), size);
    assert_non_null(buf);
    const char *path = tu_tmp_path(name);
    assert_int_equal(tu_write_file(path, buf, *size), 0);
    free(buf);
    return path;
}

/* Overwrites the file in place (no truncation first: the inode and size stay) with bytes
 * that are not the model's. */
static void scribble(const char *path, size_t size) {
    uint8_t *junk = malloc(size);
    assert_non_null(junk);
    uint64_t rs = 7;
    for (size_t i = 0; i < size; i++)
        junk[i] = (uint8_t)tu_rand_u64(&rs);
    const int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, junk, size, 0), (ssize_t)size);
    close(fd);
    free(junk);
}

static void greedy(seer_model *m, const int32_t *prompt, int plen, tu_output *out) {
    tu_gen_ctx cx = {.n_ctx = 256, .page_size = 16, .n_batch_max = 64};
    tu_gen_run(m, tu_spec(SEER_SPEC_NONE, 0, 0), prompt, 64, &plen, 1, 48, tu_greedy(), cx, out,
               NULL);
}

static void test_file_changed_under_model(void **state) {
    (void)state;
    size_t size;
    const char *path = copy_model("changing.gguf", &size);
    seer_model *m = tu_load_cpu(path);
    int32_t prompts[5][64], plen[5];
    tu_output gold[5], before, after;
    assert_int_equal(tu_read_golden(prompts, plen, gold), 5);
    const char *text = "Once upon a time, there was a little dog.";
    int32_t tok0[64], tok1[64];
    int n0 = 0, n1 = 0;
    ASSERT_OK(seer_tokenize(m, text, strlen(text), true, false, tok0, 64, &n0));
    greedy(m, prompts[0], plen[0], &before);

    assert_int_equal(truncate(path, 0), 0); /* a mapped model faulted here (SIGBUS) */
    greedy(m, prompts[0], plen[0], &after);
    tu_assert_same(&after, &before, "after the file was truncated");

    scribble(path, size); /* a mapped model read these bytes as its weights */
    greedy(m, prompts[0], plen[0], &after);
    tu_assert_same(&after, &before, "after the file was overwritten in place");
    ASSERT_OK(seer_tokenize(m, text, strlen(text), true, false, tok1, 64, &n1));
    assert_int_equal(n1, n0);
    assert_memory_equal(tok1, tok0, (size_t)n0 * sizeof *tok0);
    seer_model_free(m);

    /* and the changed file is now refused with a message, not loaded */
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CPU;
    seer_model *m2 = (seer_model *)0x1;
    assert_int_not_equal(seer_model_load(path, mp, &m2), SEER_OK);
    assert_null(m2);
    unlink(path);
}

static void test_gguf_copy_and_drop(void **state) {
    (void)state;
    size_t size;
    const char *path = copy_model("reader.gguf", &size);
    gguf_file *f = NULL;
    ASSERT_OK(seer_gguf_file_open(path, &f));
    assert_int_equal(truncate(path, 0), 0);
    const gguf_tensor *t = seer_gguf_find_tensor(f, "token_embd.weight");
    assert_non_null(t);
    float *v = malloc(64 * sizeof *v);
    assert_non_null(v);
    ASSERT_OK(seer_gguf_tensor_dequant(t, v, 64)); /* the bytes of a file that no longer has them */
    float sum = 0;
    for (int i = 0; i < 64; i++)
        sum += v[i] * v[i];
    assert_true(sum > 0);
    char arch[64];
    ASSERT_OK(seer_gguf_get_str(f, "general.architecture", arch, sizeof arch));
    assert_string_equal(arch, "llama");

    /* the tensor bytes given back: metadata stays readable, tensors read as zeros */
    const gguf_tensor *big = NULL;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (!big || f->tensors[i].nbytes > big->nbytes)
            big = &f->tensors[i];
    seer_gguf_drop_tensor_data(f);
    assert_true(f->data_dropped);
    ASSERT_OK(seer_gguf_get_str(f, "general.architecture", arch, sizeof arch));
    assert_string_equal(arch, "llama");
    const uint8_t *b = big->data;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    assert_true(big->nbytes > 3 * page);
    for (size_t i = page; i + page < big->nbytes; i++) /* whole pages inside the tensor */
        if (b[i])
            fail_msg("byte %zu of %s is %d after the data was dropped", i, big->name, b[i]);
    seer_gguf_file_close(f);
    free(v);
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_changed_under_model),
        cmocka_unit_test(test_gguf_copy_and_drop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
